#include "http/downsample.h"

#include <algorithm>
#include <cmath>

namespace ablate::server::http {

std::vector<Point> DownsampleMinMax(const std::vector<Point>& points, size_t max_points) {
  max_points = std::max<size_t>(max_points, 2);
  const size_t n = points.size();
  if (n <= max_points) return points;
  // The first and last points take one slot each; the interior gets (max_points - 2) / 2 buckets
  // of two points each.
  const size_t buckets = std::max<size_t>((max_points - 2) / 2, 1);
  const size_t interior = n - 2;
  std::vector<Point> out;
  out.reserve(max_points);
  out.push_back(points.front());
  for (size_t b = 0; b < buckets; ++b) {
    size_t lo = 1 + interior * b / buckets, hi = 1 + interior * (b + 1) / buckets;
    if (lo >= hi) continue;
    size_t imin = hi, imax = hi;
    for (size_t i = lo; i < hi; ++i) {
      double v = points[i].value;
      if (std::isnan(v)) continue;
      if (imin == hi || v < points[imin].value) imin = i;
      if (imax == hi || v > points[imax].value) imax = i;
    }
    if (imin == hi) {  // only NaNs
      out.push_back(points[lo]);
      continue;
    }
    size_t a = std::min(imin, imax), c = std::max(imin, imax);
    out.push_back(points[a]);
    if (c != a) out.push_back(points[c]);
  }
  out.push_back(points.back());
  return out;
}

}  // namespace ablate::server::http

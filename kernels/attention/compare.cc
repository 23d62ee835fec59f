// Accuracy measures of kernels/ALGORITHMS.md §1, accumulated in double in index order.
#include <cmath>
#include <limits>

#include "attention/attention_cpu.h"

namespace ablate::kernels {

template <typename TX, typename TY>
ErrorStats CompareTensors(const TX* x, const TY* y, int64_t n) {
  double xy = 0, xx = 0, yy = 0, dd = 0, abs_d = 0, abs_y = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double a = static_cast<double>(x[i]);
    const double b = static_cast<double>(y[i]);
    xy += a * b;
    xx += a * a;
    yy += b * b;
    dd += (a - b) * (a - b);
    abs_d += std::fabs(a - b);
    abs_y += std::fabs(b);
  }
  // Degenerate references: two zero tensors agree perfectly; anything against zero does not.
  const double inf = std::numeric_limits<double>::infinity();
  ErrorStats st;
  if (xx == 0 || yy == 0) {
    st.cosine = (xx == 0 && yy == 0) ? 1.0 : 0.0;
  } else {
    st.cosine = xy / (std::sqrt(xx) * std::sqrt(yy));
  }
  st.rel_l2 = yy > 0 ? std::sqrt(dd) / std::sqrt(yy) : (dd == 0 ? 0.0 : inf);
  st.rel_l1 = abs_y > 0 ? abs_d / abs_y : (abs_d == 0 ? 0.0 : inf);
  return st;
}

template ErrorStats CompareTensors<float, double>(const float*, const double*, int64_t);
template ErrorStats CompareTensors<double, double>(const double*, const double*, int64_t);
template ErrorStats CompareTensors<float, float>(const float*, const float*, int64_t);

}  // namespace ablate::kernels

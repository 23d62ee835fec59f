// Server-side downsampling of a metric series for the dashboard (docs/design.md: "fast at 10,000
// trials: server-side downsampling").
#pragma once

#include <cstddef>
#include <vector>

#include "store/store.h"

namespace ablate::server::http {

// Reduces `points` (sorted by step) to at most `max_points` points by splitting the step order into
// max_points / 2 buckets of consecutive points and keeping, from each bucket, the point with the
// minimum value and the one with the maximum value (in step order; one point when they coincide).
// Spikes and dips therefore survive, unlike with averaging or striding. The first and last points
// of the series are always kept. NaN values count as neither min nor max; a bucket of only NaNs
// keeps its first point (a divergence stays visible). Returns the input unchanged when it already
// fits; max_points < 2 is treated as 2.
std::vector<Point> DownsampleMinMax(const std::vector<Point>& points, size_t max_points);

}  // namespace ablate::server::http

// Order statistics of repeated measurements: min, median, max, mean and percentiles, the one
// definition every vramkit benchmark and the probe use (so they agree on, say, the median of an
// even count). Pure functions on values; thread-safe.
#pragma once

#include <cstddef>
#include <initializer_list>
#include <vector>

namespace vramkit {

/// min / median / max / mean of a set of samples, and how many there were.
struct sample_stats {
  double min = 0, median = 0, max = 0, mean = 0;
  std::size_t count = 0;

  /// Stats of `samples`; the median of an even count is the mean of the middle two; all zero when
  /// `samples` is empty.
  static sample_stats of(std::vector<double> samples);
};

/// The q-quantile (0 <= q <= 1) of `samples` by linear interpolation between the closest ranks
/// (numpy's default, Hyndman and Fan type 7): q = 0 is the min, 1 the max, 0.5 the median as
/// sample_stats defines it. 0 when `samples` is empty; throws std::invalid_argument for q outside
/// [0, 1] or NaN.
double percentile(std::vector<double> samples, double q);

/// The same on samples already sorted ascending (no copy, no sort).
double percentile_of_sorted(const std::vector<double>& sorted, double q);

/// Several quantiles of `samples` with one sort, in the order of `qs`.
std::vector<double> percentiles(std::vector<double> samples, std::initializer_list<double> qs);

}  // namespace vramkit

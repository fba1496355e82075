// sample_stats and percentiles (see sample_stats.hpp).
#include "vramkit/core/sample_stats.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>

namespace vramkit {

double percentile_of_sorted(const std::vector<double>& sorted, double q) {
  if (!(q >= 0.0 && q <= 1.0)) throw std::invalid_argument("percentile: q must be in [0, 1]");
  if (sorted.empty()) return 0;
  // Rank h = q (n - 1): between sorted[floor h] and sorted[floor h + 1], linearly.
  const double h = q * static_cast<double>(sorted.size() - 1);
  const auto lo = static_cast<std::size_t>(std::floor(h));
  const std::size_t hi = std::min(lo + 1, sorted.size() - 1);
  const double frac = h - static_cast<double>(lo);
  return sorted[lo] + frac * (sorted[hi] - sorted[lo]);
}

double percentile(std::vector<double> samples, double q) {
  std::sort(samples.begin(), samples.end());
  return percentile_of_sorted(samples, q);
}

std::vector<double> percentiles(std::vector<double> samples, std::initializer_list<double> qs) {
  std::sort(samples.begin(), samples.end());
  std::vector<double> out;
  out.reserve(qs.size());
  for (double q : qs) out.push_back(percentile_of_sorted(samples, q));
  return out;
}

sample_stats sample_stats::of(std::vector<double> samples) {
  sample_stats s;
  if (samples.empty()) return s;
  std::sort(samples.begin(), samples.end());
  s.count = samples.size();
  s.min = samples.front();
  s.max = samples.back();
  s.median = percentile_of_sorted(samples, 0.5);
  s.mean = std::accumulate(samples.begin(), samples.end(), 0.0) / static_cast<double>(s.count);
  return s;
}

}  // namespace vramkit

// sample_stats and byte_convention names for the probe's result model.
#include "vramkit/probe/measurement.hpp"

#include <algorithm>

namespace vramkit::probe {

const char* to_string(byte_convention c) noexcept {
  switch (c) {
    case byte_convention::none:
      return "none";
    case byte_convention::copied_once:
      return "copied_once";
    case byte_convention::read_plus_written:
      return "read_plus_written";
    case byte_convention::read:
      return "read";
    case byte_convention::written:
      return "written";
  }
  return "none";
}

const char* to_string(verdict_kind v) noexcept {
  switch (v) {
    case verdict_kind::normal:
      return "normal";
    case verdict_kind::low:
      return "low";
    case verdict_kind::high:
      return "high";
    case verdict_kind::unknown:
      return "unknown";
  }
  return "unknown";
}

sample_stats sample_stats::of(std::vector<double> samples) {
  sample_stats s;
  if (samples.empty()) return s;
  std::sort(samples.begin(), samples.end());
  const std::size_t n = samples.size();
  s.min = samples.front();
  s.max = samples.back();
  s.median = n % 2 == 1 ? samples[n / 2] : 0.5 * (samples[n / 2 - 1] + samples[n / 2]);
  return s;
}

}  // namespace vramkit::probe

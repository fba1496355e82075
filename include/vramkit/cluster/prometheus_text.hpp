// A reader for the Prometheus text exposition format (version 0.0.4) and the mapping from
// vramkit's exporter metrics to GPU states. Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "vramkit/cluster/gpu_state.hpp"

namespace vramkit::cluster {

/// One sample line: `name{label="value",...} value [timestamp_ms]`.
struct metric_sample {
  std::string name;
  std::vector<std::pair<std::string, std::string>> labels;  ///< unescaped values, in line order
  double value = 0.0;                                       ///< NaN, +Inf and -Inf allowed
  std::optional<std::int64_t> timestamp_ms;

  /// The value of label `key`, or nullptr when the sample has no such label.
  [[nodiscard]] const std::string* label(std::string_view key) const noexcept;
};

/// Parses exposition text: skips blank lines and `#` comments (HELP, TYPE and others), unescapes
/// label values (\\, \", \n), accepts NaN/+Inf/-Inf and an optional integer timestamp. Throws
/// invalid_input "metrics line N: ..." on a malformed line.
[[nodiscard]] std::vector<metric_sample> parse_prometheus_text(std::string_view text);

/// The GPUs described by vramkit exporter metrics (vramkit_gpu_memory_{total,used,free,reserved}
/// _bytes and vramkit_gpu_up, labelled gpu="N", uuid, name), in GPU index order. A GPU needs a
/// total; a missing free figure is total - used; vramkit_gpu_up 0 marks
/// it down. Other metrics are ignored. Throws invalid_input when a gpu label is not an index.
[[nodiscard]] std::vector<gpu_state> gpus_from_metrics(const std::vector<metric_sample>& samples);

}  // namespace vramkit::cluster

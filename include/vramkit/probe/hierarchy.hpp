// The memory hierarchy at a glance: one row per level of a probe report, from the GPU's L1 and L2
// through device memory and the host link to host DRAM per NUMA node and far (memory-only)
// memory, each with its measured bandwidth and latency, % of its physical peak and verdict. What
// the table and the HTML page show first. Pure; thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "vramkit/probe/measurement.hpp"

namespace vramkit::probe {

/// One level: its figures and which measurements they come from (keys empty when not measured).
struct hierarchy_level {
  std::string name;    ///< "L1/shared", "L2", "HBM", "host link (H2D)", "host DRAM", "NUMA 2 ..."
  std::string device;  ///< "gpu0", "host", "numa2"
  std::optional<double> bandwidth_gbps;
  std::string bandwidth_key;
  std::optional<double> latency_ns;
  std::string latency_key;
  std::optional<double> percent_of_peak;  ///< of the bandwidth figure's peak
  std::optional<std::uint64_t> size_bytes;
  verdict_kind verdict = verdict_kind::unknown;  ///< the worse of the two figures' verdicts
  std::string note;                              ///< e.g. "memory-only node", "D2H 55.1 GB/s"
};

/// The levels `report` has at least one figure for, fastest first: per GPU L1/shared, L2, HBM
/// and the host link, then host DRAM, each NUMA node (when there are several), memory-only nodes
/// last.
std::vector<hierarchy_level> hierarchy(const probe_report& report);

}  // namespace vramkit::probe

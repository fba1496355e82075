// The memory state of one node's GPUs as the placement logic sees it: capacity, what is in use,
// what the driver reserves, and what is free. Plain values; safe to copy between threads.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace vramkit::cluster {

/// One GPU's memory figures in bytes, as NVML's v2 memory query reports them: `used_bytes` includes
/// the driver-reserved `reserved_bytes`. `free_bytes` is what the exporter or driver reports as
/// free; when a source gives no free figure it is total - used (never below zero).
struct gpu_state {
  int index = 0;
  std::string uuid;
  std::string name;
  std::uint64_t total_bytes = 0;
  std::uint64_t used_bytes = 0;
  std::uint64_t reserved_bytes = 0;
  std::uint64_t free_bytes = 0;
  bool up = true;  ///< false when the exporter reports the GPU as not answering
};

/// A node: its scheduler-side name and its GPUs in index order.
struct node_state {
  std::string name;
  std::vector<gpu_state> gpus;
};

/// total - used, clamped at zero: the free figure when a source does not report one.
[[nodiscard]] constexpr std::uint64_t derived_free_bytes(std::uint64_t total,
                                                         std::uint64_t used) noexcept {
  return used >= total ? 0 : total - used;
}

/// Reads the fake-GPU fixture shared with `vramkit serve --fake-gpus`:
///   {"gpus": [{"name": "NVIDIA H200", "uuid": "GPU-…", "memory_total_bytes": N,
///              "memory_used_bytes": N, "memory_reserved_bytes": N, "processes": [...]}]}
/// GPUs are indexed in array order; used includes reserved. Throws invalid_input naming `origin`
/// and the field on bad input.
[[nodiscard]] std::vector<gpu_state> gpus_from_fixture_json(std::string_view json_text,
                                                            std::string_view origin = "fixture");

}  // namespace vramkit::cluster

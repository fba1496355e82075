// allocator_comparison: replays one allocation trace through several allocators and reports, for
// each, peak requested and reserved bytes, segments and remaps, and with a capacity whether the
// trace fits and where it first fails. vramkit's pools run for real on a simulated device (no
// memory is touched, so a trace of a 140 GB step replays on a laptop); PyTorch's native caching
// allocator and its expandable segments run as the planner's models. Thread-safe (no shared
// state).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "vramkit/mr/trace.hpp"

namespace vramkit::mr {

/// What one allocator did with a trace.
struct allocator_replay_result {
  std::string name;
  bool is_default = false;  ///< the pool vramkit's C API and PyTorch allocator use by default
  bool is_model = false;    ///< a model of another allocator, not the allocator itself
  std::uint64_t peak_requested_bytes = 0;
  std::uint64_t peak_reserved_bytes = 0;
  std::uint64_t segments = 0;  ///< peak segments (vramkit: runs of mapped granules or chunks)
  std::uint64_t remaps = 0;    ///< granules unmapped from free space and mapped elsewhere
  /// With a capacity: whether every allocation was served within it.
  std::optional<bool> fits;
  /// Peak reserved bytes over passes 1..k, one entry per pass (comparison_options::passes).
  std::vector<std::uint64_t> pass_peak_reserved_bytes;
  /// With a capacity that does not fit: the first failing pass and event (1-based, among the
  /// trace's events), its size and the bytes requested and live just before it.
  unsigned first_failure_pass = 0;
  std::uint64_t first_failure_event = 0;
  std::uint64_t first_failure_bytes = 0;
  std::uint64_t first_failure_live_bytes = 0;
  [[nodiscard]] double ratio() const noexcept {
    return peak_requested_bytes == 0 ? 0.0
                                     : static_cast<double>(peak_reserved_bytes) /
                                           static_cast<double>(peak_requested_bytes);
  }
};

/// The allocators compare_allocators knows, in output order: "vramkit_vmm_pool",
/// "vramkit_pool", "pytorch_native", "pytorch_expandable_segments".
std::vector<std::string> comparable_allocators();

struct comparison_options {
  std::vector<std::string> allocators;          ///< names of comparable_allocators(); empty = all
  std::optional<std::uint64_t> capacity_bytes;  ///< the device's memory, when asked to fit
  /// Times the trace is replayed back to back through the same allocator, as a training loop
  /// repeats its step: every block the trace leaves live is freed (in allocation order) before
  /// the next pass, cached memory is kept. Peaks are over all passes; PyTorch's native allocator
  /// fragments further on a second pass of some traces (llama_step: 1.050 -> 1.078 x requested).
  unsigned passes = 1;
};

/// Most passes compare_allocators accepts.
inline constexpr unsigned max_replay_passes = 100;

/// Replays `t` through each allocator; throws vramkit::invalid_input for an unknown allocator name
/// or a pass count outside 1..max_replay_passes.
std::vector<allocator_replay_result> compare_allocators(const trace& t,
                                                        const comparison_options& options);

/// The results as one JSON object (schema_version 1, "allocators": [...]).
std::string comparison_to_json(const std::vector<allocator_replay_result>& results,
                               const comparison_options& options);
/// The results as a table, one row per allocator.
std::string comparison_to_table(const std::vector<allocator_replay_result>& results,
                                const comparison_options& options);

}  // namespace vramkit::mr

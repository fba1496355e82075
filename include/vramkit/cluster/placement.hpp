// Memory-aware placement on one node: does a request of N bytes fit on one of its GPUs, on which,
// and how good a choice it is under a policy (pack = best fit, spread = most room left). Pure
// functions of their arguments; thread-safe; no allocation on the hot path beyond the reason text.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "vramkit/cluster/gpu_state.hpp"

namespace vramkit::cluster {

/// How to choose among GPUs (and nodes) that can hold a request.
enum class placement_policy {
  pack,    ///< best fit: the GPU left with the least free memory, so large GPUs stay free
  spread,  ///< worst fit: the GPU left with the most free memory, to spread load and heat
};

/// "pack" or "spread"; throws invalid_input naming the text otherwise.
[[nodiscard]] placement_policy parse_placement_policy(std::string_view text);
[[nodiscard]] std::string_view to_string(placement_policy policy) noexcept;

/// Safety margin kept free on every GPU: the larger of a fixed byte count and a fraction of the
/// GPU's total, so one setting suits an 80 GB and a 141 GB GPU alike.
struct headroom {
  std::uint64_t bytes = 0;
  double fraction = 0.0;  ///< of total_bytes, in [0, 1)

  /// The margin in bytes for a GPU of `total_bytes`.
  [[nodiscard]] std::uint64_t for_total(std::uint64_t total_bytes) const noexcept;
};

/// "2GiB" (bytes) or "5%" (fraction of each GPU's total); throws invalid_input on other text.
[[nodiscard]] headroom parse_headroom(std::string_view text);

struct placement_options {
  placement_policy policy = placement_policy::pack;
  headroom safety{};
};

/// Why a request does not fit a node.
enum class misfit {
  none,            ///< it fits
  no_gpus,         ///< the node reports no GPU that is up
  too_large,       ///< larger than every GPU's capacity minus headroom: waiting will not help
  not_enough_free  ///< some GPU is large enough, but none has that much free now
};

/// The answer for one request on one node. `score` is in [0, 1], higher is better under the
/// policy, and 0 when it does not fit; `gpu_index` is -1 when it does not fit.
struct placement {
  bool fits = false;
  int gpu_index = -1;
  double score = 0.0;
  std::uint64_t free_after_bytes = 0;  ///< free memory left on the chosen GPU after placing
  misfit why = misfit::none;
};

/// Bytes a request may use on `gpu` now: free minus headroom, or 0 when the GPU is down.
[[nodiscard]] std::uint64_t usable_free_bytes(const gpu_state& gpu,
                                              const headroom& safety) noexcept;

/// Bytes a request could ever use on `gpu`: total minus headroom (0 when down).
[[nodiscard]] std::uint64_t usable_capacity_bytes(const gpu_state& gpu,
                                                  const headroom& safety) noexcept;

/// Places `request_bytes` on one GPU of `node`. Pack scores a GPU by how full it ends up
/// (1 - free_after/total), spread by how much room it keeps (free_after/total); the best score
/// wins, ties go to the lowest index. A zero-byte request fits any node with a GPU that is up.
[[nodiscard]] placement place_on_node(std::uint64_t request_bytes, const node_state& node,
                                      const placement_options& options) noexcept;

/// One line for people: "needs 24.00 GiB, largest GPU holds 18.00 GiB after 2.00 GiB headroom".
[[nodiscard]] std::string describe_misfit(std::uint64_t request_bytes, const node_state& node,
                                          const placement_options& options);

/// The score on kube-scheduler's extender scale, 0..10 (MaxExtenderPriority), rounded.
[[nodiscard]] std::int64_t extender_priority(const placement& p) noexcept;

}  // namespace vramkit::cluster

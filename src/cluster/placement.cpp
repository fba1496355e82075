// Placement of one memory request on one node's GPUs: fit, choice of GPU and score.
#include "vramkit/cluster/placement.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include <fmt/format.h>

#include "vramkit/core/error.hpp"
#include "vramkit/core/units.hpp"

namespace vramkit::cluster {

placement_policy parse_placement_policy(std::string_view text) {
  if (text == "pack" || text == "best-fit" || text == "binpack") return placement_policy::pack;
  if (text == "spread") return placement_policy::spread;
  throw invalid_input(fmt::format("invalid placement policy '{}': use pack or spread", text));
}

std::string_view to_string(placement_policy policy) noexcept {
  return policy == placement_policy::pack ? "pack" : "spread";
}

std::uint64_t headroom::for_total(std::uint64_t total_bytes) const noexcept {
  if (fraction <= 0.0) return bytes;
  const auto by_fraction =
      static_cast<std::uint64_t>(std::ceil(static_cast<double>(total_bytes) * fraction));
  return std::max(bytes, by_fraction);
}

headroom parse_headroom(std::string_view text) {
  while (!text.empty() && text.back() == ' ') text.remove_suffix(1);
  if (!text.empty() && text.back() == '%') {
    const std::string number(text.substr(0, text.size() - 1));
    double pct = -1;
    std::size_t used = 0;
    try {
      pct = std::stod(number, &used);
    } catch (...) {
      used = 0;
    }
    if (used == 0 || used != number.size() || !(pct >= 0 && pct < 100)) {
      throw invalid_input(
          fmt::format("invalid headroom '{}': a percentage must be in [0, 100)", text));
    }
    return headroom{0, pct / 100.0};
  }
  try {
    return headroom{parse_bytes(text), 0.0};
  } catch (const invalid_input&) {
    throw invalid_input(
        fmt::format("invalid headroom '{}': use bytes (2GiB) or a percentage (5%)", text));
  }
}

std::uint64_t usable_free_bytes(const gpu_state& gpu, const headroom& safety) noexcept {
  if (!gpu.up) return 0;
  const std::uint64_t margin = safety.for_total(gpu.total_bytes);
  const std::uint64_t free = std::min(gpu.free_bytes, gpu.total_bytes);
  return free > margin ? free - margin : 0;
}

std::uint64_t usable_capacity_bytes(const gpu_state& gpu, const headroom& safety) noexcept {
  if (!gpu.up) return 0;
  const std::uint64_t margin = safety.for_total(gpu.total_bytes);
  return gpu.total_bytes > margin ? gpu.total_bytes - margin : 0;
}

placement place_on_node(std::uint64_t request_bytes, const node_state& node,
                        const placement_options& options) noexcept {
  placement best;
  bool any_up = false;
  bool any_large_enough = false;
  for (const gpu_state& gpu : node.gpus) {
    if (!gpu.up || gpu.total_bytes == 0) continue;
    any_up = true;
    if (usable_capacity_bytes(gpu, options.safety) < request_bytes) continue;
    any_large_enough = true;
    const std::uint64_t usable = usable_free_bytes(gpu, options.safety);
    if (usable < request_bytes) continue;
    // Free after placing counts the headroom as free: it is memory nobody else may take either.
    const std::uint64_t free_after = std::min(gpu.free_bytes, gpu.total_bytes) - request_bytes;
    const double room = static_cast<double>(free_after) / static_cast<double>(gpu.total_bytes);
    const double score = options.policy == placement_policy::pack ? 1.0 - room : room;
    if (!best.fits || score > best.score) {
      best.fits = true;
      best.gpu_index = gpu.index;
      best.score = std::clamp(score, 0.0, 1.0);
      best.free_after_bytes = free_after;
    }
  }
  if (!best.fits) {
    best.why = !any_up             ? misfit::no_gpus
               : !any_large_enough ? misfit::too_large
                                   : misfit::not_enough_free;
  }
  return best;
}

std::string describe_misfit(std::uint64_t request_bytes, const node_state& node,
                            const placement_options& options) {
  const placement p = place_on_node(request_bytes, node, options);
  std::uint64_t most_capacity = 0;
  std::uint64_t most_free = 0;
  for (const gpu_state& gpu : node.gpus) {
    most_capacity = std::max(most_capacity, usable_capacity_bytes(gpu, options.safety));
    most_free = std::max(most_free, usable_free_bytes(gpu, options.safety));
  }
  switch (p.why) {
    case misfit::none:
      return fmt::format("fits on GPU {}", p.gpu_index);
    case misfit::no_gpus:
      return "no GPU is up on this node";
    case misfit::too_large:
      return fmt::format("needs {} per GPU, the largest GPU here holds {} after headroom",
                         format_bytes(static_cast<double>(request_bytes)),
                         format_bytes(static_cast<double>(most_capacity)));
    case misfit::not_enough_free:
      return fmt::format("needs {} per GPU, the most free on one GPU here is {} after headroom",
                         format_bytes(static_cast<double>(request_bytes)),
                         format_bytes(static_cast<double>(most_free)));
  }
  return "does not fit";
}

std::int64_t extender_priority(const placement& p) noexcept {
  if (!p.fits) return 0;
  return std::clamp<std::int64_t>(std::llround(p.score * 10.0), 0, 10);
}

}  // namespace vramkit::cluster

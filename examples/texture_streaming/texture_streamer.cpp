// texture_streamer: per-frame level selection by priority under the manager's budget.
#include "texture_streamer.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "vramkit/core/error.hpp"
#include "vramkit/core/units.hpp"

namespace vramkit::examples {

std::uint64_t checksum(const void* data, std::size_t bytes) noexcept {
  std::uint64_t h = 1469598103934665603ull;
  const auto* p = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < bytes; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

texture_streamer::texture_streamer(device_api& api, tier::residency_manager& manager,
                                   double near_distance)
    : api_(api), manager_(manager), near_distance_(near_distance) {
  if (!(near_distance > 0)) throw invalid_input("texture_streamer: near distance must be > 0");
}

texture_streamer::~texture_streamer() {
  for (auto& it : items_) {
    for (auto b : it.levels) manager_.destroy(b);
  }
}

std::size_t texture_streamer::add_item(point where, std::size_t finest_bytes, int levels,
                                       std::uint32_t seed) {
  if (levels < 1) throw invalid_input("texture_streamer: an item needs at least one level");
  const std::size_t divisor = std::size_t{1} << (2 * (levels - 1));
  if (finest_bytes == 0 || finest_bytes % divisor != 0) {
    throw invalid_input("texture_streamer: level 0 size " + std::to_string(finest_bytes) +
                        " is not a multiple of 4^(levels-1) = " + std::to_string(divisor));
  }
  item it;
  it.where = where;
  std::size_t bytes = finest_bytes;
  for (int l = 0; l < levels; ++l, bytes /= 4) {
    const auto b = manager_.create(bytes, tier::buffer_flags::read_only);
    auto* p = static_cast<std::uint8_t*>(manager_.host_data(b, tier::access_mode::write));
    std::uint32_t x = seed * 2654435761u + static_cast<std::uint32_t>(l) * 40503u + 1u;
    for (std::size_t i = 0; i < bytes; ++i) {
      x ^= x << 13;
      x ^= x >> 17;
      x ^= x << 5;
      p[i] = static_cast<std::uint8_t>(x);
    }
    it.levels.push_back(b);
    it.checksums.push_back(checksum(p, bytes));
  }
  items_.push_back(std::move(it));
  return items_.size() - 1;
}

std::size_t texture_streamer::level_bytes(std::size_t item, int level) const {
  return manager_.size(items_.at(item).levels.at(static_cast<std::size_t>(level)));
}

std::uint64_t texture_streamer::level_checksum(std::size_t item, int level) const {
  return items_.at(item).checksums.at(static_cast<std::size_t>(level));
}

frame_report texture_streamer::frame(point camera, stream_view stream,
                                     const level_verifier& verify) {
  frame_report r;
  const std::size_t n = items_.size();
  r.finest_level.assign(n, 0);
  r.wanted_level.assign(n, 0);
  r.priority.assign(n, 0.0);
  std::vector<double> distance(n);
  for (std::size_t i = 0; i < n; ++i) {
    const auto& it = items_[i];
    distance[i] = std::hypot(it.where.x - camera.x, it.where.y - camera.y);
    r.priority[i] = 1.0 / (1.0 + distance[i]);
    const int coarsest = static_cast<int>(it.levels.size()) - 1;
    const int wanted =
        distance[i] <= near_distance_
            ? 0
            : static_cast<int>(std::floor(std::log2(distance[i] / near_distance_))) + 1;
    r.wanted_level[i] = std::min(wanted, coarsest);
  }
  // Every item keeps at least its coarsest level; the rest of the budget goes to the items in
  // priority order, each taking the finest level it wants that still fits (a level needs the
  // coarser ones of its chain too, as a renderer samples across them).
  const std::size_t budget = manager_.stats().budget_bytes;
  auto chain_bytes = [&](std::size_t i, int finest) {
    std::size_t sum = 0;
    for (int l = finest; l < static_cast<int>(items_[i].levels.size()); ++l) {
      sum += align_up(level_bytes(i, l), 256);
    }
    return sum;
  };
  std::size_t planned = 0;
  for (std::size_t i = 0; i < n; ++i) {
    r.finest_level[i] = static_cast<int>(items_[i].levels.size()) - 1;
    planned += chain_bytes(i, r.finest_level[i]);
  }
  if (planned > budget) {
    throw out_of_memory(
        planned, "texture_streamer",
        "the coarsest levels of all items do not fit in the budget\n" + manager_.summary());
  }
  std::vector<std::size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return r.priority[a] > r.priority[b]; });
  for (std::size_t i : order) {
    const std::size_t current = chain_bytes(i, r.finest_level[i]);
    for (int l = r.wanted_level[i]; l < r.finest_level[i]; ++l) {
      const std::size_t want = chain_bytes(i, l);
      if (planned - current + want <= budget) {
        planned = planned - current + want;
        r.finest_level[i] = l;
        break;
      }
    }
  }
  r.planned_bytes = planned;
  // Prefetch everything chosen (high priority first) so copies overlap the use of earlier items,
  // then use each level. Levels not chosen this frame are the least recently used: evicted first.
  // Chosen levels already resident are touched first, so that making room for the others
  // evicts only levels this frame does not use.
  for (const bool resident_pass : {true, false}) {
    for (std::size_t i : order) {
      for (int l = r.finest_level[i]; l < static_cast<int>(items_[i].levels.size()); ++l) {
        const auto b = items_[i].levels[static_cast<std::size_t>(l)];
        if (manager_.is_resident(b) == resident_pass) manager_.prefetch(b, stream);
      }
    }
  }
  for (std::size_t i : order) {
    for (int l = r.finest_level[i]; l < static_cast<int>(items_[i].levels.size()); ++l) {
      const auto b = items_[i].levels[static_cast<std::size_t>(l)];
      const void* d = manager_.acquire(b, stream, tier::access_mode::read);
      if (verify) verify(d, level_bytes(i, l), level_checksum(i, l), stream);
      manager_.release(b, stream);
    }
  }
  r.resident_bytes = manager_.stats().resident_bytes;
  return r;
}

std::size_t texture_streamer::verify_host_copies() {
  std::size_t bad = 0;
  for (auto& it : items_) {
    for (std::size_t l = 0; l < it.levels.size(); ++l) {
      const void* p = manager_.host_data(it.levels[l]);
      bad += checksum(p, manager_.size(it.levels[l])) != it.checksums[l];
    }
  }
  return bad;
}

}  // namespace vramkit::examples

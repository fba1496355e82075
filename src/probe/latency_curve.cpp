// Sattolo permutation, latency sweep sizes and the reading of cache levels off a latency curve.
#include "vramkit/probe/detail/latency_curve.hpp"

#include <algorithm>
#include <cmath>
#include <optional>
#include <stdexcept>

namespace vramkit::probe::detail {
namespace {

// splitmix64: small, fast and good enough to shuffle a pointer chase (not for cryptography).
struct splitmix64 {
  std::uint64_t state;
  std::uint64_t next() {
    std::uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, bound) by Lemire's multiply-shift with rejection.
  std::uint32_t below(std::uint32_t bound) {
    std::uint64_t m = (next() >> 32) * bound;
    auto low = static_cast<std::uint32_t>(m);
    if (low < bound) {
      const std::uint32_t threshold = (0u - bound) % bound;
      while (low < threshold) {
        m = (next() >> 32) * bound;
        low = static_cast<std::uint32_t>(m);
      }
    }
    return static_cast<std::uint32_t>(m >> 32);
  }
};

double median_of(std::vector<double> v) { return sample_stats::of(std::move(v)).median; }

}  // namespace

std::vector<std::uint32_t> make_cyclic_permutation(std::size_t n, std::uint64_t seed) {
  if (n >= (std::size_t{1} << 32)) throw std::length_error("make_cyclic_permutation: n >= 2^32");
  std::vector<std::uint32_t> next(n);
  for (std::size_t i = 0; i < n; ++i) next[i] = static_cast<std::uint32_t>(i);
  splitmix64 rng{seed};
  // Sattolo: swapping each slot only with a strictly earlier one yields a single n-cycle.
  for (std::size_t i = n; i > 1; --i) {
    const std::uint32_t j = rng.below(static_cast<std::uint32_t>(i - 1));
    std::swap(next[i - 1], next[j]);
  }
  return next;
}

std::size_t cycle_length(const std::vector<std::uint32_t>& next, std::uint32_t start) {
  if (start >= next.size()) return 0;
  std::size_t steps = 0;
  std::uint32_t i = start;
  do {
    i = next[i];
    ++steps;
    if (i >= next.size() || steps > next.size()) return 0;
  } while (i != start);
  return steps;
}

std::vector<std::uint64_t> latency_sizes(std::uint64_t min_bytes, std::uint64_t max_bytes,
                                         bool half_steps) {
  std::vector<std::uint64_t> sizes;
  min_bytes = std::max<std::uint64_t>(min_bytes, 64);
  for (std::uint64_t p = 64; p <= max_bytes && p != 0; p *= 2) {
    if (p >= min_bytes) sizes.push_back(p);
    const std::uint64_t mid = p + p / 2;
    if (half_steps && p >= 128 && mid >= min_bytes && mid <= max_bytes) sizes.push_back(mid);
  }
  if (sizes.empty() || sizes.back() != max_bytes) {
    const std::uint64_t last = max_bytes / 64 * 64;
    if (last >= min_bytes && (sizes.empty() || last > sizes.back())) sizes.push_back(last);
  }
  return sizes;
}

std::vector<memory_level> find_levels(const std::vector<curve::point>& points,
                                      const std::vector<reported_cache>& caches,
                                      const std::string& device) {
  std::vector<memory_level> levels;
  if (points.empty()) return levels;
  auto y = [&](std::size_t i) { return points[i].y.median; };

  // Plateaus: a new one starts where the latency exceeds 1.4x the lowest of the current one.
  struct plateau {
    std::size_t first, last;
    std::vector<double> ys;
    double low;
  };
  std::vector<plateau> runs;
  plateau cur{0, 0, {y(0)}, y(0)};
  for (std::size_t i = 1; i < points.size(); ++i) {
    if (y(i) > 1.4 * cur.low) {
      runs.push_back(cur);
      cur = plateau{i, i, {y(i)}, y(i)};
    } else {
      cur.last = i;
      cur.ys.push_back(y(i));
      cur.low = std::min(cur.low, y(i));
    }
  }
  runs.push_back(cur);
  // A single point between two plateaus is a transition (the working set partly fits), not a level.
  std::vector<plateau> kept;
  for (std::size_t r = 0; r < runs.size(); ++r) {
    if (runs[r].ys.size() == 1 && r > 0 && r + 1 < runs.size()) continue;
    kept.push_back(runs[r]);
  }

  // Names: the reported caches in order when the curve shows one plateau per cache (plus memory);
  // otherwise each plateau takes the cache nearest (log scale) to where it ends.
  std::vector<std::string> names(kept.size());
  std::vector<std::optional<std::uint64_t>> reported(kept.size());
  const bool last_is_memory = kept.size() > 1 && (caches.empty() || kept.size() > caches.size());
  const std::size_t cache_runs = last_is_memory ? kept.size() - 1 : kept.size();
  if (!caches.empty() && cache_runs == caches.size()) {
    for (std::size_t r = 0; r < cache_runs; ++r) {
      names[r] = caches[r].name;
      reported[r] = caches[r].size_bytes;
    }
  } else if (!caches.empty()) {
    std::vector<bool> used(caches.size(), false);
    for (std::size_t r = 0; r < cache_runs; ++r) {
      const double end = std::log2(std::max(points[kept[r].last].x, 1.0));
      std::size_t best = caches.size();
      for (std::size_t c = 0; c < caches.size(); ++c) {
        if (used[c]) continue;
        const double d = std::abs(std::log2(static_cast<double>(caches[c].size_bytes)) - end);
        if (best == caches.size() ||
            d < std::abs(std::log2(static_cast<double>(caches[best].size_bytes)) - end)) {
          best = c;
        }
      }
      if (best < caches.size()) {
        used[best] = true;
        names[r] = caches[best].name;
        reported[r] = caches[best].size_bytes;
      }
    }
  }
  for (std::size_t r = 0; r < kept.size(); ++r) {
    const bool memory = last_is_memory && r + 1 == kept.size();
    memory_level l;
    l.name = memory ? "DRAM" : !names[r].empty() ? names[r] : "L" + std::to_string(r + 1) + "?";
    if (caches.empty() && !memory) l.name = "L" + std::to_string(r + 1);
    l.device = device;
    l.latency_ns = median_of(kept[r].ys);
    l.measured_size_bytes = memory ? 0 : static_cast<std::uint64_t>(points[kept[r].last].x);
    l.reported_size_bytes = reported[r];
    levels.push_back(l);
  }
  return levels;
}

std::optional<double> bandwidth_at_latency(const std::vector<curve::point>& points, double factor) {
  if (points.size() < 2) return std::nullopt;
  std::vector<curve::point> p = points;
  std::sort(p.begin(), p.end(),
            [](const curve::point& a, const curve::point& b) { return a.x < b.x; });
  const double limit = factor * p.front().y.median;
  for (std::size_t i = 1; i < p.size(); ++i) {
    if (p[i].y.median < limit) continue;
    const double y0 = p[i - 1].y.median, y1 = p[i].y.median;
    const double t = y1 > y0 ? (limit - y0) / (y1 - y0) : 1.0;
    return p[i - 1].x + std::clamp(t, 0.0, 1.0) * (p[i].x - p[i - 1].x);
  }
  return std::nullopt;
}

std::vector<std::uint64_t> loaded_latency_delays(bool quick) {
  if (quick) return {20000, 2000, 200, 0};
  return {50000, 20000, 8000, 3000, 1000, 400, 150, 50, 0};
}

}  // namespace vramkit::probe::detail

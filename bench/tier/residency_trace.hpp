// A synthetic trace of buffer uses with locality (a hot window that drifts over the buffers, plus
// uniform picks), shared by the residency benchmark and its CPU test. Deterministic for a seed.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "vramkit/tier/lru_simulation.hpp"

namespace vramkit::bench {

/// `steps` uses of `buffers` buffers: 75% from a window of `window` buffers that moves by one
/// every `buffers / 2` steps, 25% uniform; a use writes (read_write) with `write_fraction`.
inline std::vector<tier::buffer_use> make_locality_trace(std::uint32_t buffers, std::size_t steps,
                                                         std::uint32_t window,
                                                         double write_fraction,
                                                         std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  std::vector<tier::buffer_use> trace;
  trace.reserve(steps);
  for (std::size_t t = 0; t < steps; ++t) {
    const auto base = static_cast<std::uint32_t>(t / (buffers / 2 + 1));
    std::uint32_t b = 0;
    if (unit(rng) < 0.75) {
      b = (base + static_cast<std::uint32_t>(rng() % window)) % buffers;
    } else {
      b = static_cast<std::uint32_t>(rng() % buffers);
    }
    const auto access =
        unit(rng) < write_fraction ? tier::access_mode::read_write : tier::access_mode::read;
    trace.push_back({b, access});
  }
  return trace;
}

}  // namespace vramkit::bench

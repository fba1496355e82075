// lru_simulation: replays a trace of buffer uses against an ideal LRU cache of a given byte budget
// and counts the bytes it would move: the reference a residency_manager is measured against, and a
// what-if tool for sizing a budget. Pure function, thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "vramkit/tier/tiered_buffer.hpp"

namespace vramkit::tier {

/// One use of a buffer: its index in the size table and the access.
struct buffer_use {
  std::uint32_t buffer = 0;
  access_mode access = access_mode::read;
};

/// What the ideal LRU did.
struct lru_simulation_result {
  std::uint64_t hits = 0;
  std::uint64_t misses = 0;
  std::uint64_t evictions = 0;
  std::uint64_t bytes_h2d = 0;  ///< copies in: misses other than write-only
  std::uint64_t bytes_d2h = 0;  ///< copies back: evictions of dirty buffers
};

/// Replays `trace` over buffers of `buffer_bytes[i]` bytes with `budget_bytes` of device memory
/// (sizes rounded up to 256 bytes, as residency_manager counts them); each use is an acquire
/// immediately released. Buffers that do not fit at all throw logic_error.
lru_simulation_result simulate_lru(std::span<const std::size_t> buffer_bytes,
                                   std::span<const buffer_use> trace, std::size_t budget_bytes);

}  // namespace vramkit::tier

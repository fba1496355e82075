// Internals of the host latency probe, exposed for tests: the random single-cycle permutation
// behind the pointer chase and the reading of cache levels off a latency curve. Pure functions,
// thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "vramkit/probe/measurement.hpp"

namespace vramkit::probe::detail {

/// A random cyclic permutation of 0..n-1 (Sattolo's algorithm): starting anywhere and following
/// `i = next[i]` visits all n indices before it returns. Deterministic for a given seed; n must be
/// below 2^32 (n = 0 gives an empty vector, n = 1 the fixed point {0}).
std::vector<std::uint32_t> make_cyclic_permutation(std::size_t n, std::uint64_t seed);

/// Number of steps `i = next[i]` from `start` until `start` comes back, or 0 when it never does
/// (an index out of range, or a cycle that does not contain `start`).
std::size_t cycle_length(const std::vector<std::uint32_t>& next, std::uint32_t start = 0);

/// A cache level as the topology reports it: "L1d", "L2", "L3" and the size of one instance.
struct reported_cache {
  std::string name;
  std::uint64_t size_bytes = 0;
};

/// Reads memory levels off a latency curve (points in ascending x = working-set bytes, y = ns per
/// load): a plateau ends where the latency climbs past 1.4x its lowest point (a lone point between
/// two plateaus is a transition, not a level). Each level's latency is the median of its plateau,
/// its measured size the last working set on it. With `caches` (ascending sizes, as the topology
/// reports them) the plateaus take the caches' names in order when there is one per cache (the
/// last plateau past them is "DRAM"), else the name of the cache nearest to where they end;
/// without, they are L1, L2, ... and DRAM.
std::vector<memory_level> find_levels(const std::vector<curve::point>& points,
                                      const std::vector<reported_cache>& caches,
                                      const std::string& device);

/// Working-set sizes of the latency sweep: 2^k and 1.5 * 2^k (full) or 2^k only (quick), from
/// `min_bytes` to `max_bytes` inclusive, each a multiple of 64 bytes.
std::vector<std::uint64_t> latency_sizes(std::uint64_t min_bytes, std::uint64_t max_bytes,
                                         bool half_steps);

/// Reading a loaded-latency curve (x = streamed GB/s, y = latency in ns, in any order): the
/// bandwidth at which the latency first reaches `factor` times the idle latency (the point with
/// the lowest bandwidth), interpolated between the two points around it; nullopt when it never
/// does or the curve has fewer than two points.
std::optional<double> bandwidth_at_latency(const std::vector<curve::point>& points, double factor);

/// The injection delays (ns of pause after each 64 KiB a streaming thread reads) of the loaded
/// latency sweep, from the lightest load to none (full speed). Quick runs take fewer.
std::vector<std::uint64_t> loaded_latency_delays(bool quick);

}  // namespace vramkit::probe::detail

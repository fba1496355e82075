// The visiting order of the GPU pointer chase: one cycle through every line of a working set, in
// a pseudo-random order that hops to a different 64 KiB chunk on every step (so the TLB and the
// caches see no locality) and visits the lines of each chunk in a shuffled order. Header-only,
// usable from host and device code; no state.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define VRAMKIT_HD __host__ __device__
#else
#define VRAMKIT_HD
#endif

namespace vramkit::probe::detail {

/// A working set of `chunks` chunks of `lines` lines each. `chunk_order` is a permutation of the
/// chunks, `line_order` a permutation of the lines in a chunk, and `chunk_shift[c]` an offset that
/// decorrelates the line visited in different chunks. Visit t (0 <= t < chunks * lines) goes to
/// chunk chunk_order[t % chunks], line line_order[(t / chunks + chunk_shift[chunk]) % lines]; each
/// (chunk, line) is visited exactly once, so linking visit t to visit t + 1 (and the last to the
/// first) gives one cycle through every line.
struct chase_layout {
  std::uint64_t chunks = 1;
  std::uint64_t lines = 1;
  const std::uint32_t* chunk_order = nullptr;
  const std::uint32_t* line_order = nullptr;
  const std::uint32_t* chunk_shift = nullptr;
};

/// The line index (chunk * lines + line) of visit `t`.
VRAMKIT_HD inline std::uint64_t chase_visit(const chase_layout& l, std::uint64_t t) {
  const std::uint64_t chunk = l.chunk_order[t % l.chunks];
  const std::uint64_t round = t / l.chunks;
  const std::uint64_t line = l.line_order[(round + l.chunk_shift[chunk]) % l.lines];
  return chunk * l.lines + line;
}

/// A small deterministic generator (splitmix64) for the permutations; same sequence everywhere.
struct splitmix64 {
  std::uint64_t state;
  VRAMKIT_HD std::uint64_t next() {
    std::uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  /// Uniform in [0, bound) (bound > 0); the slight modulo bias does not matter here.
  VRAMKIT_HD std::uint64_t below(std::uint64_t bound) { return next() % bound; }
};

/// Fills `out[0..n)` with a random permutation of 0..n-1 (Fisher-Yates).
inline void random_permutation(std::uint32_t* out, std::uint64_t n, splitmix64& rng) {
  for (std::uint64_t i = 0; i < n; ++i) out[i] = static_cast<std::uint32_t>(i);
  for (std::uint64_t i = n; i > 1; --i) {
    const std::uint64_t j = rng.below(i);
    const std::uint32_t tmp = out[i - 1];
    out[i - 1] = out[j];
    out[j] = tmp;
  }
}

}  // namespace vramkit::probe::detail

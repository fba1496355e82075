// Host-side launchers of the access-pattern and cache-level kernels of the GPU probe: strided and
// misaligned reads and writes of 4-, 8- and 16-byte elements, gathers and scatters through an
// index array, a resident-set read for the cache sweep, and the checks that verify each. Internal;
// every launcher enqueues on `stream` and returns the launch status without synchronising.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "probe_kernels.hpp"

namespace vramkit::probe::detail {

/// Which words an element pattern touches: `n_elems` elements of `run` words (1, 2 or 4: 4-, 8-
/// or 16-byte elements), element e at word first + e * period. `first` and `period` must be
/// multiples of `run` (the elements are naturally aligned).
struct element_pattern {
  std::uint64_t first = 0;
  std::uint64_t n_elems = 0;
  std::uint64_t period = 1;
  unsigned run = 1;
};

/// Adds the sum (mod 2^32) of the pattern's words of `p` to `*sum`.
cudaError_t launch_pattern_read(const std::uint32_t* p, const element_pattern& pat,
                                std::uint32_t* sum, const launch_config& cfg, cudaStream_t stream);

/// Writes pattern_word(j, seed) into every word j the pattern covers.
cudaError_t launch_pattern_write(std::uint32_t* p, const element_pattern& pat, std::uint32_t seed,
                                 const launch_config& cfg, cudaStream_t stream);

/// Adds to `*count` the words j of [0, n_words) that differ from pattern_word(j, seed_in) where
/// the pattern covers j, and from pattern_word(j, seed_out) elsewhere.
cudaError_t launch_pattern_mismatches(const std::uint32_t* p, std::size_t n_words,
                                      const element_pattern& pat, std::uint32_t seed_in,
                                      std::uint32_t seed_out, unsigned long long* count,
                                      cudaStream_t stream);

/// idx[i] = mix_index(i mod 2^bits, bits, seed) for i in [0, n).
cudaError_t launch_build_index(std::uint32_t* idx, std::size_t n, unsigned bits, std::uint64_t seed,
                               cudaStream_t stream);

/// Adds sum of p[idx[i]] for i in [0, n) to `*sum` (4-byte gathers).
cudaError_t launch_gather(const std::uint32_t* p, const std::uint32_t* idx, std::size_t n,
                          std::uint32_t* sum, const launch_config& cfg, cudaStream_t stream);

/// Adds sum of pattern_word(idx[i], seed) to `*sum`: what a gather over the pattern must give,
/// computed without reading `p`.
cudaError_t launch_gather_reference(const std::uint32_t* idx, std::size_t n, std::uint32_t seed,
                                    std::uint32_t* sum, cudaStream_t stream);

/// p[idx[i]] = pattern_word(idx[i], seed) for i in [0, n) (4-byte scatters).
cudaError_t launch_scatter(std::uint32_t* p, const std::uint32_t* idx, std::size_t n,
                           std::uint32_t seed, const launch_config& cfg, cudaStream_t stream);

/// Adds to `*count` the i whose p[idx[i]] differs from pattern_word(idx[i], seed).
cudaError_t launch_scatter_mismatches(const std::uint32_t* p, const std::uint32_t* idx,
                                      std::size_t n, std::uint32_t seed, unsigned long long* count,
                                      cudaStream_t stream);

/// How the cache sweep reads a resident set.
enum class resident_read {
  /// Every block reads all of it through L1, from its own starting point (block b at
  /// b * ws_vec / blocks, wrapping): launched one block per multiprocessor, each multiprocessor's
  /// L1 holds the set or not, with no other block on it to re-read what one just brought in.
  every_block_whole_set,
  /// The grid reads it once a pass in grid-stride order, with L1 bypassed (ld.global.cg): a line
  /// is read again only after the whole set was, so it hits only when the L2 holds the whole set.
  grid_once_l2_only,
};

/// The cache sweep's read of a working set of `ws_vec` 16-byte vectors, `reps` times, in `mode`.
/// Adds the sum of all words read to `*sum`: reps x (blocks, or 1 for grid_once_l2_only) x
/// pattern_sum(4 ws_vec, seed).
cudaError_t launch_resident_read(const std::uint32_t* p, std::size_t ws_vec, int reps,
                                 resident_read mode, std::uint32_t* sum, const launch_config& cfg,
                                 cudaStream_t stream);

}  // namespace vramkit::probe::detail

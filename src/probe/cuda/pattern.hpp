// The data pattern every GPU probe buffer is filled with and checked against: word i of seed s is
// (i mod 2^32) * 0x9E3779B1 + s (neighbouring words differ, rarely zero), and its sum in closed
// form so a read kernel can be verified without a second pass; the same for strided subsets of the
// words, and the bijective index mix the gather/scatter patterns use. Header-only, usable from host
// and device code; no state.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define VRAMKIT_PATTERN_HD __host__ __device__
#else
#define VRAMKIT_PATTERN_HD
#endif

namespace vramkit::probe::detail {

/// Word i of the pattern with seed `seed`.
VRAMKIT_PATTERN_HD inline std::uint32_t pattern_word(std::uint64_t i, std::uint32_t seed) {
  return static_cast<std::uint32_t>(i) * 0x9E3779B1u + seed;
}

/// Sum (mod 2^32) of pattern words [0, n_words) with `seed`.
inline std::uint32_t pattern_sum(std::uint64_t n_words, std::uint32_t seed) {
  // A whole period of i mod 2^32 sums to 2^31 (2^32 - 1) = 2^31 (mod 2^32), times the odd
  // multiplier still 2^31; its seeds add 2^32 * seed = 0.
  const std::uint64_t periods = n_words >> 32;
  const std::uint64_t rest = n_words & 0xFFFFFFFFull;
  const std::uint64_t tri =
      rest == 0 ? 0 : (rest % 2 == 0 ? (rest / 2) * (rest - 1) : rest * ((rest - 1) / 2));
  std::uint32_t total = static_cast<std::uint32_t>(periods) * 0x80000000u;
  total += static_cast<std::uint32_t>(tri) * 0x9E3779B1u;
  total += static_cast<std::uint32_t>(rest) * seed;
  return total;
}

/// 0 + 1 + ... + (k - 1), mod 2^64.
VRAMKIT_PATTERN_HD inline std::uint64_t triangle(std::uint64_t k) {
  return k == 0 ? 0 : (k % 2 == 0 ? (k / 2) * (k - 1) : k * ((k - 1) / 2));
}

/// Sum (mod 2^32) of the pattern words first + e * period + w for e in [0, n_elems) and w in
/// [0, run): what a kernel reading `n_elems` elements of `run` words, `period` words apart from
/// word `first`, must add up to.
inline std::uint32_t strided_pattern_sum(std::uint64_t first, std::uint64_t n_elems,
                                         std::uint64_t period, std::uint64_t run,
                                         std::uint32_t seed) {
  // Word j contributes j * M + seed; sum j = run (n first + period tri(n)) + n tri(run).
  const std::uint64_t sum_j =
      run * (n_elems * first + period * triangle(n_elems)) + n_elems * triangle(run);
  return static_cast<std::uint32_t>(sum_j) * 0x9E3779B1u +
         static_cast<std::uint32_t>(n_elems * run) * seed;
}

/// A bijection of [0, 2^bits) (1 <= bits <= 32) that scatters neighbours far apart: xor with the
/// seed, then multiply by an odd constant and xor-shift right, twice, all mod 2^bits (each step is
/// invertible). The gather and scatter patterns' indices.
VRAMKIT_PATTERN_HD inline std::uint32_t mix_index(std::uint64_t i, unsigned bits,
                                                  std::uint64_t seed) {
  const std::uint64_t mask = bits >= 64 ? ~0ull : (1ull << bits) - 1;
  std::uint64_t x = (i ^ seed) & mask;
  x = (x * 0x9E3779B97F4A7C15ull) & mask;
  x ^= x >> ((bits + 1) / 2);
  x = (x * 0xBF58476D1CE4E5B9ull) & mask;
  x ^= x >> ((bits + 2) / 3);
  return static_cast<std::uint32_t>(x);
}

}  // namespace vramkit::probe::detail

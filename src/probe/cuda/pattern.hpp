// The data pattern every GPU probe buffer is filled with and checked against: word i of seed s is
// (i mod 2^32) * 0x9E3779B1 + s (neighbouring words differ, rarely zero), and its sum in closed
// form so a read kernel can be verified without a second pass. Header-only; no state.
#pragma once

#include <cstdint>

namespace vramkit::probe::detail {

/// Word i of the pattern with seed `seed`.
inline std::uint32_t pattern_word(std::uint64_t i, std::uint32_t seed) {
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

}  // namespace vramkit::probe::detail

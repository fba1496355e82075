// Byte and bandwidth units: binary units (KiB, MiB, GiB) for memory sizes, decimal GB/s for
// bandwidth, each labelled. All functions are pure and thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace vramkit {

inline constexpr std::size_t KiB = std::size_t{1} << 10;
inline constexpr std::size_t MiB = std::size_t{1} << 20;
inline constexpr std::size_t GiB = std::size_t{1} << 30;
inline constexpr std::size_t TiB = std::size_t{1} << 40;

/// "1.50 GiB", "512 B": binary units with two decimals above bytes.
std::string format_bytes(double bytes);

/// "55.21 GB/s": decimal gigabytes per second from bytes and seconds.
std::string format_bandwidth(double bytes_per_second);

/// Parses "24GiB", "24 GiB", "1.5G" (G = GiB), "24GB" (decimal), "4096", "512KiB". Throws
/// invalid_input naming the text when it is not a size, is negative, or overflows 64 bits.
std::uint64_t parse_bytes(std::string_view text);

/// Rounds `value` up to a multiple of `alignment` (a power of two).
constexpr std::size_t align_up(std::size_t value, std::size_t alignment) noexcept {
  return (value + alignment - 1) & ~(alignment - 1);
}

constexpr bool is_power_of_two(std::size_t v) noexcept { return v != 0 && (v & (v - 1)) == 0; }

}  // namespace vramkit

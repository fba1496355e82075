// Byte and bandwidth formatting and parsing.
#include "vramkit/core/units.hpp"

#include <cctype>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "vramkit/core/error.hpp"

namespace vramkit {

std::string format_bytes(double bytes) {
  static constexpr const char* names[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  const bool negative = bytes < 0;
  double v = std::fabs(bytes);
  int unit = 0;
  while (v >= 1024.0 && unit < 5) {
    v /= 1024.0;
    ++unit;
  }
  if (unit == 0) return fmt::format("{}{:.0f} B", negative ? "-" : "", v);
  return fmt::format("{}{:.2f} {}", negative ? "-" : "", v, names[unit]);
}

std::string format_bandwidth(double bytes_per_second) {
  return fmt::format("{:.2f} GB/s", bytes_per_second / 1e9);
}

std::uint64_t parse_bytes(std::string_view text) {
  auto fail = [&](const char* why) -> std::uint64_t {
    throw invalid_input(fmt::format("invalid size '{}': {}", text, why));
  };
  std::size_t i = 0;
  while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
  if (i < text.size() && text[i] == '-') return fail("sizes cannot be negative");
  const std::size_t number_start = i;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.'))
    ++i;
  if (i == number_start) return fail("expected a number, e.g. 24GiB");
  double number = 0;
  try {
    number = std::stod(std::string(text.substr(number_start, i - number_start)));
  } catch (...) {
    return fail("expected a number, e.g. 24GiB");
  }
  while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
  std::string unit;
  for (; i < text.size(); ++i) {
    if (std::isspace(static_cast<unsigned char>(text[i]))) break;
    unit.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(text[i]))));
  }
  while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
  if (i != text.size()) return fail("unexpected text after the unit");
  double scale = 1;
  if (unit.empty() || unit == "b")
    scale = 1;
  else if (unit == "k" || unit == "kib")
    scale = 0x1p10;
  else if (unit == "m" || unit == "mib")
    scale = 0x1p20;
  else if (unit == "g" || unit == "gib")
    scale = 0x1p30;
  else if (unit == "t" || unit == "tib")
    scale = 0x1p40;
  else if (unit == "kb")
    scale = 1e3;
  else if (unit == "mb")
    scale = 1e6;
  else if (unit == "gb")
    scale = 1e9;
  else if (unit == "tb")
    scale = 1e12;
  else
    return fail("unknown unit (use B, KiB, MiB, GiB, TiB, or KB, MB, GB, TB)");
  const double value = number * scale;
  if (!std::isfinite(value) || value >= 18446744073709551615.0) return fail("too large");
  return static_cast<std::uint64_t>(std::llround(value));
}

}  // namespace vramkit

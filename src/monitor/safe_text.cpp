// printable(): one pass over the bytes, decoding UTF-8 just enough to tell control characters
// and invalid sequences from text.
#include "vramkit/monitor/safe_text.hpp"

#include <cstdint>
#include <cstdio>

namespace vramkit::monitor {

namespace {

void hex_byte(std::string& out, unsigned char c) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "\\x%02x", c);
  out += buf;
}

// Length of the valid UTF-8 sequence starting at s[i] (0 when it is not one), and its code point.
std::size_t utf8_sequence(std::string_view s, std::size_t i, std::uint32_t& cp) {
  const auto c = static_cast<unsigned char>(s[i]);
  std::size_t n = 0;
  std::uint32_t min = 0;
  if (c >= 0xc2 && c <= 0xdf) {
    n = 2, cp = c & 0x1fU, min = 0x80;
  } else if (c >= 0xe0 && c <= 0xef) {
    n = 3, cp = c & 0x0fU, min = 0x800;
  } else if (c >= 0xf0 && c <= 0xf4) {
    n = 4, cp = c & 0x07U, min = 0x10000;
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  for (std::size_t k = 1; k < n; ++k) {
    const auto cc = static_cast<unsigned char>(s[i + k]);
    if ((cc & 0xc0U) != 0x80U) return 0;
    cp = (cp << 6) | (cc & 0x3fU);
  }
  if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
  return n;
}

}  // namespace

std::string printable(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      if (c < 0x20 || c == 0x7f)
        hex_byte(out, c);
      else if (c == '\\')
        out += "\\\\";
      else
        out += static_cast<char>(c);
      ++i;
      continue;
    }
    std::uint32_t cp = 0;
    const std::size_t n = utf8_sequence(s, i, cp);
    if (n == 0) {
      hex_byte(out, c);
      ++i;
    } else if (cp >= 0x80 && cp <= 0x9f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(cp));
      out += buf;
      i += n;
    } else {
      out.append(s.substr(i, n));
      i += n;
    }
  }
  return out;
}

}  // namespace vramkit::monitor

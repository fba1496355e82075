// BC6H decoder written from the Khronos Data Format Specification's BC6H section (block
// descriptions per mode, sign extension, endpoint transform, unquantization, interpolation and
// final scaling) and Microsoft's "BC6H Format" page, which state the same arithmetic. The mode
// layouts below transcribe the specification's "Block descriptions for BC6H block modes" table.
#include "texture/bc6h_decoder.hpp"

#include <array>
#include <cstring>
#include <string_view>
#include <vector>

#include "texture/bptc_tables.hpp"

namespace vramkit::texture::detail {
namespace {

// One field of a mode's layout: `bits` consecutive block bits go into endpoint `endpoint`'s
// channel `channel`, the first block bit into bit `first` of the value, then `step` (+1 or -1).
struct field {
  int channel = 0;  // 0 R, 1 G, 2 B
  int endpoint = 0;
  int first = 0;
  int step = 1;
  int bits = 1;
};

struct mode_info {
  int code = 0;       // value of the mode bits (2 or 5 of them)
  int mode_bits = 5;  // 2 for modes 0 and 1
  bool two_subsets = true;
  bool transformed = true;
  int endpoint_bits = 0;  // EPB
  std::array<int, 3> delta_bits{};
  // Fields after the mode bits, in block order (the partition bits of two-subset modes follow).
  // Each token is CHANNEL ENDPOINT ':' A ['-' B]: the specification's v_endpoint^{A..B}, whose
  // first block bit is bit B of the value and whose last is bit A.
  std::string_view layout;
};

// The 14 modes, in the specification's order (mode numbers 0, 1, 2, 6, 10, 14, 18, 22, 26, 30, 3,
// 7, 11, 15).
constexpr mode_info modes[] = {
    {0,
     2,
     true,
     true,
     10,
     {5, 5, 5},
     "g2:4 b2:4 b3:4 r0:9-0 g0:9-0 b0:9-0 r1:4-0 g3:4 g2:3-0 g1:4-0 b3:0 g3:3-0 b1:4-0 b3:1 b2:3-0 "
     "r2:4-0 b3:2 r3:4-0 b3:3"},
    {1,
     2,
     true,
     true,
     7,
     {6, 6, 6},
     "g2:5 g3:4 g3:5 r0:6-0 b3:0 b3:1 b2:4 g0:6-0 b2:5 b3:2 g2:4 b0:6-0 b3:3 b3:5 b3:4 r1:5-0 "
     "g2:3-0 g1:5-0 g3:3-0 b1:5-0 b2:3-0 r2:5-0 r3:5-0"},
    {2,
     5,
     true,
     true,
     11,
     {5, 4, 4},
     "r0:9-0 g0:9-0 b0:9-0 r1:4-0 r0:10 g2:3-0 g1:3-0 g0:10 b3:0 g3:3-0 b1:3-0 b0:10 b3:1 b2:3-0 "
     "r2:4-0 b3:2 r3:4-0 b3:3"},
    {6,
     5,
     true,
     true,
     11,
     {4, 5, 4},
     "r0:9-0 g0:9-0 b0:9-0 r1:3-0 r0:10 g3:4 g2:3-0 g1:4-0 g0:10 g3:3-0 b1:3-0 b0:10 b3:1 b2:3-0 "
     "r2:3-0 b3:0 b3:2 r3:3-0 g2:4 b3:3"},
    {10,
     5,
     true,
     true,
     11,
     {4, 4, 5},
     "r0:9-0 g0:9-0 b0:9-0 r1:3-0 r0:10 b2:4 g2:3-0 g1:3-0 g0:10 b3:0 g3:3-0 b1:4-0 b0:10 b2:3-0 "
     "r2:3-0 b3:1 b3:2 r3:3-0 b3:4 b3:3"},
    {14,
     5,
     true,
     true,
     9,
     {5, 5, 5},
     "r0:8-0 b2:4 g0:8-0 g2:4 b0:8-0 b3:4 r1:4-0 g3:4 g2:3-0 g1:4-0 b3:0 g3:3-0 b1:4-0 b3:1 b2:3-0 "
     "r2:4-0 b3:2 r3:4-0 b3:3"},
    {18,
     5,
     true,
     true,
     8,
     {6, 5, 5},
     "r0:7-0 g3:4 b2:4 g0:7-0 b3:2 g2:4 b0:7-0 b3:3 b3:4 r1:5-0 g2:3-0 g1:4-0 b3:0 g3:3-0 b1:4-0 "
     "b3:1 b2:3-0 r2:5-0 r3:5-0"},
    {22,
     5,
     true,
     true,
     8,
     {5, 6, 5},
     "r0:7-0 b3:0 b2:4 g0:7-0 g2:5 g2:4 b0:7-0 g3:5 b3:4 r1:4-0 g3:4 g2:3-0 g1:5-0 g3:3-0 b1:4-0 "
     "b3:1 b2:3-0 r2:4-0 b3:2 r3:4-0 b3:3"},
    {26,
     5,
     true,
     true,
     8,
     {5, 5, 6},
     "r0:7-0 b3:1 b2:4 g0:7-0 b2:5 g2:4 b0:7-0 b3:5 b3:4 r1:4-0 g3:4 g2:3-0 g1:4-0 b3:0 g3:3-0 "
     "b1:5-0 b2:3-0 r2:4-0 b3:2 r3:4-0 b3:3"},
    {30,
     5,
     true,
     false,
     6,
     {6, 6, 6},
     "r0:5-0 g3:4 b3:0 b3:1 b2:4 g0:5-0 g2:5 b2:5 b3:2 g2:4 b0:5-0 g3:5 b3:3 b3:5 b3:4 r1:5-0 "
     "g2:3-0 g1:5-0 g3:3-0 b1:5-0 b2:3-0 r2:5-0 r3:5-0"},
    {3, 5, false, false, 10, {10, 10, 10}, "r0:9-0 g0:9-0 b0:9-0 r1:9-0 g1:9-0 b1:9-0"},
    {7,
     5,
     false,
     true,
     11,
     {9, 9, 9},
     "r0:9-0 g0:9-0 b0:9-0 r1:8-0 r0:10 g1:8-0 g0:10 b1:8-0 b0:10"},
    {11,
     5,
     false,
     true,
     12,
     {8, 8, 8},
     "r0:9-0 g0:9-0 b0:9-0 r1:7-0 r0:10-11 g1:7-0 g0:10-11 b1:7-0 b0:10-11"},
    {15,
     5,
     false,
     true,
     16,
     {4, 4, 4},
     "r0:9-0 g0:9-0 b0:9-0 r1:3-0 r0:10-15 g1:3-0 g0:10-15 b1:3-0 b0:10-15"},
};

int parse_int(std::string_view s, std::size_t& i) {
  int v = 0;
  while (i < s.size() && s[i] >= '0' && s[i] <= '9') v = v * 10 + (s[i++] - '0');
  return v;
}

std::vector<field> parse_layout(std::string_view s) {
  std::vector<field> out;
  std::size_t i = 0;
  while (i < s.size()) {
    if (s[i] == ' ') {
      ++i;
      continue;
    }
    field f;
    f.channel = s[i] == 'r' ? 0 : s[i] == 'g' ? 1 : 2;
    ++i;
    f.endpoint = s[i++] - '0';
    ++i;  // ':'
    const int a = parse_int(s, i);
    int b = a;
    if (i < s.size() && s[i] == '-') {
      ++i;
      b = parse_int(s, i);
    }
    f.first = b;
    f.step = a >= b ? 1 : -1;
    f.bits = (a >= b ? a - b : b - a) + 1;
    out.push_back(f);
  }
  return out;
}

const std::vector<field>& layout_of(int mode_index) {
  static const auto layouts = [] {
    std::array<std::vector<field>, std::size(modes)> l;
    for (std::size_t m = 0; m < std::size(modes); ++m) l[m] = parse_layout(modes[m].layout);
    return l;
  }();
  return layouts[static_cast<std::size_t>(mode_index)];
}

class bit_reader {
 public:
  explicit bit_reader(const std::uint8_t* p) { std::memcpy(bytes_, p, 16); }
  int read(int bits) {
    int v = 0;
    for (int i = 0; i < bits; ++i, ++pos_) v |= ((bytes_[pos_ >> 3] >> (pos_ & 7)) & 1) << i;
    return v;
  }
  [[nodiscard]] int position() const { return pos_; }

 private:
  std::uint8_t bytes_[16] = {};
  int pos_ = 0;
};

int sign_extend(int v, int bits) {
  const int sign = 1 << (bits - 1);
  return (v & (sign - 1)) - (v & sign);
}

int unquantize(int x, int bits, bool is_signed) {
  if (!is_signed) {
    if (bits >= 15) return x;
    if (x == 0) return 0;
    if (x == (1 << bits) - 1) return 0xFFFF;
    return ((x << 15) + 0x4000) >> (bits - 1);
  }
  if (bits >= 16) return x;
  const bool negative = x < 0;
  if (negative) x = -x;
  int unq = 0;
  if (x == 0) {
    unq = 0;
  } else if (x >= (1 << (bits - 1)) - 1) {
    unq = 0x7FFF;
  } else {
    unq = ((x << 15) + 0x4000) >> (bits - 1);
  }
  return negative ? -unq : unq;
}

std::uint16_t finish_unquantize(int v, bool is_signed) {
  if (!is_signed) return static_cast<std::uint16_t>((v * 31) >> 6);
  if (v < 0) return static_cast<std::uint16_t>((((-v) * 31) >> 5) | 0x8000);
  return static_cast<std::uint16_t>((v * 31) >> 5);
}

// Index of `code`'s mode in `modes`, or -1 for a reserved mode.
int find_mode(int low2, int low5) {
  for (std::size_t m = 0; m < std::size(modes); ++m) {
    const int code = modes[m].mode_bits == 2 ? low2 : low5;
    if (modes[m].code == code && (modes[m].mode_bits == 2) == (low2 < 2))
      return static_cast<int>(m);
  }
  return -1;
}

// Endpoints after sign extension and the inverse transform, before unquantization.
void read_endpoints(const mode_info& m, int mode_index, bit_reader& bits, bool is_signed,
                    int e[4][3]) {
  for (const field& f : layout_of(mode_index)) {
    for (int k = 0; k < f.bits; ++k)
      e[f.endpoint][f.channel] |= bits.read(1) << (f.first + k * f.step);
  }
  const int endpoints = m.two_subsets ? 4 : 2;
  for (int c = 0; c < 3; ++c) {
    if (is_signed) e[0][c] = sign_extend(e[0][c], m.endpoint_bits);
    if (m.transformed || is_signed) {
      const int width = m.transformed ? m.delta_bits[c] : m.endpoint_bits;
      for (int k = 1; k < endpoints; ++k) e[k][c] = sign_extend(e[k][c], width);
    }
    if (m.transformed) {
      const int mask = (1 << m.endpoint_bits) - 1;
      for (int k = 1; k < endpoints; ++k) {
        e[k][c] = (e[0][c] + e[k][c]) & mask;
        if (is_signed) e[k][c] = sign_extend(e[k][c], m.endpoint_bits);
      }
    }
  }
}

}  // namespace

float half_to_float(std::uint16_t h) noexcept {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000) << 16;
  const int exponent = (h >> 10) & 31;
  std::uint32_t mantissa = h & 0x3FF;
  std::uint32_t bits = 0;
  if (exponent == 31) {
    bits = sign | 0x7F800000u | (mantissa << 13);
  } else if (exponent != 0) {
    bits = sign | static_cast<std::uint32_t>(exponent + 112) << 23 | (mantissa << 13);
  } else if (mantissa == 0) {
    bits = sign;
  } else {
    // Subnormal: shift the mantissa up to an implicit one.
    int e = 113;
    while ((mantissa & 0x400) == 0) {
      mantissa <<= 1;
      --e;
    }
    bits = sign | static_cast<std::uint32_t>(e) << 23 | ((mantissa & 0x3FF) << 13);
  }
  float f = 0;
  std::memcpy(&f, &bits, 4);
  return f;
}

void decode_bc6h_block(const std::uint8_t* block, bool is_signed, std::uint16_t out[16][3]) {
  std::memset(out, 0, sizeof(std::uint16_t) * 16 * 3);
  const int low2 = block[0] & 3;
  const int low5 = block[0] & 31;
  const int mode_index = find_mode(low2, low5);
  if (mode_index < 0) return;  // reserved: all zero
  const mode_info& m = modes[mode_index];
  bit_reader bits(block);
  bits.read(m.mode_bits);
  int e[4][3] = {};
  read_endpoints(m, mode_index, bits, is_signed, e);
  const int partition = m.two_subsets ? bits.read(5) : 0;
  int unq[4][3] = {};
  const int endpoints = m.two_subsets ? 4 : 2;
  for (int k = 0; k < endpoints; ++k) {
    for (int c = 0; c < 3; ++c) unq[k][c] = unquantize(e[k][c], m.endpoint_bits, is_signed);
  }
  const int index_bits = m.two_subsets ? 3 : 4;
  for (int i = 0; i < 16; ++i) {
    const int subset = m.two_subsets ? (partitions2[partition] >> i) & 1 : 0;
    const bool anchor = i == 0 || (m.two_subsets && i == anchor2_1[partition]);
    const int index = bits.read(anchor ? index_bits - 1 : index_bits);
    const int w = index_bits == 3 ? weights3[index] : weights4[index];
    for (int c = 0; c < 3; ++c) {
      const int a = unq[2 * subset][c];
      const int b = unq[2 * subset + 1][c];
      out[i][c] = finish_unquantize((a * (64 - w) + b * w + 32) >> 6, is_signed);
    }
  }
}

}  // namespace vramkit::texture::detail

// BCn reference decoder from the format specifications (the D3D11 functional specification's BC
// sections, as reproduced in the Khronos Data Format Specification's "BC1-BC7" chapter): bit
// layouts, partition and anchor tables, interpolation weights. docs/texture.md lists the sources.
#include "vramkit/texture/block_codec.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "texture/bc6h_decoder.hpp"
#include "texture/bptc_tables.hpp"
#include "vramkit/core/error.hpp"

namespace vramkit::texture {
namespace {

using detail::anchor2_1;
using detail::anchor3_1;
using detail::anchor3_2;
using detail::partitions2;
using detail::partitions3;
using detail::weights2;
using detail::weights3;
using detail::weights4;

struct bc7_mode {
  int subsets, partition_bits, rotation_bits, selector_bits, color_bits, alpha_bits;
  int endpoint_pbits, shared_pbits, index_bits, index2_bits;
};
constexpr bc7_mode bc7_modes[8] = {{3, 4, 0, 0, 4, 0, 1, 0, 3, 0}, {2, 6, 0, 0, 6, 0, 0, 1, 3, 0},
                                   {3, 6, 0, 0, 5, 0, 0, 0, 2, 0}, {2, 6, 0, 0, 7, 0, 1, 0, 2, 0},
                                   {1, 0, 2, 1, 5, 6, 0, 0, 2, 3}, {1, 0, 2, 0, 7, 8, 0, 0, 2, 2},
                                   {1, 0, 0, 0, 7, 7, 1, 0, 4, 0}, {2, 6, 0, 0, 5, 5, 1, 0, 2, 0}};

// Reads a 128-bit block least-significant bit first.
class bit_reader {
 public:
  explicit bit_reader(const std::uint8_t* p) {
    std::memcpy(&lo_, p, 8);
    std::memcpy(&hi_, p + 8, 8);
  }
  int read(int bits) {
    int v = 0;
    for (int i = 0; i < bits; ++i, ++pos_) {
      const std::uint64_t word = pos_ < 64 ? lo_ : hi_;
      v |= static_cast<int>((word >> (pos_ & 63)) & 1) << i;
    }
    return v;
  }

 private:
  std::uint64_t lo_ = 0, hi_ = 0;
  int pos_ = 0;
};

int interpolate(int e0, int e1, int weight) { return ((64 - weight) * e0 + weight * e1 + 32) >> 6; }

int weight_of(int bits, int index) {
  return bits == 2 ? weights2[index] : bits == 3 ? weights3[index] : weights4[index];
}

void decode_bc7(const std::uint8_t* block, texel out[16]) {
  int mode = 0;
  while (mode < 8 && !(block[0] & (1 << mode))) ++mode;
  if (mode == 8) {
    for (int i = 0; i < 16; ++i) out[i] = {0, 0, 0, 0};
    return;
  }
  const bc7_mode& m = bc7_modes[mode];
  bit_reader bits(block);
  bits.read(mode + 1);
  const int partition = bits.read(m.partition_bits);
  const int rotation = bits.read(m.rotation_bits);
  const int selector = bits.read(m.selector_bits);
  const int endpoints = 2 * m.subsets;
  int ep[6][4] = {};
  for (int c = 0; c < 3; ++c) {
    for (int e = 0; e < endpoints; ++e) ep[e][c] = bits.read(m.color_bits);
  }
  for (int e = 0; e < endpoints; ++e) ep[e][3] = m.alpha_bits ? bits.read(m.alpha_bits) : 255;
  int color_bits = m.color_bits;
  int alpha_bits = m.alpha_bits;
  if (m.endpoint_pbits || m.shared_pbits) {
    int pbit[6] = {};
    if (m.endpoint_pbits) {
      for (int e = 0; e < endpoints; ++e) pbit[e] = bits.read(1);
    } else {
      for (int s = 0; s < m.subsets; ++s) pbit[2 * s] = pbit[2 * s + 1] = bits.read(1);
    }
    for (int e = 0; e < endpoints; ++e) {
      for (int c = 0; c < 3; ++c) ep[e][c] = ep[e][c] << 1 | pbit[e];
      if (m.alpha_bits) ep[e][3] = ep[e][3] << 1 | pbit[e];
    }
    ++color_bits;
    if (m.alpha_bits) ++alpha_bits;
  }
  // Unquantize: shift to the top of 8 bits and replicate the high bits into the low ones.
  for (int e = 0; e < endpoints; ++e) {
    for (int c = 0; c < 3; ++c) {
      ep[e][c] = (ep[e][c] << (8 - color_bits)) | (ep[e][c] << (8 - color_bits) >> color_bits);
    }
    if (m.alpha_bits) {
      ep[e][3] = (ep[e][3] << (8 - alpha_bits)) | (ep[e][3] << (8 - alpha_bits) >> alpha_bits);
    }
  }
  int subset[16] = {};
  for (int i = 0; i < 16; ++i) {
    if (m.subsets == 2) subset[i] = (partitions2[partition] >> i) & 1;
    if (m.subsets == 3) subset[i] = static_cast<int>((partitions3[partition] >> (2 * i)) & 3);
  }
  auto is_anchor = [&](int i) {
    if (i == 0) return true;
    if (m.subsets == 2) return i == anchor2_1[partition];
    if (m.subsets == 3) return i == anchor3_1[partition] || i == anchor3_2[partition];
    return false;
  };
  int index[16];
  int index2[16] = {};
  for (int i = 0; i < 16; ++i) index[i] = bits.read(is_anchor(i) ? m.index_bits - 1 : m.index_bits);
  if (m.index2_bits) {
    for (int i = 0; i < 16; ++i) index2[i] = bits.read(i == 0 ? m.index2_bits - 1 : m.index2_bits);
  }
  for (int i = 0; i < 16; ++i) {
    const int* e0 = ep[2 * subset[i]];
    const int* e1 = ep[2 * subset[i] + 1];
    int color_weight = weight_of(m.index_bits, index[i]);
    int alpha_weight = color_weight;
    if (m.index2_bits) {
      // Mode 4's selector bit swaps which index set drives colour and which alpha.
      const int w2 = weight_of(m.index2_bits, index2[i]);
      if (selector) {
        alpha_weight = color_weight;
        color_weight = w2;
      } else {
        alpha_weight = w2;
      }
    }
    int rgba[4];
    for (int c = 0; c < 3; ++c) rgba[c] = interpolate(e0[c], e1[c], color_weight);
    rgba[3] = m.alpha_bits ? interpolate(e0[3], e1[3], alpha_weight) : 255;
    if (rotation) std::swap(rgba[3], rgba[rotation - 1]);
    out[i] = {rgba[0] / 255.0f, rgba[1] / 255.0f, rgba[2] / 255.0f, rgba[3] / 255.0f};
  }
}

// BC1 colour block; BC2/BC3 use it in four-colour mode whatever the endpoint order.
void decode_bc1_color(const std::uint8_t* block, texel out[16], bool four_color_always) {
  const int c0 = block[0] | block[1] << 8;
  const int c1 = block[2] | block[3] << 8;
  auto expand = [](int c) {
    return texel{((c >> 11) & 31) / 31.0f, ((c >> 5) & 63) / 63.0f, (c & 31) / 31.0f, 1.0f};
  };
  texel palette[4] = {expand(c0), expand(c1), {}, {}};
  auto mix = [&](float w0, float w1, float d) {
    return texel{(w0 * palette[0].r + w1 * palette[1].r) / d,
                 (w0 * palette[0].g + w1 * palette[1].g) / d,
                 (w0 * palette[0].b + w1 * palette[1].b) / d, 1.0f};
  };
  if (c0 > c1 || four_color_always) {
    palette[2] = mix(2, 1, 3);
    palette[3] = mix(1, 2, 3);
  } else {
    palette[2] = mix(1, 1, 2);
    palette[3] = {0, 0, 0, 0};
  }
  const std::uint32_t indices =
      block[4] | block[5] << 8 | block[6] << 16 | static_cast<std::uint32_t>(block[7]) << 24;
  for (int i = 0; i < 16; ++i) out[i] = palette[(indices >> (2 * i)) & 3];
}

// BC1 colour block as NVIDIA's texture unit decodes it: endpoints widened to 8 bits by bit
// replication; red and blue thirds from the 5-bit values ((2a + b) * 22 / 8, halves
// (a + b) * 33 / 8), green from the 8-bit values with a weight of 80.25/256 for a third and
// 128.25/256 for a half. The expressions are those rgbcx.h (bc7enc) publishes as its NVIDIA mode
// (docs/texture.md); they reproduce, to the last float bit, the largest GPU-minus-reference
// differences an H200 sampled for BC1 and BC2 on every level.
void decode_bc1_color_nvidia(const std::uint8_t* block, texel out[16], bool four_color_always) {
  const int c0 = block[0] | block[1] << 8;
  const int c1 = block[2] | block[3] << 8;
  const int r[2] = {(c0 >> 11) & 31, (c1 >> 11) & 31};
  const int g[2] = {(c0 >> 5) & 63, (c1 >> 5) & 63};
  const int b[2] = {c0 & 31, c1 & 31};
  auto wide5 = [](int v) { return v << 3 | v >> 2; };
  auto wide6 = [](int v) { return v << 2 | v >> 4; };
  auto third5 = [](int a, int z) { return (2 * a + z) * 22 / 8; };
  auto half5 = [](int a, int z) { return (a + z) * 33 / 8; };
  // gd / 4 truncates toward zero, as the published expression does.
  auto third6 = [](int a, int z) {
    const int gd = z - a;
    return (256 * a + gd / 4 + 128 + gd * 80) / 256;
  };
  auto half6 = [](int a, int z) {
    const int gd = z - a;
    return (256 * a + gd / 4 + 128 + gd * 128) / 256;
  };
  int p[4][4] = {{wide5(r[0]), wide6(g[0]), wide5(b[0]), 255},
                 {wide5(r[1]), wide6(g[1]), wide5(b[1]), 255}};
  if (c0 > c1 || four_color_always) {
    for (int k = 0; k < 2; ++k) {
      p[2 + k][0] = third5(r[k], r[1 - k]);
      p[2 + k][1] = third6(wide6(g[k]), wide6(g[1 - k]));
      p[2 + k][2] = third5(b[k], b[1 - k]);
      p[2 + k][3] = 255;
    }
  } else {
    p[2][0] = half5(r[0], r[1]);
    p[2][1] = half6(wide6(g[0]), wide6(g[1]));
    p[2][2] = half5(b[0], b[1]);
    p[2][3] = 255;
    p[3][0] = p[3][1] = p[3][2] = p[3][3] = 0;
  }
  const std::uint32_t indices =
      block[4] | block[5] << 8 | block[6] << 16 | static_cast<std::uint32_t>(block[7]) << 24;
  for (int i = 0; i < 16; ++i) {
    const int* c = p[(indices >> (2 * i)) & 3];
    out[i] = {c[0] / 255.0f, c[1] / 255.0f, c[2] / 255.0f, c[3] / 255.0f};
  }
}

// One BC4 channel (also BC3's alpha and each BC5 channel), exact palette.
void decode_bc4_channel(const std::uint8_t* block, bool snorm, float out[16]) {
  float v[8];
  float e0, e1;
  bool six;
  if (snorm) {
    const int s0 = std::max(-127, static_cast<int>(static_cast<std::int8_t>(block[0])));
    const int s1 = std::max(-127, static_cast<int>(static_cast<std::int8_t>(block[1])));
    e0 = s0 / 127.0f;
    e1 = s1 / 127.0f;
    six = !(static_cast<std::int8_t>(block[0]) > static_cast<std::int8_t>(block[1]));
  } else {
    e0 = block[0] / 255.0f;
    e1 = block[1] / 255.0f;
    six = !(block[0] > block[1]);
  }
  v[0] = e0;
  v[1] = e1;
  if (!six) {
    for (int i = 2; i < 8; ++i) v[i] = ((8 - i) * e0 + (i - 1) * e1) / 7.0f;
  } else {
    for (int i = 2; i < 6; ++i) v[i] = ((6 - i) * e0 + (i - 1) * e1) / 5.0f;
    v[6] = snorm ? -1.0f : 0.0f;
    v[7] = 1.0f;
  }
  std::uint64_t indices = 0;
  for (int i = 0; i < 6; ++i) indices |= static_cast<std::uint64_t>(block[2 + i]) << (8 * i);
  for (int i = 0; i < 16; ++i) out[i] = v[(indices >> (3 * i)) & 7];
}

// NVIDIA's BC4-style palettes (docs/texture.md derives them from the H200's samples). Each
// interpolated entry is one endpoint plus the endpoint difference times u, 2u or 4u (8-value
// mode) or v, 2v (6-value mode), measured from the nearer end: with K the scale of 1.0 in the
// units interpolated, entries 2..7 weigh the second endpoint u, 2u, K - 4u, 4u, K - 2u, K - u
// (u = 36) and entries 2..5 of the 6-value mode v, 2v, K - 2v, K - v (v = 48).
constexpr int nv_weight8[8] = {0, 0, 36, 72, -144, 144, -72, -36};  // negative: K + w
constexpr int nv_weight6[6] = {0, 0, 48, 96, -96, -48};

// BC4/BC5 UNORM: a 16-bit result (257 e0 and 257 e1 are the endpoints, K = 257, exact integers).
void decode_bc4_channel_nvidia_unorm(const std::uint8_t* block, float out[16]) {
  const int e0 = block[0];
  const int e1 = block[1];
  const bool six = !(e0 > e1);
  int v[8];
  v[0] = 257 * e0;
  v[1] = 257 * e1;
  for (int i = 2; i < (six ? 6 : 8); ++i) {
    int w = six ? nv_weight6[i] : nv_weight8[i];
    if (w < 0) w += 257;
    v[i] = (257 - w) * e0 + w * e1;
  }
  if (six) {
    v[6] = 0;
    v[7] = 65535;
  }
  std::uint64_t indices = 0;
  for (int i = 0; i < 6; ++i) indices |= static_cast<std::uint64_t>(block[2 + i]) << (8 * i);
  for (int i = 0; i < 16; ++i) out[i] = static_cast<float>(v[(indices >> (3 * i)) & 7]) / 65535.0f;
}

// floor(a / b) for b > 0.
std::int64_t floor_div(std::int64_t a, std::int64_t b) {
  return a >= 0 ? a / b : -((-a + b - 1) / b);
}

// BC4/BC5 SNORM: endpoints widened to 16-bit SNORM by bit replication (s << 8 | s << 1 | s >> 6 of
// the magnitude), K = 32767 / 127, the interpolated value rounded to the nearest 16-bit step.
void decode_bc4_channel_nvidia_snorm(const std::uint8_t* block, float out[16]) {
  const int s0 = std::max(-127, static_cast<int>(static_cast<std::int8_t>(block[0])));
  const int s1 = std::max(-127, static_cast<int>(static_cast<std::int8_t>(block[1])));
  auto widen = [](int s) {
    const int m = s < 0 ? -s : s;
    const int v = (m << 8) | (m << 1) | (m >> 6);
    return s < 0 ? -v : v;
  };
  const std::int64_t e0 = widen(s0);
  const std::int64_t e1 = widen(s1);
  // The mode comes from the stored bytes (-128 and -127 differ here), as in the reference.
  const bool six = !(static_cast<std::int8_t>(block[0]) > static_cast<std::int8_t>(block[1]));
  int v[8];
  v[0] = static_cast<int>(e0);
  v[1] = static_cast<int>(e1);
  for (int i = 2; i < (six ? 6 : 8); ++i) {
    const int w = six ? nv_weight6[i] : nv_weight8[i];
    // from e0 by w * 127 / 32767 of the difference, or from e1 back by |w| * 127 / 32767
    const std::int64_t num =
        w > 0 ? e0 * 32767 + (e1 - e0) * w * 127 : e1 * 32767 + (e1 - e0) * w * 127;
    v[i] = static_cast<int>(floor_div(2 * num + 32767, 2 * 32767));
  }
  if (six) {
    v[6] = -32767;
    v[7] = 32767;
  }
  std::uint64_t indices = 0;
  for (int i = 0; i < 6; ++i) indices |= static_cast<std::uint64_t>(block[2 + i]) << (8 * i);
  for (int i = 0; i < 16; ++i) out[i] = static_cast<float>(v[(indices >> (3 * i)) & 7]) / 32767.0f;
}

// BC3 alpha: an 8-bit result, K = 256, from the first endpoint with a d/8 term (d = e1 - e0,
// truncated) as in NVIDIA's BC1 green: (256 e0 + d/8 + 128 + w d) / 256.
void decode_bc3_alpha_nvidia(const std::uint8_t* block, float out[16]) {
  const int e0 = block[0];
  const int e1 = block[1];
  const bool six = !(e0 > e1);
  const int d = e1 - e0;
  int v[8];
  v[0] = e0;
  v[1] = e1;
  for (int i = 2; i < (six ? 6 : 8); ++i) {
    int w = six ? nv_weight6[i] : nv_weight8[i];
    if (w < 0) w += 256;
    v[i] = static_cast<int>(floor_div(256 * e0 + d / 8 + 128 + d * w, 256));
  }
  if (six) {
    v[6] = 0;
    v[7] = 255;
  }
  std::uint64_t indices = 0;
  for (int i = 0; i < 6; ++i) indices |= static_cast<std::uint64_t>(block[2 + i]) << (8 * i);
  for (int i = 0; i < 16; ++i) out[i] = static_cast<float>(v[(indices >> (3 * i)) & 7]) / 255.0f;
}

// One BC4-style channel as `decoder` decodes it.
void decode_channel(const std::uint8_t* block, bool snorm, bool bc3_alpha, bc_decoder decoder,
                    float out[16]) {
  if (decoder == bc_decoder::reference) {
    decode_bc4_channel(block, snorm, out);
  } else if (bc3_alpha) {
    decode_bc3_alpha_nvidia(block, out);
  } else if (snorm) {
    decode_bc4_channel_nvidia_snorm(block, out);
  } else {
    decode_bc4_channel_nvidia_unorm(block, out);
  }
}

void decode_bc6h(const std::uint8_t* block, bool is_signed, texel out[16]) {
  std::uint16_t h[16][3];
  detail::decode_bc6h_block(block, is_signed, h);
  for (int i = 0; i < 16; ++i) {
    out[i] = {detail::half_to_float(h[i][0]), detail::half_to_float(h[i][1]),
              detail::half_to_float(h[i][2]), 1.0f};
  }
}

}  // namespace

bool can_decode(const pixel_format& f) noexcept { return f.format != texture_format::astc; }

void decode_block(const pixel_format& f, const std::uint8_t* block, texel out[16],
                  bc_decoder decoder) {
  float ch[16];
  const auto color = decoder == bc_decoder::nvidia ? decode_bc1_color_nvidia : decode_bc1_color;
  switch (f.format) {
    case texture_format::bc1:
      color(block, out, false);
      return;
    case texture_format::bc2:
      color(block + 8, out, true);
      for (int i = 0; i < 16; ++i) out[i].a = ((block[i / 2] >> (4 * (i & 1))) & 15) / 15.0f;
      return;
    case texture_format::bc3:
      color(block + 8, out, true);
      decode_channel(block, false, true, decoder, ch);
      for (int i = 0; i < 16; ++i) out[i].a = ch[i];
      return;
    case texture_format::bc4:
      decode_channel(block, f.snorm, false, decoder, ch);
      for (int i = 0; i < 16; ++i) out[i] = {ch[i], 0, 0, 1};
      return;
    case texture_format::bc5: {
      float g[16];
      decode_channel(block, f.snorm, false, decoder, ch);
      decode_channel(block + 8, f.snorm, false, decoder, g);
      for (int i = 0; i < 16; ++i) out[i] = {ch[i], g[i], 0, 1};
      return;
    }
    case texture_format::bc6h:
      decode_bc6h(block, f.snorm, out);
      return;
    case texture_format::bc7:
      decode_bc7(block, out);
      return;
    case texture_format::rgba8:
      out[0] = {block[0] / 255.0f, block[1] / 255.0f, block[2] / 255.0f, block[3] / 255.0f};
      return;
    default:
      throw logic_error("decode_block: no CPU decoder for " + f.name());
  }
}

std::vector<texel> decode_level(const pixel_format& f, int width, int height,
                                std::span<const std::uint8_t> data, bc_decoder decoder) {
  if (!can_decode(f)) throw logic_error("decode_level: no CPU decoder for " + f.name());
  if (data.size() < level_bytes(f, width, height))
    throw logic_error("decode_level: data shorter than the level");
  std::vector<texel> out(static_cast<std::size_t>(width) * height);
  if (f.format == texture_format::rgba8) {
    for (std::size_t i = 0; i < out.size(); ++i) decode_block(f, &data[4 * i], &out[i]);
    return out;
  }
  const int bw = (width + 3) / 4;
  const int bh = (height + 3) / 4;
  texel block[16];
  for (int by = 0; by < bh; ++by) {
    for (int bx = 0; bx < bw; ++bx) {
      decode_block(f, &data[(static_cast<std::size_t>(by) * bw + bx) * f.block_bytes], block,
                   decoder);
      for (int y = 0; y < 4 && by * 4 + y < height; ++y) {
        for (int x = 0; x < 4 && bx * 4 + x < width; ++x) {
          out[static_cast<std::size_t>(by * 4 + y) * width + bx * 4 + x] = block[y * 4 + x];
        }
      }
    }
  }
  return out;
}

std::vector<std::uint8_t> decode_level_rgba8(const pixel_format& f, int width, int height,
                                             std::span<const std::uint8_t> data) {
  const auto texels = decode_level(f, width, height, data);
  std::vector<std::uint8_t> out(texels.size() * 4);
  auto q = [&](float v) {
    if (f.snorm) v = (v + 1.0f) * 0.5f;
    return static_cast<std::uint8_t>(std::lround(std::clamp(v, 0.0f, 1.0f) * 255.0f));
  };
  for (std::size_t i = 0; i < texels.size(); ++i) {
    out[4 * i] = q(texels[i].r);
    out[4 * i + 1] = q(texels[i].g);
    out[4 * i + 2] = q(texels[i].b);
    out[4 * i + 3] = f.snorm ? 255 : q(texels[i].a);
  }
  return out;
}

std::vector<std::uint8_t> encode_bc1(int width, int height, std::span<const std::uint8_t> rgba) {
  if (rgba.size() != static_cast<std::size_t>(width) * height * 4) {
    throw logic_error("encode_bc1: buffer size differs from width x height x 4");
  }
  const int bw = (width + 3) / 4;
  const int bh = (height + 3) / 4;
  std::vector<std::uint8_t> out(static_cast<std::size_t>(bw) * bh * 8);
  for (int by = 0; by < bh; ++by) {
    for (int bx = 0; bx < bw; ++bx) {
      int px[16][3];
      int lo[3] = {255, 255, 255};
      int hi[3] = {0, 0, 0};
      for (int i = 0; i < 16; ++i) {
        // Texels past the edge repeat the last row/column.
        const int x = std::min(bx * 4 + (i & 3), width - 1);
        const int y = std::min(by * 4 + (i >> 2), height - 1);
        for (int c = 0; c < 3; ++c) {
          px[i][c] = rgba[(static_cast<std::size_t>(y) * width + x) * 4 + c];
          lo[c] = std::min(lo[c], px[i][c]);
          hi[c] = std::max(hi[c], px[i][c]);
        }
      }
      auto pack = [](const int c[3]) {
        return (((c[0] * 31 + 127) / 255) << 11) | (((c[1] * 63 + 127) / 255) << 5) |
               ((c[2] * 31 + 127) / 255);
      };
      int c0 = pack(hi);
      int c1 = pack(lo);
      std::uint8_t* block = &out[(static_cast<std::size_t>(by) * bw + bx) * 8];
      if (c0 == c1) {
        // One colour: four-colour mode needs c0 > c1; the texels all pick the exact endpoint.
        if (c0 == 0) {
          c0 = 1;
        } else {
          c1 = c0 - 1;
        }
      }
      if (c0 < c1) std::swap(c0, c1);
      block[0] = static_cast<std::uint8_t>(c0);
      block[1] = static_cast<std::uint8_t>(c0 >> 8);
      block[2] = static_cast<std::uint8_t>(c1);
      block[3] = static_cast<std::uint8_t>(c1 >> 8);
      // Index k in every texel decodes to palette entry k.
      texel entries[4];
      for (int k = 0; k < 4; ++k) {
        std::uint8_t probe[8];
        std::memcpy(probe, block, 4);
        std::memset(probe + 4, k * 0x55, 4);
        texel decoded[16];
        decode_block(pixel_format::of(texture_format::bc1), probe, decoded);
        entries[k] = decoded[0];
      }
      std::uint32_t indices = 0;
      for (int i = 0; i < 16; ++i) {
        int best = 0;
        float best_d = 1e30f;
        for (int k = 0; k < 4; ++k) {
          const float dr = entries[k].r * 255 - px[i][0];
          const float dg = entries[k].g * 255 - px[i][1];
          const float db = entries[k].b * 255 - px[i][2];
          const float d = dr * dr + dg * dg + db * db;
          if (d < best_d) {
            best_d = d;
            best = k;
          }
        }
        indices |= static_cast<std::uint32_t>(best) << (2 * i);
      }
      for (int k = 0; k < 4; ++k) block[4 + k] = static_cast<std::uint8_t>(indices >> (8 * k));
    }
  }
  return out;
}

}  // namespace vramkit::texture

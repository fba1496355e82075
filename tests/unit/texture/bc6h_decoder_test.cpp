// The BC6H decoder against an independent one (OpenImageIO's DDS reader, Debian's
// openimageio-tools, printing half floats with `oiiotool --dumpdata`) on random blocks of every
// mode and of the reserved modes, UF16 and SF16; plus blocks built by hand from the specification.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <sstream>

#include "texture_test_support.hpp"
#include "vramkit/texture/block_codec.hpp"
#include "vramkit/texture/texture_file.hpp"

namespace vramkit::texture {
namespace {

using testing::temp_dir;
using tf = texture_format;

// The five low bits of each of the 14 modes (modes 0 and 1 use two), then the four reserved
// five-bit codes.
constexpr int mode_codes[] = {0, 1, 2, 6, 10, 14, 18, 22, 26, 30, 3, 7, 11, 15, 19, 23, 27, 31};

// Random blocks cycling through every mode code; two-bit modes get random upper mode bits.
std::vector<std::uint8_t> random_bc6h_blocks(int blocks, std::uint32_t seed) {
  auto data = testing::random_bytes(static_cast<std::size_t>(blocks) * 16, seed);
  for (int i = 0; i < blocks; ++i) {
    std::uint8_t& b0 = data[static_cast<std::size_t>(i) * 16];
    const int code = mode_codes[i % std::size(mode_codes)];
    b0 = code < 2 ? static_cast<std::uint8_t>((b0 & ~3) | code)
                  : static_cast<std::uint8_t>((b0 & ~31) | code);
  }
  return data;
}

// `oiiotool FILE --dumpdata`: "Pixel (x, y): r g b" per texel of the top level.
std::vector<float> oiio_dump(const std::filesystem::path& dds, int w, int h) {
  std::vector<float> out(static_cast<std::size_t>(w) * h * 3, NAN);
  const std::string cmd = "oiiotool --dumpdata " + dds.string() + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return {};
  char line[512];
  while (std::fgets(line, sizeof line, p)) {
    int x = 0, y = 0;
    char rest[400] = {};
    if (std::sscanf(line, " Pixel (%d, %d): %399[^\n]", &x, &y, rest) != 3) continue;
    if (x < 0 || y < 0 || x >= w || y >= h) continue;
    std::istringstream in(rest);
    std::string v;
    for (int c = 0; c < 3 && (in >> v); ++c)
      out[(static_cast<std::size_t>(y) * w + x) * 3 + c] = std::strtof(v.c_str(), nullptr);
  }
  pclose(p);
  return out;
}

// Whether `a` and `b` are the same half: equal, both infinite of one sign, or (printed with nine
// decimals) within a thousandth of one half ulp.
bool same_half(float a, float b) {
  if (std::isinf(a) || std::isinf(b)) return a == b;
  const float ulp = std::max(std::ldexp(1.0f, std::ilogb(std::max(std::fabs(a), 6.1e-5f)) - 10),
                             std::ldexp(1.0f, -24));
  return std::fabs(a - b) <= 1e-3f * ulp + 5e-10f;
}

TEST(Bc6hDecoder, MatchesOpenImageIoOnEveryMode) {
  if (!testing::have_tool("oiiotool")) {
    GTEST_SKIP() << "oiiotool not installed (Debian package openimageio-tools)";
  }
  temp_dir dir;
  const int w = 96, h = 48;  // 288 blocks: 16 of each mode code
  for (bool is_signed : {false, true}) {
    texture_image img;
    img.info.format = pixel_format::of(tf::bc6h, false, is_signed);
    img.info.width = w;
    img.info.height = h;
    img.info.data_bytes = level_bytes(img.info.format, w, h);
    img.data = random_bc6h_blocks((w / 4) * (h / 4), is_signed ? 21 : 20);
    const auto file = dir / (is_signed ? "sf16.dds" : "uf16.dds");
    write_dds(file, img);
    const auto mine = decode_level(img.info.format, w, h, img.data);
    const auto theirs = oiio_dump(file, w, h);
    ASSERT_EQ(theirs.size(), mine.size() * 3);
    int mismatched = 0;
    for (std::size_t i = 0; i < mine.size(); ++i) {
      const float m[3] = {mine[i].r, mine[i].g, mine[i].b};
      for (int c = 0; c < 3; ++c) {
        if (!same_half(m[c], theirs[i * 3 + c])) {
          if (mismatched++ < 5) {
            ADD_FAILURE() << img.info.format.name() << " texel " << i % w << "," << i / w
                          << " (block mode code "
                          << (img.data[((i / w / 4) * (w / 4) + (i % w) / 4) * 16] & 31)
                          << ") channel " << c << ": ours " << m[c] << ", OpenImageIO "
                          << theirs[i * 3 + c];
          }
        }
      }
      EXPECT_EQ(mine[i].a, 1.0f);
    }
    EXPECT_EQ(mismatched, 0) << img.info.format.name() << " of " << mine.size() * 3 << " values";
  }
}

// Sets `bits` bits of `v` at block bit `pos`.
void put_bits(std::uint8_t* block, int pos, int bits, std::uint32_t v) {
  for (int i = 0; i < bits; ++i, ++pos) {
    if ((v >> i) & 1) block[pos >> 3] |= static_cast<std::uint8_t>(1 << (pos & 7));
  }
}

TEST(Bc6hDecoder, HandBuiltBlocksDecodeAsTheSpecificationSays) {
  // Mode 3 (one subset, 10-bit endpoints stored plainly): endpoint 0 = (0, 512, 1023), endpoint
  // 1 = (1023, 0, 1); texel 0 takes index 0, texel 1 index 15, texel 2 index 7.
  std::uint8_t b[16] = {};
  put_bits(b, 0, 5, 3);
  put_bits(b, 5, 10, 0);
  put_bits(b, 15, 10, 512);
  put_bits(b, 25, 10, 1023);
  put_bits(b, 35, 10, 1023);
  put_bits(b, 45, 10, 0);
  put_bits(b, 55, 10, 1);
  put_bits(b, 65, 3, 0);   // texel 0 (anchor: 3 bits)
  put_bits(b, 68, 4, 15);  // texel 1
  put_bits(b, 72, 4, 7);   // texel 2
  texel t[16];
  decode_block(pixel_format::of(tf::bc6h), b, t);
  // UF16: 1023 of 10 bits unquantizes to 0xFFFF, whose 31/64 is 0x7BFF = 65504 (the largest half).
  EXPECT_EQ(t[0].r, 0.0f);
  EXPECT_EQ(t[0].b, 65504.0f);
  EXPECT_EQ(t[1].r, 65504.0f);
  EXPECT_EQ(t[1].g, 0.0f);
  // G of endpoint 0: 512 -> ((512 << 16) + 0x8000) >> 10 = 32800; index 7 weighs endpoint 1 by
  // 30/64: (32800 * 34 + 0 * 30 + 32) >> 6 = 17425; 17425 * 31 >> 6 = 8440 = 0x20F8 -> 2^-7 *
  // (1 + 248/1024).
  EXPECT_EQ(t[2].g, std::ldexp(1.0f + 248.0f / 1024, -7));
  EXPECT_EQ(t[2].a, 1.0f);
  // SF16, the same bits: 1023 of 10 bits is -1 sign-extended -> -unquantize(1) = -((1 << 15) +
  // 0x4000) >> 9 = -96; -(96 * 31 >> 5) = -93 -> 0x805D, a negative subnormal.
  decode_block(pixel_format::of(tf::bc6h, false, true), b, t);
  EXPECT_EQ(t[0].b, -93 * std::ldexp(1.0f, -24));
  // A reserved mode decodes to zeros, alpha 1.
  std::uint8_t r[16];
  std::memset(r, 0xA5, 16);
  r[0] = 19;
  decode_block(pixel_format::of(tf::bc6h), r, t);
  for (const auto& x : t) {
    EXPECT_EQ(x.r, 0.0f);
    EXPECT_EQ(x.g, 0.0f);
    EXPECT_EQ(x.b, 0.0f);
    EXPECT_EQ(x.a, 1.0f);
  }
}

}  // namespace
}  // namespace vramkit::texture

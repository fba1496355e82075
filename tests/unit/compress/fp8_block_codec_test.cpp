// The fp8 block codec's host reference: every code round-trips, rounding is to the nearest code
// (ties to even) as found by scanning all 256 codes, saturation, block scales, the stated error
// bound, tails and non-finite blocks, for float32, bfloat16 and float16 inputs.
#include "vramkit/compress/fp8_block_codec.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace vc = vramkit::compress;
using vc::fp8_format;

namespace {

constexpr fp8_format k_formats[] = {fp8_format::e4m3, fp8_format::e5m2};

bool finite_code(std::uint8_t c, fp8_format f) { return std::isfinite(vc::decode_fp8(c, f)); }

/// The code nearest to x among all finite codes, ties to the even code (brute force).
std::uint8_t nearest_by_scan(float x, fp8_format f) {
  int best = -1;
  double best_d = 0;
  for (int c = 0; c < 256; ++c) {
    const auto code = static_cast<std::uint8_t>(c);
    if (!finite_code(code, f)) continue;
    const float v = vc::decode_fp8(code, f);
    if (std::signbit(v) != std::signbit(x)) continue;
    const double d = std::fabs(static_cast<double>(v) - x);
    if (best < 0 || d < best_d || (d == best_d && (c & 1) == 0)) {
      best = c;
      best_d = d;
    }
  }
  return static_cast<std::uint8_t>(best);
}

std::uint16_t bf16_bits(float v) {
  std::uint32_t b = 0;
  std::memcpy(&b, &v, 4);
  return static_cast<std::uint16_t>((b + 0x7FFF + ((b >> 16) & 1)) >> 16);
}

float bf16_value(std::uint16_t h) {
  const std::uint32_t b = static_cast<std::uint32_t>(h) << 16;
  float v = 0;
  std::memcpy(&v, &b, 4);
  return v;
}

}  // namespace

TEST(Fp8Codes, EveryFiniteCodeRoundTrips) {
  for (auto f : k_formats) {
    int finite = 0;
    for (int c = 0; c < 256; ++c) {
      const auto code = static_cast<std::uint8_t>(c);
      const float v = vc::decode_fp8(code, f);
      if (!std::isfinite(v)) continue;
      ++finite;
      if (v == 0) {  // +0 and -0 both decode to zero; each encodes back to its own sign
        EXPECT_EQ(vc::encode_fp8(v, f), code);
        continue;
      }
      EXPECT_EQ(vc::encode_fp8(v, f), code) << "code " << c << " value " << v;
    }
    // e4m3fn: 256 - 2 NaN codes; e5m2: 256 - 2 infinities - 6 NaN codes.
    EXPECT_EQ(finite, f == fp8_format::e4m3 ? 254 : 248);
  }
  EXPECT_EQ(vc::decode_fp8(0x7E, fp8_format::e4m3), 448.0F);
  EXPECT_EQ(vc::decode_fp8(0x01, fp8_format::e4m3), std::ldexp(1.0F, -9));
  EXPECT_EQ(vc::decode_fp8(0x7B, fp8_format::e5m2), 57344.0F);
  EXPECT_EQ(vc::decode_fp8(0x01, fp8_format::e5m2), std::ldexp(1.0F, -16));
  EXPECT_TRUE(std::isinf(vc::decode_fp8(0xFC, fp8_format::e5m2)));
  EXPECT_TRUE(std::isnan(vc::decode_fp8(0x7F, fp8_format::e4m3)));
}

TEST(Fp8Codes, RoundsToTheNearestCodeTiesToEven) {
  std::mt19937 rng(3);
  for (auto f : k_formats) {
    std::uniform_real_distribution<float> mag(-12.0F, std::log2(vc::fp8_max(f)));
    for (int i = 0; i < 20000; ++i) {
      const float x = std::exp2(mag(rng)) * ((i & 1) != 0 ? -1.0F : 1.0F);
      ASSERT_EQ(vc::encode_fp8(x, f), nearest_by_scan(x, f)) << x;
    }
    // Exact midpoints between neighbouring codes go to the even one.
    for (int c = 0; c < 0x7E; ++c) {
      const auto lo = static_cast<std::uint8_t>(c), hi = static_cast<std::uint8_t>(c + 1);
      if (!finite_code(hi, f)) continue;
      const float mid = (vc::decode_fp8(lo, f) + vc::decode_fp8(hi, f)) / 2;
      EXPECT_EQ(vc::encode_fp8(mid, f), (c & 1) == 0 ? lo : hi) << "between " << c;
    }
  }
}

TEST(Fp8Codes, SaturatesAtTheLargestFiniteValue) {
  EXPECT_EQ(vc::encode_fp8(1e9F, fp8_format::e4m3), 0x7E);
  EXPECT_EQ(vc::encode_fp8(-470.0F, fp8_format::e4m3), 0xFE);
  EXPECT_EQ(vc::encode_fp8(std::numeric_limits<float>::infinity(), fp8_format::e5m2), 0x7B);
  EXPECT_EQ(vc::encode_fp8(std::numeric_limits<float>::quiet_NaN(), fp8_format::e4m3), 0x7F);
  EXPECT_EQ(vc::encode_fp8(1e-30F, fp8_format::e4m3), 0x00);
}

TEST(Fp8Blocks, ErrorWithinTheStatedBoundForEveryInputType) {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0F, 1.0F);
  std::uniform_real_distribution<float> decades(-3.0F, 3.0F);
  for (auto f : k_formats) {
    const float rel = f == fp8_format::e4m3 ? 0x1p-4F : 0x1p-3F;
    const int min_exp = f == fp8_format::e4m3 ? -6 : -14;
    for (std::size_t n : {1UL, 127UL, 128UL, 129UL, 1000UL, 4096UL + 5}) {
      std::vector<float> x(n);
      for (auto& v : x) v = normal(rng) * std::pow(10.0F, decades(rng));
      std::vector<std::uint8_t> q(vc::payload_bytes(n));
      std::vector<float> s(vc::scale_count(n));
      vc::encode_blocks_host(x.data(), vc::element_type::float32, n, f, q.data(), s.data());
      std::vector<float> back(n + 3, 12345.0F);  // past n: must stay untouched
      vc::decode_blocks_host(q.data(), s.data(), n, f, back.data(), vc::element_type::float32);
      for (std::size_t i = 0; i < n; ++i) {
        float amax = 0;
        const std::size_t b = i / vc::k_block_elements;
        for (std::size_t j = b * 128; j < std::min(n, b * 128 + 128); ++j)
          amax = std::max(amax, std::fabs(x[j]));
        ASSERT_EQ(s[b], amax * vc::fp8_inverse_max(f));
        // Normal range: relative; below the format's smallest normal (scaled): absolute.
        const int mant = f == fp8_format::e4m3 ? 3 : 2;
        const float bound =
            std::max(rel * std::fabs(x[i]), s[b] * std::ldexp(1.0F, min_exp - mant));
        ASSERT_LE(std::fabs(back[i] - x[i]), bound * 1.0001F) << "n " << n << " i " << i;
      }
      for (std::size_t i = n; i < n + 3; ++i) EXPECT_EQ(back[i], 12345.0F);
      for (std::size_t i = n; i < q.size(); ++i) EXPECT_EQ(q[i], 0) << "padding";
      // Each block's largest magnitude lands on the format's largest code.
      const int top = f == fp8_format::e4m3 ? 0x7E : 0x7B;
      for (std::size_t b = 0; b < s.size(); ++b) {
        int hits = 0;
        for (std::size_t i = b * 128; i < std::min(n, b * 128 + 128); ++i)
          hits += (q[i] & 0x7F) == top;
        EXPECT_GE(hits, 1) << "block " << b;
      }
    }
  }
}

TEST(Fp8Blocks, HalfPrecisionInputsAndOutputs) {
  std::mt19937 rng(9);
  std::normal_distribution<float> normal(0.0F, 3.0F);
  const std::size_t n = 777;
  std::vector<std::uint16_t> x(n);
  std::vector<float> xf(n);
  for (std::size_t i = 0; i < n; ++i) {
    x[i] = bf16_bits(normal(rng));
    xf[i] = bf16_value(x[i]);
  }
  std::vector<std::uint8_t> q(vc::payload_bytes(n)), qf(vc::payload_bytes(n));
  std::vector<float> s(vc::scale_count(n)), sf(vc::scale_count(n));
  vc::encode_blocks_host(x.data(), vc::element_type::bfloat16, n, fp8_format::e4m3, q.data(),
                         s.data());
  vc::encode_blocks_host(xf.data(), vc::element_type::float32, n, fp8_format::e4m3, qf.data(),
                         sf.data());
  EXPECT_EQ(q, qf);  // bf16 widens exactly
  EXPECT_EQ(s, sf);
  std::vector<std::uint16_t> back(n);
  std::vector<float> backf(n);
  vc::decode_blocks_host(q.data(), s.data(), n, fp8_format::e4m3, back.data(),
                         vc::element_type::bfloat16);
  vc::decode_blocks_host(q.data(), s.data(), n, fp8_format::e4m3, backf.data(),
                         vc::element_type::float32);
  for (std::size_t i = 0; i < n; ++i) EXPECT_EQ(back[i], bf16_bits(backf[i]));
  // float16: 1.5, -2.25, 65504 (the largest half) and a subnormal (2^-20) survive as halves.
  const std::uint16_t h[4] = {0x3E00, 0xC080, 0x7BFF, 0x0010};
  std::vector<std::uint8_t> hq(128);
  float hs = 0;
  vc::encode_blocks_host(h, vc::element_type::float16, 4, fp8_format::e5m2, hq.data(), &hs);
  EXPECT_EQ(hs, 65504.0F * vc::fp8_inverse_max(fp8_format::e5m2));
  std::uint16_t hb[4] = {};
  vc::decode_blocks_host(hq.data(), &hs, 4, fp8_format::e5m2, hb, vc::element_type::float16);
  EXPECT_EQ(hb[2], 0x7BFF);  // the block's amax decodes to itself
  EXPECT_EQ(hb[3], 0x0000);  // far below the block's smallest step: zero
  EXPECT_EQ(hb[1] & 0x8000, 0x8000);
}

TEST(Fp8Blocks, ZeroBlocksAndNonFiniteBlocks) {
  std::vector<float> x(384, 0.0F);
  x[130] = std::numeric_limits<float>::quiet_NaN();
  x[300] = std::numeric_limits<float>::infinity();
  x[5] = 2.0F;
  x[301] = 1.0F;
  std::vector<std::uint8_t> q(384);
  std::vector<float> s(3);
  vc::encode_blocks_host(x.data(), vc::element_type::float32, 384, fp8_format::e4m3, q.data(),
                         s.data());
  std::vector<float> back(384);
  vc::decode_blocks_host(q.data(), s.data(), 384, fp8_format::e4m3, back.data(),
                         vc::element_type::float32);
  EXPECT_EQ(back[5], 2.0F);  // a block's amax is exact
  EXPECT_EQ(back[6], 0.0F);
  for (int i = 128; i < 384; ++i) EXPECT_TRUE(std::isnan(back[i])) << i;
  std::vector<float> zeros(200, 0.0F);
  std::vector<float> zs(2);
  std::vector<std::uint8_t> zq(256, 0xAA);
  vc::encode_blocks_host(zeros.data(), vc::element_type::float32, 200, fp8_format::e4m3, zq.data(),
                         zs.data());
  EXPECT_EQ(zs[0], 1.0F);
  EXPECT_EQ(zs[1], 1.0F);
  for (auto c : zq) EXPECT_EQ(c, 0);
}

TEST(Fp8Blocks, SwigluRestoreIsTwoDecodesSiluAndProduct) {
  // gate and up as decode_blocks_host gives them; silu(g) = g / (1 + exp(-g)) and act * up,
  // each from the values rounded to the element type and rounded to it once.
  const std::size_t n = 300;
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0F, 3.0F);
  std::vector<float> g(n), u(n);
  for (std::size_t i = 0; i < n; ++i) {
    g[i] = normal(rng);
    u[i] = normal(rng);
  }
  std::vector<std::uint8_t> qg(384), qu(384);
  std::vector<float> sg(3), su(3);
  vc::encode_blocks_host(g.data(), vc::element_type::float32, n, fp8_format::e4m3, qg.data(),
                         sg.data());
  vc::encode_blocks_host(u.data(), vc::element_type::float32, n, fp8_format::e4m3, qu.data(),
                         su.data());
  std::vector<std::uint16_t> out[4];
  for (auto& o : out) o.assign(n, 0);
  vc::decode_swiglu_host({qg.data(), sg.data(), qu.data(), su.data(), out[0].data(), out[1].data(),
                          out[2].data(), out[3].data()},
                         n, fp8_format::e4m3, vc::element_type::bfloat16);
  std::vector<std::uint16_t> dg(n), du(n);
  vc::decode_blocks_host(qg.data(), sg.data(), n, fp8_format::e4m3, dg.data(),
                         vc::element_type::bfloat16);
  vc::decode_blocks_host(qu.data(), su.data(), n, fp8_format::e4m3, du.data(),
                         vc::element_type::bfloat16);
  EXPECT_EQ(out[0], dg);
  EXPECT_EQ(out[1], du);
  for (std::size_t i = 0; i < n; ++i) {
    const float x = bf16_value(dg[i]);
    const std::uint16_t act = bf16_bits(x / (1.0F + std::exp(-x)));
    EXPECT_EQ(out[2][i], act) << i;
    EXPECT_EQ(out[3][i], bf16_bits(bf16_value(act) * bf16_value(du[i]))) << i;
  }
}

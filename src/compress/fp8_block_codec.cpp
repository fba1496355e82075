// Host reference of the fp8 block codec (include/vramkit/compress/fp8_block_codec.hpp): the bits
// the CUDA kernels and the torch fallback must reproduce. Stateless.
#include "vramkit/compress/fp8_block_codec.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

namespace vramkit::compress {

namespace {

/// An IEEE-like minifloat: `mant` mantissa bits, exponent bias, smallest normal exponent.
struct minifloat {
  int mant;
  int bias;
  int min_exp;
  std::uint32_t max_bits;  // largest finite magnitude's code
};

constexpr minifloat k_e4m3{3, 7, -6, 0x7E};
constexpr minifloat k_e5m2{2, 15, -14, 0x7B};
constexpr minifloat k_half{10, 15, -14, 0x7BFF};

const minifloat& info(fp8_format f) { return f == fp8_format::e4m3 ? k_e4m3 : k_e5m2; }

/// The code of |a| (finite, >= 0) rounded to nearest-even, saturated at max_bits.
std::uint32_t round_magnitude(float a, const minifloat& m) {
  const float one_ulp_scale = std::ldexp(1.0F, m.mant);
  if (a < std::ldexp(1.0F, m.min_exp)) {
    // Subnormal: multiples of 2^(min_exp - mant); a code of 2^mant is the smallest normal.
    return static_cast<std::uint32_t>(std::nearbyint(std::ldexp(a, m.mant - m.min_exp)));
  }
  int e = 0;
  const float fr = std::frexp(a, &e);  // a = fr * 2^e, fr in [0.5, 1)
  int exp = e - 1;
  auto frac = static_cast<std::uint32_t>(std::nearbyint((2 * fr - 1) * one_ulp_scale));
  if (frac == (1U << m.mant)) {
    frac = 0;
    ++exp;
  }
  const long long biased = static_cast<long long>(exp) + m.bias;
  const auto code = static_cast<std::uint64_t>(biased) << m.mant | frac;
  return static_cast<std::uint32_t>(std::min<std::uint64_t>(code, m.max_bits));
}

float magnitude_value(std::uint32_t bits, const minifloat& m) {
  const std::uint32_t e = bits >> m.mant;
  const std::uint32_t frac = bits & ((1U << m.mant) - 1);
  if (e == 0) return std::ldexp(static_cast<float>(frac), m.min_exp - m.mant);
  return std::ldexp(static_cast<float>((1U << m.mant) + frac),
                    static_cast<int>(e) - m.bias - m.mant);
}

float from_bits(std::uint32_t b) {
  float f = 0;
  std::memcpy(&f, &b, sizeof f);
  return f;
}

std::uint32_t to_bits(float f) {
  std::uint32_t b = 0;
  std::memcpy(&b, &f, sizeof b);
  return b;
}

float load(const void* src, element_type t, std::size_t i) {
  switch (t) {
    case element_type::float32:
      return static_cast<const float*>(src)[i];
    case element_type::bfloat16:
      return from_bits(static_cast<std::uint32_t>(static_cast<const std::uint16_t*>(src)[i]) << 16);
    case element_type::float16: {
      const std::uint16_t h = static_cast<const std::uint16_t*>(src)[i];
      const float sign = (h & 0x8000) != 0 ? -1.0F : 1.0F;
      const std::uint32_t mag = h & 0x7FFF;
      if ((mag >> 10) == 0x1F)
        return (mag & 0x3FF) != 0 ? std::numeric_limits<float>::quiet_NaN()
                                  : sign * std::numeric_limits<float>::infinity();
      return sign * magnitude_value(mag, k_half);
    }
  }
  return 0;
}

void store(void* dst, element_type t, std::size_t i, float v) {
  switch (t) {
    case element_type::float32:
      static_cast<float*>(dst)[i] = v;
      return;
    case element_type::bfloat16: {
      const std::uint32_t b = to_bits(v);
      std::uint16_t out = 0;
      if (std::isnan(v))
        out = 0x7FC0;  // the quiet NaN PyTorch writes
      else
        out = static_cast<std::uint16_t>((b + 0x7FFF + ((b >> 16) & 1)) >> 16);
      static_cast<std::uint16_t*>(dst)[i] = out;
      return;
    }
    case element_type::float16: {
      const std::uint16_t sign = (to_bits(v) >> 16) & 0x8000;
      const float a = std::fabs(v);
      std::uint32_t mag = 0;
      if (std::isnan(v))
        mag = 0x7E00;
      else if (a >= 65520.0F)  // rounds past 65504, the largest half
        mag = 0x7C00;
      else
        mag = round_magnitude(a, k_half);
      static_cast<std::uint16_t*>(dst)[i] = static_cast<std::uint16_t>(sign | mag);
      return;
    }
  }
}

}  // namespace

float block_scale(float s) {
  // Zero (an all-zero block) or subnormal (whose reciprocal may overflow): 1. NaN stays NaN.
  return s < std::numeric_limits<float>::min() ? 1.0F : s;
}

float fp8_max(fp8_format f) { return f == fp8_format::e4m3 ? 448.0F : 57344.0F; }

float fp8_inverse_max(fp8_format f) { return static_cast<float>(1.0 / fp8_max(f)); }

std::uint8_t encode_fp8(float x, fp8_format f) {
  if (std::isnan(x)) return 0x7F;
  const auto sign = static_cast<std::uint8_t>(std::signbit(x) ? 0x80 : 0);
  const minifloat& m = info(f);
  const float a = std::fabs(x);
  if (a >= fp8_max(f)) return static_cast<std::uint8_t>(sign | m.max_bits);
  return static_cast<std::uint8_t>(sign | round_magnitude(a, m));
}

float decode_fp8(std::uint8_t code, fp8_format f) {
  const float sign = (code & 0x80) != 0 ? -1.0F : 1.0F;
  const std::uint32_t bits = code & 0x7F;
  if (f == fp8_format::e4m3 && bits == 0x7F) return std::numeric_limits<float>::quiet_NaN();
  if (f == fp8_format::e5m2 && bits >= 0x7C)
    return bits == 0x7C ? sign * std::numeric_limits<float>::infinity()
                        : std::numeric_limits<float>::quiet_NaN();
  return sign * magnitude_value(bits, info(f));
}

void encode_blocks_host(const void* src, element_type t, std::size_t n, fp8_format f,
                        std::uint8_t* q, float* scales) {
  const float inv = fp8_inverse_max(f);
  const std::size_t blocks = scale_count(n);
  for (std::size_t b = 0; b < blocks; ++b) {
    const std::size_t begin = b * k_block_elements;
    const std::size_t end = std::min(n, begin + k_block_elements);
    float amax = 0;
    bool nan = false;
    for (std::size_t i = begin; i < end; ++i) {
      const float v = load(src, t, i);
      nan = nan || std::isnan(v);
      amax = std::max(amax, std::fabs(v));
    }
    if (nan) amax = std::numeric_limits<float>::quiet_NaN();
    const float scale = block_scale(amax * inv);
    const float r = 1.0F / scale;
    for (std::size_t i = begin; i < begin + k_block_elements; ++i)
      q[i] = encode_fp8(i < end ? load(src, t, i) * r : 0.0F * r, f);
    scales[b] = scale;
  }
}

void decode_blocks_host(const std::uint8_t* q, const float* scales, std::size_t n, fp8_format f,
                        void* dst, element_type t) {
  for (std::size_t i = 0; i < n; ++i)
    store(dst, t, i, decode_fp8(q[i], f) * scales[i / k_block_elements]);
}

void decode_swiglu_host(const swiglu_args& a, std::size_t n, fp8_format f, element_type t) {
  decode_blocks_host(static_cast<const std::uint8_t*>(a.qg), static_cast<const float*>(a.sg), n, f,
                     a.g, t);
  decode_blocks_host(static_cast<const std::uint8_t*>(a.qu), static_cast<const float*>(a.su), n, f,
                     a.u, t);
  for (std::size_t i = 0; i < n; ++i) {
    const float g = load(a.g, t, i);
    store(a.act, t, i, g / (1.0F + std::exp(-g)));
    store(a.h, t, i, load(a.act, t, i) * load(a.u, t, i));
  }
}

}  // namespace vramkit::compress

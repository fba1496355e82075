// CUDA kernels of the fp8 block codec (include/vramkit/compress/fp8_block_codec.hpp): 16 lanes
// per block of 128 elements, 8 elements a lane (one 16-byte load for 16-bit types, two for
// float32; one 8-byte store of codes), the amax by shuffles within each half-warp, the scale
// applied as a multiply by its reciprocal. Each warp handles 8 consecutive blocks per round with
// all their loads issued before the first amax (4 KiB of float32 or 2 KiB of bf16 in flight per
// warp), and writes their 8 scales as one 32-byte run, so an encode into pinned host memory sends
// whole runs over the link. Bit-identical to encode_blocks_host.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cfloat>
#include <string>

#include "vramkit/compress/fp8_block_codec.hpp"
#include "vramkit/core/error.hpp"

namespace vramkit::compress {

namespace {

constexpr int k_threads = 256;  // 8 warps per thread block
constexpr int k_lane_elements = 8;
constexpr int k_block_lanes = static_cast<int>(k_block_elements) / k_lane_elements;  // 16
/// Rounds of two blocks (one per half-warp) a warp issues together: 8 blocks per warp.
constexpr int k_rounds = 4;
constexpr int k_warp_blocks = 2 * k_rounds;
constexpr unsigned k_full_mask = 0xFFFFFFFFU;

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    (void)cudaGetLastError();  // clear it: the next call must not see this failure
    throw cuda_error(static_cast<int>(e),
                     std::string("fp8 codec: ") + what + ": " + cudaGetErrorString(e));
  }
}

/// Eight elements of type T as raw words: one uint4 for 16-bit types, two for float32.
template <typename T>
struct raw8 {
  uint4 w[sizeof(T) / 2];
};

/// Two elements packed in one 32-bit word, widened.
template <typename T>
__device__ __forceinline__ float2 widen2(unsigned w);
template <>
__device__ __forceinline__ float2 widen2<__nv_bfloat16>(unsigned w) {
  return make_float2(__uint_as_float(w << 16), __uint_as_float(w & 0xFFFF0000U));
}
template <>
__device__ __forceinline__ float2 widen2<__half>(unsigned w) {
  __half2 h;
  memcpy(&h, &w, sizeof h);
  return __half22float2(h);
}

/// The 8 elements from index i (zeros past n): vector loads when whole and aligned.
template <typename T, bool Aligned>
__device__ __forceinline__ raw8<T> load8(const T* src, std::size_t i, std::size_t n) {
  raw8<T> r;
  if (Aligned && i + k_lane_elements <= n) {
    const auto* p = reinterpret_cast<const uint4*>(src + i);
#pragma unroll
    for (unsigned k = 0; k < sizeof(T) / 2; ++k) r.w[k] = __ldcs(p + k);
    return r;
  }
  T e[k_lane_elements];
#pragma unroll
  for (int j = 0; j < k_lane_elements; ++j) {
    if (i + j < n) {
      e[j] = src[i + j];
    } else {
      memset(&e[j], 0, sizeof(T));
    }
  }
  memcpy(&r, e, sizeof r);
  return r;
}

template <typename T>
__device__ __forceinline__ void widen8(const raw8<T>& r, float (&v)[k_lane_elements]) {
  if constexpr (sizeof(T) == 4) {
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      v[4 * k + 0] = __uint_as_float(r.w[k].x);
      v[4 * k + 1] = __uint_as_float(r.w[k].y);
      v[4 * k + 2] = __uint_as_float(r.w[k].z);
      v[4 * k + 3] = __uint_as_float(r.w[k].w);
    }
  } else {
    const unsigned w[4] = {r.w[0].x, r.w[0].y, r.w[0].z, r.w[0].w};
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const float2 f = widen2<T>(w[k]);
      v[2 * k] = f.x;
      v[2 * k + 1] = f.y;
    }
  }
}

/// Two floats to two fp8 codes (round to nearest even, saturating), low byte first.
__device__ __forceinline__ unsigned to_fp8x2(float a, float b, bool e5m2) {
  return __nv_cvt_float2_to_fp8x2(make_float2(a, b), __NV_SATFINITE, e5m2 ? __NV_E5M2 : __NV_E4M3);
}

/// Two fp8 codes (low byte first) to floats, exactly.
__device__ __forceinline__ float2 from_fp8x2(unsigned codes, bool e5m2) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(codes),
                                                   e5m2 ? __NV_E5M2 : __NV_E4M3);
  return __half22float2(__half2(h));
}

template <typename T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}
template <>
__device__ __forceinline__ __half from_float<__half>(float v) {
  return __float2half_rn(v);
}

/// Writes the 8 floats from index i as T (only those below n): vector stores when whole and
/// aligned.
template <typename T, bool Aligned>
__device__ __forceinline__ void store8(T* dst, std::size_t i, std::size_t n,
                                       const float (&v)[k_lane_elements]) {
  T e[k_lane_elements];
#pragma unroll
  for (int j = 0; j < k_lane_elements; ++j) e[j] = from_float<T>(v[j]);
  if (Aligned && i + k_lane_elements <= n) {
    raw8<T> r;
    memcpy(&r, e, sizeof r);
    auto* p = reinterpret_cast<uint4*>(dst + i);
#pragma unroll
    for (unsigned k = 0; k < sizeof(T) / 2; ++k) p[k] = r.w[k];
    return;
  }
#pragma unroll
  for (int j = 0; j < k_lane_elements; ++j)
    if (i + j < n) dst[i + j] = e[j];
}

/// Rounds of the grid-stride loop: warp w of W handles the groups of 8 blocks w, w + W, ...
struct warp_walk {
  std::size_t first, stride;
};

__device__ __forceinline__ warp_walk walk() {
  const std::size_t warps_per_cta = k_threads / 32;
  return {(static_cast<std::size_t>(blockIdx.x) * k_threads + threadIdx.x) / 32,
          static_cast<std::size_t>(gridDim.x) * warps_per_cta};
}

template <typename T, bool Aligned>
__global__ void __launch_bounds__(k_threads)
    encode_kernel(const T* __restrict__ src, std::size_t n, std::size_t blocks,
                  std::uint8_t* __restrict__ q, float* __restrict__ scales, bool e5m2,
                  float inv_max) {
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int half = lane / k_block_lanes;
  const int sub = lane % k_block_lanes;
  const unsigned half_mask = half == 0 ? 0x0000FFFFU : 0xFFFF0000U;
  const warp_walk w = walk();
  const std::size_t groups = (blocks + k_warp_blocks - 1) / k_warp_blocks;
  for (std::size_t g = w.first; g < groups; g += w.stride) {
    raw8<T> raw[k_rounds];
#pragma unroll
    for (int u = 0; u < k_rounds; ++u) {
      const std::size_t b = g * k_warp_blocks + 2 * u + half;
      // Past the last block: zeros, so that every lane takes part in the shuffles below.
      raw[u] =
          load8<T, Aligned>(src, b * k_block_elements + k_lane_elements * sub, b < blocks ? n : 0);
    }
    float my_scale[k_rounds];
#pragma unroll
    for (int u = 0; u < k_rounds; ++u) {
      const std::size_t b = g * k_warp_blocks + 2 * u + half;
      float v[k_lane_elements];
      widen8<T>(raw[u], v);
      float amax = 0.0F;
      bool nan = false;
#pragma unroll
      for (int j = 0; j < k_lane_elements; ++j) {
        nan = nan || v[j] != v[j];
        amax = fmaxf(amax, fabsf(v[j]));  // fmaxf drops NaN: tracked apart
      }
#pragma unroll
      for (int off = k_block_lanes / 2; off > 0; off /= 2)
        amax = fmaxf(amax, __shfl_xor_sync(k_full_mask, amax, off));
      if ((__ballot_sync(k_full_mask, nan) & half_mask) != 0) amax = __int_as_float(0x7FC00000);
      const float s = amax * inv_max;
      const float scale = s < FLT_MIN ? 1.0F : s;  // block_scale: NaN stays NaN
      const float r = __frcp_rn(scale);
      uint2 codes;
      codes.x = to_fp8x2(v[0] * r, v[1] * r, e5m2) | to_fp8x2(v[2] * r, v[3] * r, e5m2) << 16;
      codes.y = to_fp8x2(v[4] * r, v[5] * r, e5m2) | to_fp8x2(v[6] * r, v[7] * r, e5m2) << 16;
      if (b < blocks) {
        auto* out = reinterpret_cast<uint2*>(q + b * k_block_elements) + sub;
        if (Aligned) {
          __stcs(out, codes);
        } else {  // a 4-byte aligned payload
          auto* out4 = reinterpret_cast<unsigned*>(out);
          __stcs(out4, codes.x);
          __stcs(out4 + 1, codes.y);
        }
      }
      my_scale[u] = scale;
    }
    // Lane k < 8 writes the scale of the group's block k: round k / 2, half-warp k % 2.
    float mine = 0.0F;
#pragma unroll
    for (int u = 0; u < k_rounds; ++u) {
      const float got = __shfl_sync(k_full_mask, my_scale[u], (lane % 2) * k_block_lanes);
      if (lane / 2 == u) mine = got;
    }
    const std::size_t b = g * k_warp_blocks + lane;
    if (lane < k_warp_blocks && b < blocks) scales[b] = mine;
  }
}

/// The 8 codes of one lane (zeros past the last block).
__device__ __forceinline__ uint2 load_codes(const std::uint8_t* q, std::size_t b, int sub,
                                            bool aligned) {
  const auto* in = reinterpret_cast<const uint2*>(q + b * k_block_elements) + sub;
  if (aligned) return *in;
  const auto* in4 = reinterpret_cast<const unsigned*>(in);
  return make_uint2(in4[0], in4[1]);
}

/// The 8 decoded values of one lane's codes, times the block's scale, rounded to T and widened
/// back (what a decode to T and a read of it give).
template <typename T>
__device__ __forceinline__ void decode8(uint2 codes, float scale, bool e5m2,
                                        float (&v)[k_lane_elements]) {
  const unsigned c[4] = {codes.x & 0xFFFFU, codes.x >> 16, codes.y & 0xFFFFU, codes.y >> 16};
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const float2 f = from_fp8x2(c[k], e5m2);
    v[2 * k] = static_cast<float>(from_float<T>(f.x * scale));
    v[2 * k + 1] = static_cast<float>(from_float<T>(f.y * scale));
  }
}

/// A lane's place in the decode kernels' walk: its half-warp's block within each round, its
/// 8 elements within the block, and the groups of 8 blocks its warp handles.
struct lane_walk {
  int half, sub;
  std::size_t first, stride, groups;
};

__device__ __forceinline__ lane_walk lanes(std::size_t blocks) {
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const warp_walk w = walk();
  return {lane / k_block_lanes, lane % k_block_lanes, w.first, w.stride,
          (blocks + k_warp_blocks - 1) / k_warp_blocks};
}

template <typename T, bool Aligned>
__global__ void __launch_bounds__(k_threads)
    decode_kernel(const std::uint8_t* __restrict__ q, const float* __restrict__ scales,
                  std::size_t n, std::size_t blocks, T* __restrict__ dst, bool e5m2) {
  const lane_walk l = lanes(blocks);
  for (std::size_t g = l.first; g < l.groups; g += l.stride) {
    uint2 codes[k_rounds];
    float scale[k_rounds];
#pragma unroll
    for (int u = 0; u < k_rounds; ++u) {
      const std::size_t b = g * k_warp_blocks + 2 * u + l.half;
      codes[u] = make_uint2(0, 0);
      scale[u] = 0.0F;
      if (b < blocks) {
        codes[u] = load_codes(q, b, l.sub, Aligned);
        scale[u] = scales[b];
      }
    }
#pragma unroll
    for (int u = 0; u < k_rounds; ++u) {
      const std::size_t b = g * k_warp_blocks + 2 * u + l.half;
      if (b >= blocks) continue;
      float v[k_lane_elements];
      decode8<T>(codes[u], scale[u], e5m2, v);
      store8<T, Aligned>(dst, b * k_block_elements + k_lane_elements * l.sub, n, v);
    }
  }
}

/// The gated MLP's saved tensors restored in one pass: gate g and up u decoded, and silu(g),
/// silu(g) * u computed from them as PyTorch's silu and mul kernels do (in float, rounded to T
/// once each; silu(x) = x / (1 + exp(-x))).
template <typename T, bool Aligned>
__global__ void __launch_bounds__(k_threads)
    swiglu_kernel(const std::uint8_t* __restrict__ qg, const float* __restrict__ sg,
                  const std::uint8_t* __restrict__ qu, const float* __restrict__ su, std::size_t n,
                  std::size_t blocks, T* __restrict__ g, T* __restrict__ u, T* __restrict__ act,
                  T* __restrict__ h, bool e5m2) {
  const lane_walk l = lanes(blocks);
  const int half = l.half;
  const int sub = l.sub;
  for (std::size_t grp = l.first; grp < l.groups; grp += l.stride) {
    uint2 cg[k_rounds];
    uint2 cu[k_rounds];
    float scg[k_rounds];
    float scu[k_rounds];
#pragma unroll
    for (int r = 0; r < k_rounds; ++r) {
      const std::size_t b = grp * k_warp_blocks + 2 * r + half;
      cg[r] = cu[r] = make_uint2(0, 0);
      scg[r] = scu[r] = 0.0F;
      if (b < blocks) {
        cg[r] = load_codes(qg, b, sub, Aligned);
        cu[r] = load_codes(qu, b, sub, Aligned);
        scg[r] = sg[b];
        scu[r] = su[b];
      }
    }
#pragma unroll
    for (int r = 0; r < k_rounds; ++r) {
      const std::size_t b = grp * k_warp_blocks + 2 * r + half;
      if (b >= blocks) continue;
      float vg[k_lane_elements];
      float vu[k_lane_elements];
      float va[k_lane_elements];
      float vh[k_lane_elements];
      decode8<T>(cg[r], scg[r], e5m2, vg);
      decode8<T>(cu[r], scu[r], e5m2, vu);
#pragma unroll
      for (int j = 0; j < k_lane_elements; ++j) {
        va[j] = static_cast<float>(from_float<T>(vg[j] / (1.0F + expf(-vg[j]))));
        vh[j] = va[j] * vu[j];
      }
      const std::size_t i = b * k_block_elements + k_lane_elements * sub;
      store8<T, Aligned>(g, i, n, vg);
      store8<T, Aligned>(u, i, n, vu);
      store8<T, Aligned>(act, i, n, va);
      store8<T, Aligned>(h, i, n, vh);
    }
  }
}

/// The device address of p: itself for device memory, the mapping of pinned host memory;
/// pageable host memory cannot be reached by a kernel.
void* device_address(const void* p, const char* what) {
  cudaPointerAttributes a{};
  check(cudaPointerGetAttributes(&a, p), what);
  if (a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged)
    return const_cast<void*>(p);
  if (a.type == cudaMemoryTypeHost && a.devicePointer != nullptr) return a.devicePointer;
  if (a.type == cudaMemoryTypeHost)
    throw invalid_input(std::string("fp8 codec: ") + what +
                        " is pinned host memory without a device mapping");
  throw invalid_input(std::string("fp8 codec: ") + what +
                      " is pageable host memory: a kernel can reach only device or pinned memory");
}

/// Thread blocks of `kernel` that fill every SM once (its occupancy times the SM count), found
/// once per kernel: the grid-stride loops then run as one wave, with no half-empty second wave.
template <auto Kernel>
std::size_t one_wave() {
  static std::atomic<int> cached{0};
  int g = cached.load(std::memory_order_relaxed);
  if (g == 0) {
    int dev = 0;
    check(cudaGetDevice(&dev), "cudaGetDevice");
    int sms = 0;
    check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev),
          "cudaDeviceGetAttribute");
    int per_sm = 0;
    check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, Kernel, k_threads, 0),
          "cudaOccupancyMaxActiveBlocksPerMultiprocessor");
    g = sms * (per_sm > 0 ? per_sm : 1);
    cached.store(g, std::memory_order_relaxed);
  }
  return static_cast<std::size_t>(g);
}

/// CTAs for `work_items` CTAs' worth of work: at most one wave, at most `max_ctas` when > 0.
template <auto Kernel>
unsigned grid_for(std::size_t work_items, int max_ctas) {
  const std::size_t cap = max_ctas > 0 ? static_cast<std::size_t>(max_ctas) : one_wave<Kernel>();
  const std::size_t g = work_items < cap ? work_items : cap;
  return static_cast<unsigned>(g > 0 ? g : 1);
}

bool aligned(const void* p, std::size_t to) {
  return reinterpret_cast<std::uintptr_t>(p) % to == 0;
}

template <typename T>
void launch_encode(const void* src, std::size_t n, fp8_format f, void* q, void* scales,
                   cudaStream_t s, int max_ctas) {
  const std::size_t blocks = scale_count(n);
  const std::size_t warps = (blocks + k_warp_blocks - 1) / k_warp_blocks;
  const std::size_t ctas = (warps + k_threads / 32 - 1) / (k_threads / 32);
  const auto* in = static_cast<const T*>(src);
  auto* out = static_cast<std::uint8_t*>(q);
  auto* sc = static_cast<float*>(scales);
  const bool e5m2 = f == fp8_format::e5m2;
  const float inv = fp8_inverse_max(f);
  if (aligned(src, 16) && aligned(q, 8)) {
    constexpr auto k = encode_kernel<T, true>;
    k<<<grid_for<k>(ctas, max_ctas), k_threads, 0, s>>>(in, n, blocks, out, sc, e5m2, inv);
  } else {
    constexpr auto k = encode_kernel<T, false>;
    k<<<grid_for<k>(ctas, max_ctas), k_threads, 0, s>>>(in, n, blocks, out, sc, e5m2, inv);
  }
  check(cudaGetLastError(), "encode kernel launch");
}

template <typename T>
void launch_decode(const void* q, const void* scales, std::size_t n, fp8_format f, void* dst,
                   cudaStream_t s, int max_ctas) {
  const std::size_t blocks = scale_count(n);
  const std::size_t warps = (blocks + k_warp_blocks - 1) / k_warp_blocks;
  const std::size_t ctas = (warps + k_threads / 32 - 1) / (k_threads / 32);
  const auto* in = static_cast<const std::uint8_t*>(q);
  const auto* sc = static_cast<const float*>(scales);
  auto* out = static_cast<T*>(dst);
  const bool e5m2 = f == fp8_format::e5m2;
  if (aligned(dst, 16) && aligned(q, 8)) {
    constexpr auto k = decode_kernel<T, true>;
    k<<<grid_for<k>(ctas, max_ctas), k_threads, 0, s>>>(in, sc, n, blocks, out, e5m2);
  } else {
    constexpr auto k = decode_kernel<T, false>;
    k<<<grid_for<k>(ctas, max_ctas), k_threads, 0, s>>>(in, sc, n, blocks, out, e5m2);
  }
  check(cudaGetLastError(), "decode kernel launch");
}

template <typename T>
void launch_swiglu(const swiglu_args& a, std::size_t n, fp8_format f, cudaStream_t s,
                   int max_ctas) {
  const std::size_t blocks = scale_count(n);
  const std::size_t warps = (blocks + k_warp_blocks - 1) / k_warp_blocks;
  const std::size_t ctas = (warps + k_threads / 32 - 1) / (k_threads / 32);
  const auto* qg = static_cast<const std::uint8_t*>(a.qg);
  const auto* qu = static_cast<const std::uint8_t*>(a.qu);
  const auto* sg = static_cast<const float*>(a.sg);
  const auto* su = static_cast<const float*>(a.su);
  auto* g = static_cast<T*>(a.g);
  auto* u = static_cast<T*>(a.u);
  auto* act = static_cast<T*>(a.act);
  auto* h = static_cast<T*>(a.h);
  const bool e5m2 = f == fp8_format::e5m2;
  const bool vec = aligned(a.qg, 8) && aligned(a.qu, 8) && aligned(a.g, 16) && aligned(a.u, 16) &&
                   aligned(a.act, 16) && aligned(a.h, 16);
  if (vec) {
    constexpr auto k = swiglu_kernel<T, true>;
    k<<<grid_for<k>(ctas, max_ctas), k_threads, 0, s>>>(qg, sg, qu, su, n, blocks, g, u, act, h,
                                                        e5m2);
  } else {
    constexpr auto k = swiglu_kernel<T, false>;
    k<<<grid_for<k>(ctas, max_ctas), k_threads, 0, s>>>(qg, sg, qu, su, n, blocks, g, u, act, h,
                                                        e5m2);
  }
  check(cudaGetLastError(), "swiglu decode kernel launch");
}

void check_payload(const void* q) {
  if (reinterpret_cast<std::uintptr_t>(q) % 4 != 0)
    throw invalid_input("fp8 codec: the payload pointer must be 4-byte aligned");
}

}  // namespace

bool have_cuda_kernels() { return true; }

void encode_blocks_cuda(const void* src, element_type t, std::size_t n, fp8_format f, void* q,
                        void* scales, void* stream, int max_ctas) {
  if (n == 0) return;
  check_payload(q);
  const void* in = device_address(src, "the source");
  void* out = device_address(q, "the payload");
  void* sc = device_address(scales, "the scales");
  auto* s = static_cast<cudaStream_t>(stream);
  switch (t) {
    case element_type::float32:
      return launch_encode<float>(in, n, f, out, sc, s, max_ctas);
    case element_type::bfloat16:
      return launch_encode<__nv_bfloat16>(in, n, f, out, sc, s, max_ctas);
    case element_type::float16:
      return launch_encode<__half>(in, n, f, out, sc, s, max_ctas);
  }
}

void decode_blocks_cuda(const void* q, const void* scales, std::size_t n, fp8_format f, void* dst,
                        element_type t, void* stream, int max_ctas) {
  if (n == 0) return;
  check_payload(q);
  const void* in = device_address(q, "the payload");
  const void* sc = device_address(scales, "the scales");
  void* out = device_address(dst, "the destination");
  auto* s = static_cast<cudaStream_t>(stream);
  switch (t) {
    case element_type::float32:
      return launch_decode<float>(in, sc, n, f, out, s, max_ctas);
    case element_type::bfloat16:
      return launch_decode<__nv_bfloat16>(in, sc, n, f, out, s, max_ctas);
    case element_type::float16:
      return launch_decode<__half>(in, sc, n, f, out, s, max_ctas);
  }
}

void decode_swiglu_cuda(const swiglu_args& a, std::size_t n, fp8_format f, element_type t,
                        void* stream, int max_ctas) {
  if (n == 0) return;
  check_payload(a.qg);
  check_payload(a.qu);
  swiglu_args d{};
  d.qg = device_address(a.qg, "the gate's payload");
  d.sg = device_address(a.sg, "the gate's scales");
  d.qu = device_address(a.qu, "the up projection's payload");
  d.su = device_address(a.su, "the up projection's scales");
  d.g = device_address(a.g, "the gate's destination");
  d.u = device_address(a.u, "the up projection's destination");
  d.act = device_address(a.act, "the activation's destination");
  d.h = device_address(a.h, "the product's destination");
  auto* s = static_cast<cudaStream_t>(stream);
  switch (t) {
    case element_type::float32:
      return launch_swiglu<float>(d, n, f, s, max_ctas);
    case element_type::bfloat16:
      return launch_swiglu<__nv_bfloat16>(d, n, f, s, max_ctas);
    case element_type::float16:
      return launch_swiglu<__half>(d, n, f, s, max_ctas);
  }
}

}  // namespace vramkit::compress

// CUDA kernels of the fp8 block codec (include/vramkit/compress/fp8_block_codec.hpp): one warp
// per block of 128 elements (4 per lane), the amax by warp shuffles, the scales of 32 blocks
// gathered in shared memory and written as one 128-byte line, so that an encode into pinned host
// memory sends full lines over the link. Bit-identical to encode_blocks_host for finite blocks.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <string>

#include "vramkit/compress/fp8_block_codec.hpp"
#include "vramkit/core/error.hpp"

namespace vramkit::compress {

namespace {

constexpr int k_threads = 256;  // 8 warps per thread block
constexpr int k_tile_blocks = 32;
/// Blocks of 128 elements one warp handles per tile: all of their loads are issued before the
/// first amax, so each warp keeps four blocks' reads in flight (one at a time reached about 2.2
/// of the H200's 4.8 TB/s).
constexpr int k_warp_blocks = k_tile_blocks / (k_threads / 32);
/// Blocks one warp decodes per round, their loads issued together for the same reason.
constexpr int k_decode_unroll = 4;
constexpr unsigned k_full_mask = 0xFFFFFFFFU;

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    (void)cudaGetLastError();  // clear it: the next call must not see this failure
    throw cuda_error(static_cast<int>(e),
                     std::string("fp8 codec: ") + what + ": " + cudaGetErrorString(e));
  }
}

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }

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

/// Four elements from index i (zeros past n); one vector load when the block is whole and
/// the pointer aligned.
template <typename T, bool Aligned>
__device__ __forceinline__ void load4(const T* src, std::size_t i, std::size_t n, float (&v)[4]) {
  if (Aligned && i + 4 <= n) {
    struct alignas(4 * sizeof(T)) quad {
      T x[4];
    };
    const quad q = *reinterpret_cast<const quad*>(src + i);
#pragma unroll
    for (int j = 0; j < 4; ++j) v[j] = to_float(q.x[j]);
    return;
  }
#pragma unroll
  for (int j = 0; j < 4; ++j) v[j] = i + j < n ? to_float(src[i + j]) : 0.0F;
}

template <typename T, bool Aligned>
__device__ __forceinline__ void store4(T* dst, std::size_t i, std::size_t n, const float (&v)[4]) {
  if (Aligned && i + 4 <= n) {
    struct alignas(4 * sizeof(T)) quad {
      T x[4];
    };
    quad q;
#pragma unroll
    for (int j = 0; j < 4; ++j) q.x[j] = from_float<T>(v[j]);
    *reinterpret_cast<quad*>(dst + i) = q;
    return;
  }
#pragma unroll
  for (int j = 0; j < 4; ++j)
    if (i + j < n) dst[i + j] = from_float<T>(v[j]);
}

__device__ __forceinline__ std::uint32_t to_fp8(float x, bool e5m2) {
  return e5m2 ? __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E5M2)
              : __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3);
}

__device__ __forceinline__ float from_fp8(std::uint32_t code, bool e5m2) {
  const __half_raw h =
      __nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(code), e5m2 ? __NV_E5M2 : __NV_E4M3);
  return __half2float(__half(h));
}

template <typename T, bool Aligned>
__global__ void __launch_bounds__(k_threads)
    encode_kernel(const T* __restrict__ src, std::size_t n, std::size_t blocks,
                  std::uint32_t* __restrict__ q, float* __restrict__ scales, bool e5m2,
                  float inv_max) {
  __shared__ float tile_scales[k_tile_blocks];
  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const std::size_t tiles = (blocks + k_tile_blocks - 1) / k_tile_blocks;
  for (std::size_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    float vs[k_warp_blocks][4];
#pragma unroll
    for (int u = 0; u < k_warp_blocks; ++u) {
      const std::size_t b = tile * k_tile_blocks + warp + u * (k_threads / 32);
      if (b < blocks) load4<T, Aligned>(src, b * k_block_elements + 4 * lane, n, vs[u]);
    }
#pragma unroll
    for (int u = 0; u < k_warp_blocks; ++u) {
      const int k = warp + u * (k_threads / 32);
      const std::size_t b = tile * k_tile_blocks + k;
      if (b >= blocks) break;  // the same for the whole warp
      const float(&v)[4] = vs[u];
      float amax = 0.0F;
      bool nan = false;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        nan = nan || v[j] != v[j];
        amax = fmaxf(amax, fabsf(v[j]));  // fmaxf drops NaN: tracked apart
      }
#pragma unroll
      for (int off = 16; off > 0; off /= 2)
        amax = fmaxf(amax, __shfl_xor_sync(k_full_mask, amax, off));
      if (__any_sync(k_full_mask, nan)) amax = __int_as_float(0x7FC00000);
      const float s = amax * inv_max;
      const float scale = s == 0.0F ? 1.0F : s;
      std::uint32_t packed = 0;
#pragma unroll
      for (int j = 0; j < 4; ++j) packed |= to_fp8(__fdiv_rn(v[j], scale), e5m2) << (8 * j);
      q[b * 32 + lane] = packed;
      if (lane == 0) tile_scales[k] = scale;
    }
    __syncthreads();
    if (warp == 0) {
      const std::size_t b = tile * k_tile_blocks + lane;
      if (b < blocks) scales[b] = tile_scales[lane];
    }
    __syncthreads();
  }
}

template <typename T, bool Aligned>
__global__ void __launch_bounds__(k_threads)
    decode_kernel(const std::uint32_t* __restrict__ q, const float* __restrict__ scales,
                  std::size_t n, std::size_t blocks, T* __restrict__ dst, bool e5m2) {
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const std::size_t warps = static_cast<std::size_t>(gridDim.x) * (k_threads / 32);
  const std::size_t first = (static_cast<std::size_t>(blockIdx.x) * k_threads + threadIdx.x) / 32;
  for (std::size_t b0 = first; b0 < blocks; b0 += warps * k_decode_unroll) {
    float scale[k_decode_unroll];
    std::uint32_t packed[k_decode_unroll];
#pragma unroll
    for (int u = 0; u < k_decode_unroll; ++u) {
      const std::size_t b = b0 + u * warps;
      if (b < blocks) {
        scale[u] = scales[b];
        packed[u] = q[b * 32 + lane];
      }
    }
#pragma unroll
    for (int u = 0; u < k_decode_unroll; ++u) {
      const std::size_t b = b0 + u * warps;
      if (b >= blocks) break;  // the same for the whole warp
      float v[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) v[j] = from_fp8((packed[u] >> (8 * j)) & 0xFFU, e5m2) * scale[u];
      store4<T, Aligned>(dst, b * k_block_elements + 4 * lane, n, v);
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

int sm_count() {
  int dev = 0;
  check(cudaGetDevice(&dev), "cudaGetDevice");
  int sms = 0;
  check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev),
        "cudaDeviceGetAttribute");
  return sms;
}

unsigned grid_for(std::size_t work_items, int max_ctas) {
  const std::size_t cap =
      max_ctas > 0 ? static_cast<std::size_t>(max_ctas) : static_cast<std::size_t>(8 * sm_count());
  const std::size_t g = work_items < cap ? work_items : cap;
  return static_cast<unsigned>(g > 0 ? g : 1);
}

template <typename T>
void launch_encode(const void* src, std::size_t n, fp8_format f, void* q, void* scales,
                   cudaStream_t s, int max_ctas) {
  const std::size_t blocks = scale_count(n);
  const unsigned grid = grid_for((blocks + k_tile_blocks - 1) / k_tile_blocks, max_ctas);
  const auto* in = static_cast<const T*>(src);
  auto* out = static_cast<std::uint32_t*>(q);
  auto* sc = static_cast<float*>(scales);
  const bool e5m2 = f == fp8_format::e5m2;
  const float inv = fp8_inverse_max(f);
  if (reinterpret_cast<std::uintptr_t>(src) % (4 * sizeof(T)) == 0)
    encode_kernel<T, true><<<grid, k_threads, 0, s>>>(in, n, blocks, out, sc, e5m2, inv);
  else
    encode_kernel<T, false><<<grid, k_threads, 0, s>>>(in, n, blocks, out, sc, e5m2, inv);
  check(cudaGetLastError(), "encode kernel launch");
}

template <typename T>
void launch_decode(const void* q, const void* scales, std::size_t n, fp8_format f, void* dst,
                   cudaStream_t s) {
  const std::size_t blocks = scale_count(n);
  const unsigned grid = grid_for((blocks + k_threads / 32 - 1) / (k_threads / 32), 0);
  const auto* in = static_cast<const std::uint32_t*>(q);
  const auto* sc = static_cast<const float*>(scales);
  auto* out = static_cast<T*>(dst);
  const bool e5m2 = f == fp8_format::e5m2;
  if (reinterpret_cast<std::uintptr_t>(dst) % (4 * sizeof(T)) == 0)
    decode_kernel<T, true><<<grid, k_threads, 0, s>>>(in, sc, n, blocks, out, e5m2);
  else
    decode_kernel<T, false><<<grid, k_threads, 0, s>>>(in, sc, n, blocks, out, e5m2);
  check(cudaGetLastError(), "decode kernel launch");
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
                        element_type t, void* stream) {
  if (n == 0) return;
  check_payload(q);
  const void* in = device_address(q, "the payload");
  const void* sc = device_address(scales, "the scales");
  void* out = device_address(dst, "the destination");
  auto* s = static_cast<cudaStream_t>(stream);
  switch (t) {
    case element_type::float32:
      return launch_decode<float>(in, sc, n, f, out, s);
    case element_type::bfloat16:
      return launch_decode<__nv_bfloat16>(in, sc, n, f, out, s);
    case element_type::float16:
      return launch_decode<__half>(in, sc, n, f, out, s);
  }
}

}  // namespace vramkit::compress

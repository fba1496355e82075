// Kernels of the tier benchmark: a reduction, an element-wise transform and a "touch" kernel that
// stands in for compute on a resident buffer.
#include "tier_kernels.hpp"

#include <cuda_runtime.h>

#include <algorithm>

#include "common/cuda_check.hpp"

namespace vramkit::bench {
namespace {

cudaStream_t to_cuda(stream_view s) { return static_cast<cudaStream_t>(s.handle); }

constexpr int block_threads = 256;

int grid_for(std::size_t n) {
  int device = 0;
  int sms = 0;
  VRAMKIT_CUDA_TRY(cudaGetDevice(&device));
  VRAMKIT_CUDA_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  const std::size_t wanted = (n + block_threads - 1) / block_threads;
  return static_cast<int>(
      std::max<std::size_t>(1, std::min<std::size_t>(wanted, std::size_t(sms) * 8)));
}

__global__ void sum_kernel(const uint4* __restrict__ vec, std::size_t n_vec,
                           const std::uint32_t* __restrict__ tail, std::size_t n_tail,
                           unsigned long long* sum) {
  unsigned long long local = 0;
  const std::size_t stride = std::size_t(gridDim.x) * blockDim.x;
  for (std::size_t i = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n_vec; i += stride) {
    const uint4 v = vec[i];
    local += std::uint64_t(v.x) + v.y + v.z + v.w;
  }
  if (blockIdx.x == 0) {
    for (std::size_t i = threadIdx.x; i < n_tail; i += blockDim.x) local += tail[i];
  }
  for (int offset = 16; offset > 0; offset /= 2)
    local += __shfl_down_sync(0xffffffffu, local, offset);
  if ((threadIdx.x & 31) == 0) atomicAdd(sum, local);
}

__global__ void transform_kernel(uint4* __restrict__ vec, std::size_t n_vec,
                                 std::uint32_t* __restrict__ tail, std::size_t n_tail) {
  const std::size_t stride = std::size_t(gridDim.x) * blockDim.x;
  for (std::size_t i = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n_vec; i += stride) {
    uint4 v = vec[i];
    v.x = transform_u32(v.x);
    v.y = transform_u32(v.y);
    v.z = transform_u32(v.z);
    v.w = transform_u32(v.w);
    vec[i] = v;
  }
  if (blockIdx.x == 0) {
    for (std::size_t i = threadIdx.x; i < n_tail; i += blockDim.x) tail[i] = transform_u32(tail[i]);
  }
}

__global__ void touch_kernel(std::uint32_t* data, std::size_t n, std::uint32_t add,
                             unsigned long long spin_ns) {
  const std::size_t stride = std::size_t(gridDim.x) * blockDim.x;
  if (add != 0) {
    for (std::size_t i = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
      data[i] += add;
    }
  }
  if (spin_ns > 0 && threadIdx.x == 0) {
    const unsigned long long start = clock64();
    // clock64 counts SM cycles; ~1.5-2 GHz on an H200, so 2 cycles per ns is close enough for a
    // stand-in workload (its exact length does not matter, only that it is the same with and
    // without prefetch).
    while (clock64() - start < spin_ns * 2) {
    }
  }
}

}  // namespace

void launch_sum_u32(const std::uint32_t* data, std::size_t n, unsigned long long* sum,
                    stream_view stream) {
  if (n == 0) return;
  // Chunks start at 256-byte aligned device memory, so the vector part is aligned.
  const std::size_t n_vec = n / 4;
  sum_kernel<<<grid_for(n_vec), block_threads, 0, to_cuda(stream)>>>(
      reinterpret_cast<const uint4*>(data), n_vec, data + n_vec * 4, n - n_vec * 4, sum);
  VRAMKIT_CUDA_TRY(cudaGetLastError());
}

void launch_transform_u32(std::uint32_t* data, std::size_t n, stream_view stream) {
  if (n == 0) return;
  const std::size_t n_vec = n / 4;
  transform_kernel<<<grid_for(n_vec), block_threads, 0, to_cuda(stream)>>>(
      reinterpret_cast<uint4*>(data), n_vec, data + n_vec * 4, n - n_vec * 4);
  VRAMKIT_CUDA_TRY(cudaGetLastError());
}

void launch_touch_u32(std::uint32_t* data, std::size_t n, std::uint32_t add, std::uint32_t spin_us,
                      stream_view stream) {
  touch_kernel<<<grid_for(n), block_threads, 0, to_cuda(stream)>>>(
      data, n, add, static_cast<unsigned long long>(spin_us) * 1000ull);
  VRAMKIT_CUDA_TRY(cudaGetLastError());
}

}  // namespace vramkit::bench

// Small kernels for the tier GPU tests: the device-side user work on tiered buffers and chunks.
#include "tier_gpu_kernels.hpp"

#include <cuda_runtime.h>

#include "common/cuda_check.hpp"

namespace vramkit::testing {
namespace {

cudaStream_t to_cuda(stream_view s) { return static_cast<cudaStream_t>(s.handle); }
unsigned blocks_for(std::size_t n) {
  return static_cast<unsigned>((n + 255) / 256 > 4096 ? 4096 : (n + 255) / 256);
}

__global__ void add_kernel(std::uint32_t* d, std::size_t n, std::uint32_t add) {
  for (std::size_t i = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x)
    d[i] += add;
}
__global__ void set_kernel(std::uint32_t* d, std::size_t n, std::uint32_t v) {
  for (std::size_t i = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x)
    d[i] = v;
}
__global__ void mix_kernel(std::uint32_t* d, std::size_t n, std::size_t first) {
  for (std::size_t i = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x) {
    d[i] = d[i] * 5u + static_cast<std::uint32_t>(first + i);
  }
}

}  // namespace

void launch_add_u32(std::uint32_t* data, std::size_t n, std::uint32_t add, stream_view stream) {
  if (n == 0) return;
  add_kernel<<<blocks_for(n), 256, 0, to_cuda(stream)>>>(data, n, add);
  VRAMKIT_CUDA_TRY(cudaGetLastError());
}
void launch_set_u32(std::uint32_t* data, std::size_t n, std::uint32_t value, stream_view stream) {
  if (n == 0) return;
  set_kernel<<<blocks_for(n), 256, 0, to_cuda(stream)>>>(data, n, value);
  VRAMKIT_CUDA_TRY(cudaGetLastError());
}
void launch_mix_u32(std::uint32_t* data, std::size_t n, std::size_t first, stream_view stream) {
  if (n == 0) return;
  mix_kernel<<<blocks_for(n), 256, 0, to_cuda(stream)>>>(data, n, first);
  VRAMKIT_CUDA_TRY(cudaGetLastError());
}

}  // namespace vramkit::testing

// Kernels that write and check pool blocks on the GPU, for the GPU pool tests.
#include <cuda_runtime.h>

#include "block_kernels.hpp"

namespace vramkit::testing {
namespace {

__global__ void fill_words(std::uint32_t* p, std::size_t words, std::uint32_t value) {
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < words;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    p[i] = value;
  }
}

__global__ void count_mismatches(const std::uint32_t* p, std::size_t words, std::uint32_t value,
                                 unsigned long long* out) {
  unsigned long long bad = 0;
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < words;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    bad += p[i] != value;
  }
  if (bad != 0) atomicAdd(out, bad);
}

__global__ void spin_then_fill(std::uint32_t* p, std::size_t words, std::uint32_t value,
                               long long cycles) {
  if (threadIdx.x == 0) {
    const long long start = clock64();
    while (clock64() - start < cycles) {
    }
  }
  __syncthreads();
  for (std::size_t i = threadIdx.x; i < words; i += blockDim.x) p[i] = value;
}

unsigned grid_for(std::size_t words) {
  const std::size_t blocks = (words + 255) / 256;
  return static_cast<unsigned>(blocks < 1024 ? (blocks == 0 ? 1 : blocks) : 1024);
}

}  // namespace

void launch_fill_words(void* p, std::size_t bytes, std::uint32_t value, void* stream) {
  const std::size_t words = bytes / 4;
  fill_words<<<grid_for(words), 256, 0, static_cast<cudaStream_t>(stream)>>>(
      static_cast<std::uint32_t*>(p), words, value);
}

void launch_count_mismatches(const void* p, std::size_t bytes, std::uint32_t value,
                             unsigned long long* mismatches, void* stream) {
  const std::size_t words = bytes / 4;
  count_mismatches<<<grid_for(words), 256, 0, static_cast<cudaStream_t>(stream)>>>(
      static_cast<const std::uint32_t*>(p), words, value, mismatches);
}

void launch_spin_then_fill(void* p, std::size_t bytes, std::uint32_t value, long long cycles,
                           void* stream) {
  spin_then_fill<<<1, 256, 0, static_cast<cudaStream_t>(stream)>>>(static_cast<std::uint32_t*>(p),
                                                                   bytes / 4, value, cycles);
}

int last_launch_error() { return static_cast<int>(cudaGetLastError()); }

}  // namespace vramkit::testing

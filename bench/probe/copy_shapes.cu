// Device-to-device copy kernels of other shapes than the probe tries, beside cudaMemcpyAsync D2D,
// measured interleaved on the same buffers: grid-stride loops, one-pass grids (one tile per
// block, the hardware scheduler balancing the blocks), work stealing (blocks take tiles from a
// ticket counter, which evens out the last wave), exact waves (contiguous equal ranges, a
// block count that fills every SM evenly) and one pass with one block per SM at a time (a shared-
// memory reservation caps the occupancy, and with it the bytes in flight per SM). It records which
// shapes reach cudaMemcpy and which stop short. Every variant is verified word by word before it
// is timed.
//
// Not part of the CMake build (it is a study, not a tool): scripts/gpu-check.d/20-probe.sh
// compiles it with nvcc (-Iinclude -Isrc, with src/core/sample_stats.cpp) and runs it.
//   copy_shapes [bytes (default 2 GiB)] [samples (default 9)]
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "probe/cuda/copy_group.cuh"
#include "vramkit/core/sample_stats.hpp"

#define CHECK(call)                                                                        \
  do {                                                                                     \
    cudaError_t e_ = (call);                                                               \
    if (e_ != cudaSuccess) {                                                               \
      std::fprintf(stderr, "copy_shapes: %s failed: %s\n", #call, cudaGetErrorString(e_)); \
      std::exit(1);                                                                        \
    }                                                                                      \
  } while (0)

namespace {

// Hint: the probe's cache hints (probe/cuda/copy_group.cuh): 0 read-only-path loads and plain
// stores, 1 streaming (evict-first) loads and stores. The copy step is the probe's copy_group.
using vramkit::probe::detail::copy_group;

template <int U, int Hint>
__global__ void stride_copy(uint4* __restrict__ dst, const uint4* __restrict__ src, std::size_t n) {
  const std::size_t T = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  for (; i + (U - 1) * T < n; i += U * T) copy_group<Hint, U>(dst, src, i, T);
  for (; i < n; i += T) dst[i] = src[i];
}

// A tile is blockDim.x * U elements starting at `base`.
template <int U, int Hint>
__device__ __forceinline__ void copy_tile(uint4* dst, const uint4* src, std::size_t base,
                                          std::size_t n) {
  const std::size_t T = blockDim.x;
  if (base + T * U <= n) {
    copy_group<Hint, U>(dst, src, base + threadIdx.x, T);
  } else {
    for (std::size_t i = base + threadIdx.x; i < n; i += T) dst[i] = src[i];
  }
}

template <int U, int Hint>
__global__ void onepass_copy(uint4* __restrict__ dst, const uint4* __restrict__ src,
                             std::size_t n) {
  copy_tile<U, Hint>(dst, src, blockIdx.x * static_cast<std::size_t>(blockDim.x) * U, n);
}

// Each launch draws n_tiles + gridDim.x tickets (every block draws one past the end), so the host
// advances `base` by that much per launch and the counter never needs resetting.
template <int U, int Hint>
__global__ void steal_copy(uint4* __restrict__ dst, const uint4* __restrict__ src, std::size_t n,
                           unsigned long long* counter, unsigned long long base) {
  __shared__ unsigned long long ticket;
  const std::size_t tile = static_cast<std::size_t>(blockDim.x) * U;
  const std::size_t n_tiles = (n + tile - 1) / tile;
  while (true) {
    if (threadIdx.x == 0) ticket = atomicAdd(counter, 1ull) - base;
    __syncthreads();
    const unsigned long long t = ticket;
    __syncthreads();
    if (t >= n_tiles) return;
    copy_tile<U, Hint>(dst, src, t * tile, n);
  }
}

template <int U, int Hint>
__global__ void waves_copy(uint4* __restrict__ dst, const uint4* __restrict__ src, std::size_t n) {
  const std::size_t B = gridDim.x, T = blockDim.x;
  const std::size_t end = (blockIdx.x + 1) * n / B;
  std::size_t i = blockIdx.x * n / B + threadIdx.x;
  for (; i + (U - 1) * T < end; i += U * T) copy_group<Hint, U>(dst, src, i, T);
  for (; i < end; i += T) dst[i] = src[i];
}

__global__ void fill(std::uint32_t* p, std::size_t n, std::uint32_t seed) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x)
    p[i] = static_cast<std::uint32_t>(i * 2654435761u) ^ seed;
}

__global__ void count_mismatches(const std::uint32_t* a, const std::uint32_t* b, std::size_t n,
                                 unsigned long long* bad) {
  unsigned long long c = 0;
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x)
    c += a[i] != b[i];
  if (c != 0) atomicAdd(bad, c);
}

struct variant {
  std::string name;
  std::function<void(cudaStream_t)> run;
  std::vector<double> gbps;
};

// The one-pass shapes measured: the kernel (units of 16 B per thread, streaming hint), threads per
// block and whether each block reserves enough shared memory to have an SM to itself.
struct onepass_shape {
  void (*kernel)(uint4*, const uint4*, std::size_t);
  int units;
  bool streaming;
  int threads;
  bool one_block;
};
const onepass_shape onepass_shapes[] = {
    {onepass_copy<2, 1>, 2, true, 1024, false}, {onepass_copy<4, 1>, 4, true, 1024, false},
    {onepass_copy<8, 1>, 8, true, 1024, false}, {onepass_copy<4, 0>, 4, false, 1024, false},
    {onepass_copy<8, 0>, 8, false, 512, false}, {onepass_copy<16, 1>, 16, true, 256, false},
    {onepass_copy<2, 1>, 2, true, 1024, true},  {onepass_copy<3, 1>, 3, true, 1024, true},
    {onepass_copy<3, 0>, 3, false, 1024, true}, {onepass_copy<4, 1>, 4, true, 768, true},
    {onepass_copy<4, 1>, 4, true, 1024, true},  {onepass_copy<6, 1>, 6, true, 512, true},
    {onepass_copy<8, 1>, 8, true, 1024, true},
};

}  // namespace

int main(int argc, char** argv) {
  const std::size_t bytes = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : (2ull << 30);
  const int samples = argc > 2 ? std::atoi(argv[2]) : 9;
  if (bytes < (1u << 20) || bytes % 16 != 0 || samples < 1) {
    std::fprintf(stderr,
                 "copy_shapes: bytes must be a multiple of 16 and >= 1 MiB, samples >= 1\n");
    return 2;
  }
  constexpr int loops = 10;
  int dev = 0, sms = 0, max_threads = 0;
  CHECK(cudaGetDevice(&dev));
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  CHECK(cudaDeviceGetAttribute(&max_threads, cudaDevAttrMaxThreadsPerMultiProcessor, dev));
  int smem_per_sm = 0;
  CHECK(cudaDeviceGetAttribute(&smem_per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev));
  const int one_block = smem_per_sm / 2 + 1024;  // a second block's reservation does not fit
  cudaDeviceProp prop{};
  CHECK(cudaGetDeviceProperties(&prop, dev));
  const std::size_t n_words = bytes / 4, n = bytes / 16;
  std::uint32_t *a = nullptr, *b = nullptr;
  unsigned long long *counter = nullptr, *bad = nullptr;
  CHECK(cudaMalloc(&a, bytes));
  CHECK(cudaMalloc(&b, bytes));
  CHECK(cudaMalloc(&counter, sizeof *counter));
  CHECK(cudaMalloc(&bad, sizeof *bad));
  CHECK(cudaMemset(counter, 0, sizeof *counter));
  unsigned long long base = 0;
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  fill<<<sms * 8, 256, 0, s>>>(a, n_words, 0x1234u);
  CHECK(cudaGetLastError());
  auto* d = reinterpret_cast<uint4*>(b);
  const auto* src = reinterpret_cast<const uint4*>(a);

  std::vector<variant> vs;
  vs.push_back(
      {"cudaMemcpyAsync D2D",
       [&](cudaStream_t st) { CHECK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, st)); },
       {}});
  auto grid = [&](const char* name, auto kernel, int threads, int per_sm) {
    vs.push_back({std::string(name) + ", " + std::to_string(threads) + " threads x " +
                      std::to_string(sms * per_sm) + " blocks",
                  [=](cudaStream_t st) {
                    kernel<<<sms * per_sm, threads, 0, st>>>(d, src, n);
                    CHECK(cudaGetLastError());
                  },
                  {}});
  };
  auto onepass = [&](const char* name, auto kernel, int threads, int per_thread, int smem = 0) {
    const std::size_t tile = static_cast<std::size_t>(threads) * per_thread;
    const auto blocks = static_cast<unsigned>((n + tile - 1) / tile);
    if (smem > 0)
      CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    vs.push_back({std::string(name) + ", " + std::to_string(threads) + " threads x " +
                      std::to_string(blocks) + " blocks" + (smem > 0 ? ", one block per SM" : ""),
                  [=](cudaStream_t st) {
                    kernel<<<blocks, threads, smem, st>>>(d, src, n);
                    CHECK(cudaGetLastError());
                  },
                  {}});
  };
  auto steal = [&](const char* name, auto kernel, int threads, int per_thread) {
    const std::size_t tile = static_cast<std::size_t>(threads) * per_thread;
    const std::size_t n_tiles = (n + tile - 1) / tile;
    const int blocks = sms * (max_threads / threads);
    vs.push_back({std::string(name) + ", " + std::to_string(threads) + " threads x " +
                      std::to_string(blocks) + " blocks",
                  [=, &base](cudaStream_t st) {
                    kernel<<<blocks, threads, 0, st>>>(d, src, n, counter, base);
                    CHECK(cudaGetLastError());
                    base += n_tiles + static_cast<unsigned long long>(blocks);
                  },
                  {}});
  };
  auto waves = [&](const char* name, auto kernel, int threads, int count) {
    const int blocks = sms * (max_threads / threads) * count;
    vs.push_back({std::string(name) + ", " + std::to_string(count) + " full waves of " +
                      std::to_string(threads) + " threads",
                  [=](cudaStream_t st) {
                    kernel<<<blocks, threads, 0, st>>>(d, src, n);
                    CHECK(cudaGetLastError());
                  },
                  {}});
  };
  grid("grid-stride 4 x 16 B", stride_copy<4, 0>, 256, max_threads / 256);
  grid("grid-stride 8 x 16 B streaming", stride_copy<8, 1>, 512, max_threads / 512);
  for (const onepass_shape& o : onepass_shapes) {
    const std::string name =
        "one pass " + std::to_string(o.units) + " x 16 B" + (o.streaming ? " streaming" : "");
    onepass(name.c_str(), o.kernel, o.threads, o.units, o.one_block ? one_block : 0);
  }
  steal("work stealing 2 x 16 B", steal_copy<2, 0>, 512, 2);
  steal("work stealing 2 x 16 B streaming", steal_copy<2, 1>, 512, 2);
  steal("work stealing 4 x 16 B streaming", steal_copy<4, 1>, 1024, 4);
  steal("work stealing 2 x 16 B", steal_copy<2, 0>, 1024, 2);
  waves("exact waves 4 x 16 B", waves_copy<4, 0>, 1024, 62);
  waves("exact waves 4 x 16 B streaming", waves_copy<4, 1>, 1024, 124);

  cudaEvent_t e0, e1;
  CHECK(cudaEventCreate(&e0));
  CHECK(cudaEventCreate(&e1));
  for (auto& v : vs) {  // verify each variant from a poisoned destination
    fill<<<sms * 8, 256, 0, s>>>(b, n_words, 0xdeadu);
    CHECK(cudaGetLastError());
    v.run(s);
    CHECK(cudaMemsetAsync(bad, 0, sizeof *bad, s));
    count_mismatches<<<sms * 8, 256, 0, s>>>(a, b, n_words, bad);
    CHECK(cudaGetLastError());
    unsigned long long h = 0;
    CHECK(cudaMemcpyAsync(&h, bad, sizeof h, cudaMemcpyDeviceToHost, s));
    CHECK(cudaStreamSynchronize(s));
    if (h != 0) {
      std::fprintf(stderr, "copy_shapes: %s copied %llu words wrong\n", v.name.c_str(), h);
      return 1;
    }
  }
  for (int k = 0; k < samples; ++k) {  // interleaved: drift hits every variant alike
    for (auto& v : vs) {
      v.run(s);
      CHECK(cudaEventRecord(e0, s));
      for (int i = 0; i < loops; ++i) v.run(s);
      CHECK(cudaEventRecord(e1, s));
      CHECK(cudaEventSynchronize(e1));
      float ms = 0;
      CHECK(cudaEventElapsedTime(&ms, e0, e1));
      v.gbps.push_back(static_cast<double>(bytes) * loops / (ms / 1e3) / 1e9);
    }
  }
  const double ref = vramkit::sample_stats::of(vs.front().gbps).median;
  std::printf(
      "%s, %d SMs; %zu bytes copied, %d samples of %d copies; GB/s copied once (median, min, max), "
      "verified\n\n",
      prop.name, sms, bytes, samples, loops);
  std::printf(
      "| copy | GB/s | min | max | vs cudaMemcpyAsync |\n| --- | ---: | ---: | ---: | ---: |\n");
  for (const auto& v : vs) {
    const auto st = vramkit::sample_stats::of(v.gbps);
    std::printf("| %s | %.1f | %.1f | %.1f | %.3f |\n", v.name.c_str(), st.median, st.min, st.max,
                st.median / ref);
  }
  CHECK(cudaFree(a));
  CHECK(cudaFree(b));
  CHECK(cudaFree(counter));
  CHECK(cudaFree(bad));
  CHECK(cudaStreamDestroy(s));
  return 0;
}

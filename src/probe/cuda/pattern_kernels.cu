// Kernels of the access-pattern and cache-level sections (launchers in pattern_kernels.hpp).
#include "pattern_kernels.hpp"

namespace vramkit::probe::detail {
namespace {

__device__ __forceinline__ std::uint32_t word_sum(std::uint32_t v) { return v; }
__device__ __forceinline__ std::uint32_t word_sum(uint2 v) { return v.x + v.y; }
__device__ __forceinline__ std::uint32_t word_sum(uint4 v) { return v.x + v.y + v.z + v.w; }

__device__ __forceinline__ void add_to(std::uint32_t* sum, std::uint32_t acc) {
  for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
  if ((threadIdx.x & 31) == 0 && acc != 0) atomicAdd(sum, acc);
}

__device__ __forceinline__ void add_count(unsigned long long* count, unsigned long long bad) {
  for (int o = 16; o > 0; o >>= 1) bad += __shfl_xor_sync(0xffffffffu, bad, o);
  if ((threadIdx.x & 31) == 0 && bad != 0) atomicAdd(count, bad);
}

__device__ __forceinline__ std::uint64_t global_index() {
  return blockIdx.x * static_cast<std::uint64_t>(blockDim.x) + threadIdx.x;
}
__device__ __forceinline__ std::uint64_t grid_size() {
  return static_cast<std::uint64_t>(gridDim.x) * blockDim.x;
}

// Element e of T at word first + e * period: thread t reads elements t, t + grid, ... four at a
// time so several loads are in flight.
template <typename T>
__global__ void pattern_read_kernel(const std::uint32_t* __restrict__ p, std::uint64_t first,
                                    std::uint64_t n, std::uint64_t period, std::uint32_t* sum) {
  const std::uint64_t step = grid_size();
  std::uint32_t acc = 0;
  std::uint64_t e = global_index();
  for (; e + 3 * step < n; e += 4 * step) {
    T v[4];
#pragma unroll
    for (int u = 0; u < 4; ++u)
      v[u] = __ldg(reinterpret_cast<const T*>(p + first + (e + u * step) * period));
#pragma unroll
    for (int u = 0; u < 4; ++u) acc += word_sum(v[u]);
  }
  for (; e < n; e += step)
    acc += word_sum(__ldg(reinterpret_cast<const T*>(p + first + e * period)));
  add_to(sum, acc);
}

__device__ __forceinline__ std::uint32_t pw(std::uint64_t j, std::uint32_t seed) {
  return static_cast<std::uint32_t>(j) * 0x9E3779B1u + seed;
}

__device__ __forceinline__ void put(std::uint32_t* q, std::uint64_t j, std::uint32_t seed,
                                    std::uint32_t*) {
  *q = pw(j, seed);
}
__device__ __forceinline__ void put(std::uint32_t* q, std::uint64_t j, std::uint32_t seed, uint2*) {
  *reinterpret_cast<uint2*>(q) = make_uint2(pw(j, seed), pw(j + 1, seed));
}
__device__ __forceinline__ void put(std::uint32_t* q, std::uint64_t j, std::uint32_t seed, uint4*) {
  *reinterpret_cast<uint4*>(q) =
      make_uint4(pw(j, seed), pw(j + 1, seed), pw(j + 2, seed), pw(j + 3, seed));
}

template <typename T>
__global__ void pattern_write_kernel(std::uint32_t* __restrict__ p, std::uint64_t first,
                                     std::uint64_t n, std::uint64_t period, std::uint32_t seed) {
  const std::uint64_t step = grid_size();
  for (std::uint64_t e = global_index(); e < n; e += step) {
    const std::uint64_t j = first + e * period;
    put(p + j, j, seed, static_cast<T*>(nullptr));
  }
}

__global__ void pattern_mismatch_kernel(const std::uint32_t* __restrict__ p, std::uint64_t n_words,
                                        std::uint64_t first, std::uint64_t n_elems,
                                        std::uint64_t period, unsigned run, std::uint32_t seed_in,
                                        std::uint32_t seed_out, unsigned long long* count) {
  unsigned long long bad = 0;
  const std::uint64_t end = first + n_elems * period;
  const bool pow2 = (period & (period - 1)) == 0;
  for (std::uint64_t j = global_index(); j < n_words; j += grid_size()) {
    // The section's periods are powers of two: a mask then, not a 64-bit division per word.
    const std::uint64_t off = j - first;
    const std::uint64_t rem = pow2 ? (off & (period - 1)) : off % period;
    const bool in = j >= first && j < end && rem < run;
    bad += p[j] != pw(j, in ? seed_in : seed_out) ? 1 : 0;
  }
  add_count(count, bad);
}

__global__ void build_index_kernel(std::uint32_t* idx, std::uint64_t n, unsigned bits,
                                   std::uint64_t seed) {
  const std::uint64_t mask = (1ull << bits) - 1;
  for (std::uint64_t i = global_index(); i < n; i += grid_size())
    idx[i] = mix_index(i & mask, bits, seed);
}

__global__ void gather_kernel(const std::uint32_t* __restrict__ p,
                              const std::uint32_t* __restrict__ idx, std::uint64_t n,
                              std::uint32_t* sum) {
  const std::uint64_t step = grid_size();
  std::uint32_t acc = 0;
  std::uint64_t i = global_index();
  for (; i + 3 * step < n; i += 4 * step) {
    std::uint32_t k[4], v[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) k[u] = __ldcs(idx + i + u * step);
#pragma unroll
    for (int u = 0; u < 4; ++u) v[u] = __ldg(p + k[u]);
#pragma unroll
    for (int u = 0; u < 4; ++u) acc += v[u];
  }
  for (; i < n; i += step) acc += __ldg(p + __ldcs(idx + i));
  add_to(sum, acc);
}

__global__ void gather_reference_kernel(const std::uint32_t* __restrict__ idx, std::uint64_t n,
                                        std::uint32_t seed, std::uint32_t* sum) {
  std::uint32_t acc = 0;
  for (std::uint64_t i = global_index(); i < n; i += grid_size()) acc += pw(idx[i], seed);
  add_to(sum, acc);
}

__global__ void scatter_kernel(std::uint32_t* __restrict__ p, const std::uint32_t* __restrict__ idx,
                               std::uint64_t n, std::uint32_t seed) {
  const std::uint64_t step = grid_size();
  std::uint64_t i = global_index();
  for (; i + 3 * step < n; i += 4 * step) {
    std::uint32_t k[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) k[u] = __ldcs(idx + i + u * step);
#pragma unroll
    for (int u = 0; u < 4; ++u) p[k[u]] = pw(k[u], seed);
  }
  for (; i < n; i += step) {
    const std::uint32_t k = __ldcs(idx + i);
    p[k] = pw(k, seed);
  }
}

__global__ void scatter_mismatch_kernel(const std::uint32_t* __restrict__ p,
                                        const std::uint32_t* __restrict__ idx, std::uint64_t n,
                                        std::uint32_t seed, unsigned long long* count) {
  unsigned long long bad = 0;
  for (std::uint64_t i = global_index(); i < n; i += grid_size()) {
    const std::uint32_t k = idx[i];
    bad += p[k] != pw(k, seed) ? 1 : 0;
  }
  add_count(count, bad);
}

// Every block streams the whole set from its own starting vector (wrapping), through L1; or the
// grid reads it once a pass in grid-stride order with L1 bypassed (ld.global.cg). Four loads in
// flight per thread either way.
template <bool GridOnceL2>
__device__ __forceinline__ uint4 resident_load(const uint4* p) {
  if constexpr (GridOnceL2) {
    return __ldcg(p);
  } else {
    return __ldg(p);
  }
}

// Launch bounds of 1024 threads: one block per multiprocessor must be able to hold them all.
template <bool GridOnceL2>
__global__ void __launch_bounds__(1024)
    resident_read_kernel(const uint4* __restrict__ p, std::uint64_t ws_vec, int reps,
                         std::uint32_t* sum) {
  std::uint64_t begin, count, stride, start;
  if constexpr (!GridOnceL2) {
    begin = threadIdx.x;
    count = ws_vec;
    stride = blockDim.x;
    start = blockIdx.x * ws_vec / gridDim.x;
  } else {
    begin = global_index();
    count = ws_vec;
    stride = grid_size();
    start = 0;
  }
  std::uint32_t acc = 0;
  for (int r = 0; r < reps; ++r) {
    std::uint64_t j = begin;
    for (; j + 3 * stride < count; j += 4 * stride) {
      uint4 v[4];
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        std::uint64_t k = start + j + u * stride;
        if (k >= ws_vec) k -= ws_vec;
        v[u] = resident_load<GridOnceL2>(p + k);
      }
#pragma unroll
      for (int u = 0; u < 4; ++u) acc += word_sum(v[u]);
    }
    for (; j < count; j += stride) {
      std::uint64_t k = start + j;
      if (k >= ws_vec) k -= ws_vec;
      acc += word_sum(resident_load<GridOnceL2>(p + k));
    }
  }
  add_to(sum, acc);
}

int grid_of(const launch_config& cfg) { return cfg.blocks > 0 ? cfg.blocks : 1; }

unsigned blocks_for(std::uint64_t n, unsigned threads, unsigned cap) {
  const std::uint64_t b = (n + threads - 1) / threads;
  return static_cast<unsigned>(b == 0 ? 1 : (b < cap ? b : cap));
}

}  // namespace

cudaError_t launch_pattern_read(const std::uint32_t* p, const element_pattern& pat,
                                std::uint32_t* sum, const launch_config& cfg, cudaStream_t stream) {
  const int g = grid_of(cfg);
  if (pat.run == 4)
    pattern_read_kernel<uint4>
        <<<g, cfg.threads, 0, stream>>>(p, pat.first, pat.n_elems, pat.period, sum);
  else if (pat.run == 2)
    pattern_read_kernel<uint2>
        <<<g, cfg.threads, 0, stream>>>(p, pat.first, pat.n_elems, pat.period, sum);
  else
    pattern_read_kernel<std::uint32_t>
        <<<g, cfg.threads, 0, stream>>>(p, pat.first, pat.n_elems, pat.period, sum);
  return cudaGetLastError();
}

cudaError_t launch_pattern_write(std::uint32_t* p, const element_pattern& pat, std::uint32_t seed,
                                 const launch_config& cfg, cudaStream_t stream) {
  const int g = grid_of(cfg);
  if (pat.run == 4)
    pattern_write_kernel<uint4>
        <<<g, cfg.threads, 0, stream>>>(p, pat.first, pat.n_elems, pat.period, seed);
  else if (pat.run == 2)
    pattern_write_kernel<uint2>
        <<<g, cfg.threads, 0, stream>>>(p, pat.first, pat.n_elems, pat.period, seed);
  else
    pattern_write_kernel<std::uint32_t>
        <<<g, cfg.threads, 0, stream>>>(p, pat.first, pat.n_elems, pat.period, seed);
  return cudaGetLastError();
}

cudaError_t launch_pattern_mismatches(const std::uint32_t* p, std::size_t n_words,
                                      const element_pattern& pat, std::uint32_t seed_in,
                                      std::uint32_t seed_out, unsigned long long* count,
                                      cudaStream_t stream) {
  pattern_mismatch_kernel<<<blocks_for(n_words, 256, 4096), 256, 0, stream>>>(
      p, n_words, pat.first, pat.n_elems, pat.period, pat.run, seed_in, seed_out, count);
  return cudaGetLastError();
}

cudaError_t launch_build_index(std::uint32_t* idx, std::size_t n, unsigned bits, std::uint64_t seed,
                               cudaStream_t stream) {
  build_index_kernel<<<blocks_for(n, 256, 4096), 256, 0, stream>>>(idx, n, bits, seed);
  return cudaGetLastError();
}

cudaError_t launch_gather(const std::uint32_t* p, const std::uint32_t* idx, std::size_t n,
                          std::uint32_t* sum, const launch_config& cfg, cudaStream_t stream) {
  gather_kernel<<<grid_of(cfg), cfg.threads, 0, stream>>>(p, idx, n, sum);
  return cudaGetLastError();
}

cudaError_t launch_gather_reference(const std::uint32_t* idx, std::size_t n, std::uint32_t seed,
                                    std::uint32_t* sum, cudaStream_t stream) {
  gather_reference_kernel<<<blocks_for(n, 256, 4096), 256, 0, stream>>>(idx, n, seed, sum);
  return cudaGetLastError();
}

cudaError_t launch_scatter(std::uint32_t* p, const std::uint32_t* idx, std::size_t n,
                           std::uint32_t seed, const launch_config& cfg, cudaStream_t stream) {
  scatter_kernel<<<grid_of(cfg), cfg.threads, 0, stream>>>(p, idx, n, seed);
  return cudaGetLastError();
}

cudaError_t launch_scatter_mismatches(const std::uint32_t* p, const std::uint32_t* idx,
                                      std::size_t n, std::uint32_t seed, unsigned long long* count,
                                      cudaStream_t stream) {
  scatter_mismatch_kernel<<<blocks_for(n, 256, 4096), 256, 0, stream>>>(p, idx, n, seed, count);
  return cudaGetLastError();
}

cudaError_t launch_resident_read(const std::uint32_t* p, std::size_t ws_vec, int reps,
                                 resident_read mode, std::uint32_t* sum, const launch_config& cfg,
                                 cudaStream_t stream) {
  const auto* v = reinterpret_cast<const uint4*>(p);
  if (mode == resident_read::grid_once_l2_only) {
    resident_read_kernel<true><<<grid_of(cfg), cfg.threads, 0, stream>>>(v, ws_vec, reps, sum);
    return cudaGetLastError();
  }
  // As much L1 as the multiprocessor can give (the kernel uses no shared memory); set on every
  // launch, since the current device may differ between calls.
  const cudaError_t carveout = cudaFuncSetAttribute(
      resident_read_kernel<false>, cudaFuncAttributePreferredSharedMemoryCarveout, 0);
  if (carveout != cudaSuccess) return carveout;
  resident_read_kernel<false><<<grid_of(cfg), cfg.threads, 0, stream>>>(v, ws_vec, reps, sum);
  return cudaGetLastError();
}

}  // namespace vramkit::probe::detail

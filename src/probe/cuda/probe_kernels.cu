// Kernels of the GPU probe: 16-byte read, write and copy loops (tunable: unroll, streaming cache
// hints, grid-stride or per-block chunks), pattern verification, the stream-blocking spin kernel
// and the single-thread pointer chase. Launchers are declared in probe_kernels.hpp.
#include "copy_group.cuh"
#include "probe_kernels.hpp"

namespace vramkit::probe::detail {
namespace {

__device__ __forceinline__ std::uint32_t dev_pattern(std::uint64_t i, std::uint32_t seed) {
  return static_cast<std::uint32_t>(i) * 0x9E3779B1u + seed;
}

__device__ __forceinline__ std::uint64_t global_ns() {
  std::uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// The vectors [begin, end) this thread visits with step `step`: the whole grid strides over the
// buffer, or each block walks its own contiguous chunk.
struct span16 {
  std::size_t begin, end, step;
};

__device__ __forceinline__ span16 thread_span(std::size_t n_vec, bool chunked) {
  if (!chunked) {
    return {blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x, n_vec,
            static_cast<std::size_t>(gridDim.x) * blockDim.x};
  }
  const std::size_t per_block = (n_vec + gridDim.x - 1) / gridDim.x;
  const std::size_t b0 = blockIdx.x * per_block;
  const std::size_t b1 = min(n_vec, b0 + per_block);
  return {b0 + threadIdx.x, b1, blockDim.x};
}

__device__ __forceinline__ std::uint32_t sum4(uint4 v) { return v.x + v.y + v.z + v.w; }

template <int Cache, int Unroll>
__global__ void read_kernel(const uint4* __restrict__ p, std::size_t n_vec, bool chunked,
                            std::uint32_t* sum) {
  const span16 s = thread_span(n_vec, chunked);
  std::uint32_t acc = 0;
  std::size_t i = s.begin;
  for (; i + (Unroll - 1) * s.step < s.end; i += Unroll * s.step) {
    uint4 v[Unroll];
#pragma unroll
    for (int u = 0; u < Unroll; ++u) v[u] = load16<Cache>(p + i + u * s.step);
#pragma unroll
    for (int u = 0; u < Unroll; ++u) acc += sum4(v[u]);
  }
  for (; i < s.end; i += s.step) acc += sum4(load16<Cache>(p + i));
  for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
  if ((threadIdx.x & 31) == 0 && acc != 0) atomicAdd(sum, acc);
}

template <int Cache>
__global__ void fill_kernel(uint4* __restrict__ p, std::size_t n_vec, bool chunked,
                            std::uint32_t seed) {
  const span16 s = thread_span(n_vec, chunked);
  std::size_t i = s.begin;
  for (; i + 3 * s.step < s.end; i += 4 * s.step) {
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const std::size_t j = i + u * s.step;
      const std::uint64_t w = 4 * j;
      store16<Cache>(p + j, make_uint4(dev_pattern(w, seed), dev_pattern(w + 1, seed),
                                       dev_pattern(w + 2, seed), dev_pattern(w + 3, seed)));
    }
  }
  for (; i < s.end; i += s.step) {
    const std::uint64_t w = 4 * i;
    store16<Cache>(p + i, make_uint4(dev_pattern(w, seed), dev_pattern(w + 1, seed),
                                     dev_pattern(w + 2, seed), dev_pattern(w + 3, seed)));
  }
}

template <int Cache, int Unroll>
__global__ void copy_kernel(uint4* __restrict__ dst, const uint4* __restrict__ src,
                            std::size_t n_vec, bool chunked) {
  const span16 s = thread_span(n_vec, chunked);
  std::size_t i = s.begin;
  for (; i + (Unroll - 1) * s.step < s.end; i += Unroll * s.step)
    copy_group<Cache, Unroll>(dst, src, i, s.step);
  for (; i < s.end; i += s.step) store16<Cache>(dst + i, load16<Cache>(src + i));
}

// One pass: block b copies the tile [b x T x Unroll, (b + 1) x T x Unroll) of T = blockDim.x
// threads, each thread Unroll vectors T apart (the layout copy_kernel gives a chunked grid of that
// many blocks), with no division and no loop: at one block per multiprocessor a block lives a few
// microseconds, and its index arithmetic delays the first load.
template <int Cache, int Unroll>
__global__ void copy_tile_kernel(uint4* __restrict__ dst, const uint4* __restrict__ src,
                                 std::size_t n_vec) {
  const std::size_t T = blockDim.x;
  const std::size_t i = blockIdx.x * T * Unroll + threadIdx.x;
  if (i + (Unroll - 1) * T < n_vec) {
    copy_group<Cache, Unroll>(dst, src, i, T);
  } else {
    for (std::size_t j = i; j < n_vec; j += T) store16<Cache>(dst + j, load16<Cache>(src + j));
  }
}

// Bulk copy (sm_90+): one thread per block moves `chunk` bytes at a time from global memory into
// shared memory with cp.async.bulk (completion counted on an mbarrier), then back out to global
// memory with a bulk store. With Stages = 2 the load of the next chunk runs while the current one
// is stored (two buffers, two barriers). A wait that exceeds `timeout_ns` gives up (the copy then
// fails its verification instead of hanging).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
__device__ __forceinline__ void bulk_load(unsigned buf, const char* src, unsigned bytes,
                                          unsigned bar) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes)
               : "memory");
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::
          "r"(buf),
      "l"(src), "r"(bytes), "r"(bar)
      : "memory");
}

__device__ __forceinline__ bool bulk_wait(unsigned bar, unsigned phase, std::uint64_t deadline) {
  while (true) {
    unsigned done = 0;
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        " selp.u32 %0, 1, 0, p;\n}"
        : "=r"(done)
        : "r"(bar), "r"(phase)
        : "memory");
    if (done != 0) return true;
    if (global_ns() > deadline) return false;
  }
}
#endif

template <int Stages>
__global__ void bulk_copy_kernel(char* dst, const char* src, std::size_t n_bytes, unsigned chunk,
                                 std::uint64_t timeout_ns) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  extern __shared__ __align__(128) unsigned char bulk_buf[];
  __shared__ __align__(8) std::uint64_t bulk_bar[Stages];
  if (threadIdx.x != 0) return;
  unsigned bar[Stages], buf[Stages], phase[Stages];
  for (int i = 0; i < Stages; ++i) {
    bar[i] = static_cast<unsigned>(__cvta_generic_to_shared(&bulk_bar[i]));
    buf[i] = static_cast<unsigned>(__cvta_generic_to_shared(bulk_buf + i * chunk));
    phase[i] = 0;
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(bar[i]) : "memory");
  }
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  const std::uint64_t deadline = global_ns() + timeout_ns;
  const std::size_t step = static_cast<std::size_t>(gridDim.x) * chunk;
  std::size_t off = blockIdx.x * static_cast<std::size_t>(chunk);
  auto size_at = [&](std::size_t o) {
    return static_cast<unsigned>(min(static_cast<std::size_t>(chunk), n_bytes - o));
  };
  if (off < n_bytes) bulk_load(buf[0], src + off, size_at(off), bar[0]);
  for (int k = 0; off < n_bytes; off += step, ++k) {
    const int cur = Stages == 1 ? 0 : (k & 1);
    if (Stages == 2 && off + step < n_bytes) {
      // The other buffer is free once the previous store has read it.
      asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
      bulk_load(buf[cur ^ 1], src + off + step, size_at(off + step), bar[cur ^ 1]);
    }
    if (!bulk_wait(bar[cur], phase[cur], deadline)) return;
    phase[cur] ^= 1u;
    asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(dst + off),
                 "r"(buf[cur]), "r"(size_at(off))
                 : "memory");
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
    if (Stages == 1) {
      asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
      if (off + step < n_bytes) bulk_load(buf[0], src + off + step, size_at(off + step), bar[0]);
    }
  }
  asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
#endif
}

// Words past the last whole 16-byte vector, handled by one thread.
__global__ void tail_kernel(std::uint32_t* dst, const std::uint32_t* src, std::size_t first,
                            std::size_t n, std::uint32_t seed, int op, std::uint32_t* sum) {
  std::uint32_t acc = 0;
  for (std::size_t i = first; i < n; ++i) {
    if (op == 0)
      dst[i] = dev_pattern(i, seed);
    else if (op == 1)
      acc += src[i];
    else
      dst[i] = src[i];
  }
  if (op == 1 && acc != 0) atomicAdd(sum, acc);
}

__global__ void mismatch_kernel(const std::uint32_t* __restrict__ p, std::size_t n,
                                std::uint32_t seed, unsigned long long* count) {
  unsigned long long bad = 0;
  const std::size_t step = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += step) {
    bad += (p[i] != dev_pattern(i, seed)) ? 1 : 0;
  }
  for (int o = 16; o > 0; o >>= 1) bad += __shfl_xor_sync(0xffffffffu, bad, o);
  if ((threadIdx.x & 31) == 0 && bad != 0) atomicAdd(count, bad);
}

__global__ void spin_kernel(const volatile int* flag, std::uint64_t timeout_ns, int* timed_out) {
  const std::uint64_t t0 = global_ns();
  while (*flag == 0) {
    if (global_ns() - t0 > timeout_ns) {
      *timed_out = 1;
      break;
    }
  }
}

__global__ void chase_build_kernel(std::uint64_t* base, std::uint64_t stride_words,
                                   chase_layout layout) {
  const std::uint64_t n = layout.chunks * layout.lines;
  const std::uint64_t step = static_cast<std::uint64_t>(gridDim.x) * blockDim.x;
  for (std::uint64_t t = blockIdx.x * static_cast<std::uint64_t>(blockDim.x) + threadIdx.x; t < n;
       t += step) {
    const std::uint64_t from = chase_visit(layout, t);
    const std::uint64_t to = chase_visit(layout, t + 1 == n ? 0 : t + 1);
    base[from * stride_words] = reinterpret_cast<std::uint64_t>(base + to * stride_words);
  }
}

__global__ void chase_kernel(const std::uint64_t* start, std::uint64_t warm, std::uint64_t steps,
                             std::uint64_t* out) {
  const std::uint64_t* p = start;
  for (std::uint64_t i = 0; i < warm; ++i) p = reinterpret_cast<const std::uint64_t*>(*p);
  const std::uint64_t t0 = global_ns();
  const long long c0 = clock64();
  std::uint64_t i = 0;
  for (; i + 8 <= steps; i += 8) {
#pragma unroll
    for (int u = 0; u < 8; ++u) p = reinterpret_cast<const std::uint64_t*>(*p);
  }
  for (; i < steps; ++i) p = reinterpret_cast<const std::uint64_t*>(*p);
  const long long c1 = clock64();
  const std::uint64_t t1 = global_ns();
  out[0] = reinterpret_cast<std::uint64_t>(p);
  out[1] = t1 - t0;
  out[2] = static_cast<std::uint64_t>(c1 - c0);
}

int grid_for(const launch_config& cfg) { return cfg.blocks > 0 ? cfg.blocks : 1; }

template <int Cache, int Unroll>
cudaError_t launch_copy_unrolled(uint4* d, const uint4* s, std::size_t n_vec,
                                 const launch_config& cfg, cudaStream_t stream) {
  const std::size_t tile = static_cast<std::size_t>(cfg.threads) * Unroll;
  const bool one_pass =
      cfg.chunked && (n_vec + tile - 1) / tile == static_cast<std::size_t>(grid_for(cfg));
  const void* kernel = one_pass ? reinterpret_cast<const void*>(copy_tile_kernel<Cache, Unroll>)
                                : reinterpret_cast<const void*>(copy_kernel<Cache, Unroll>);
  if (cfg.smem_reserve > 48 * 1024) {  // above the default limit a kernel must opt in, once
    // Read first: setting the attribute on every launch could make each launch carry a state
    // change, which a timed loop must not pay for.
    cudaFuncAttributes attr{};
    cudaError_t st = cudaFuncGetAttributes(&attr, kernel);
    if (st == cudaSuccess && attr.maxDynamicSharedSizeBytes < cfg.smem_reserve)
      st = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                cfg.smem_reserve);
    if (st != cudaSuccess) return st;
  }
  const auto smem = static_cast<std::size_t>(cfg.smem_reserve);
  if (one_pass)
    copy_tile_kernel<Cache, Unroll><<<grid_for(cfg), cfg.threads, smem, stream>>>(d, s, n_vec);
  else
    copy_kernel<Cache, Unroll>
        <<<grid_for(cfg), cfg.threads, smem, stream>>>(d, s, n_vec, cfg.chunked);
  return cudaSuccess;
}

template <int Cache>
cudaError_t launch_copy_as(uint4* d, const uint4* s, std::size_t n_vec, const launch_config& cfg,
                           cudaStream_t stream) {
  if (cfg.unroll >= 8) return launch_copy_unrolled<Cache, 8>(d, s, n_vec, cfg, stream);
  if (cfg.unroll == 3) return launch_copy_unrolled<Cache, 3>(d, s, n_vec, cfg, stream);
  return launch_copy_unrolled<Cache, 4>(d, s, n_vec, cfg, stream);
}

}  // namespace

cudaError_t launch_fill(std::uint32_t* p, std::size_t n_words, std::uint32_t seed,
                        const launch_config& cfg, cudaStream_t stream) {
  const std::size_t n_vec = n_words / 4;
  auto* v = reinterpret_cast<uint4*>(p);
  if (n_vec > 0) {
    if (cfg.cache == cache_hint::streaming)
      fill_kernel<1><<<grid_for(cfg), cfg.threads, 0, stream>>>(v, n_vec, cfg.chunked, seed);
    else
      fill_kernel<0><<<grid_for(cfg), cfg.threads, 0, stream>>>(v, n_vec, cfg.chunked, seed);
  }
  if (n_words % 4 != 0)
    tail_kernel<<<1, 1, 0, stream>>>(p, nullptr, n_vec * 4, n_words, seed, 0, nullptr);
  return cudaGetLastError();
}

cudaError_t launch_read(const std::uint32_t* p, std::size_t n_words, std::uint32_t* sum,
                        const launch_config& cfg, cudaStream_t stream) {
  const std::size_t n_vec = n_words / 4;
  const auto* v = reinterpret_cast<const uint4*>(p);
  if (n_vec > 0) {
    const int g = grid_for(cfg);
    const bool u8 = cfg.unroll >= 8;
    const bool c = cfg.chunked;
    switch (cfg.cache) {
      case cache_hint::streaming:
        if (u8)
          read_kernel<1, 8><<<g, cfg.threads, 0, stream>>>(v, n_vec, c, sum);
        else
          read_kernel<1, 4><<<g, cfg.threads, 0, stream>>>(v, n_vec, c, sum);
        break;
      case cache_hint::prefetch:
      case cache_hint::prefetch_streaming:
        if (u8)
          read_kernel<2, 8><<<g, cfg.threads, 0, stream>>>(v, n_vec, c, sum);
        else
          read_kernel<2, 4><<<g, cfg.threads, 0, stream>>>(v, n_vec, c, sum);
        break;
      default:
        if (u8)
          read_kernel<0, 8><<<g, cfg.threads, 0, stream>>>(v, n_vec, c, sum);
        else
          read_kernel<0, 4><<<g, cfg.threads, 0, stream>>>(v, n_vec, c, sum);
        break;
    }
  }
  if (n_words % 4 != 0) tail_kernel<<<1, 1, 0, stream>>>(nullptr, p, n_vec * 4, n_words, 0, 1, sum);
  return cudaGetLastError();
}

cudaError_t launch_copy(std::uint32_t* dst, const std::uint32_t* src, std::size_t n_words,
                        const launch_config& cfg, cudaStream_t stream) {
  const std::size_t n_vec = n_words / 4;
  auto* d = reinterpret_cast<uint4*>(dst);
  const auto* s = reinterpret_cast<const uint4*>(src);
  if (n_vec > 0 && cfg.bulk_bytes > 0) {
    // Shared memory is what bounds the blocks per SM here: ask for the largest carveout.
    const bool two = cfg.unroll >= 2;
    auto* kernel = two ? bulk_copy_kernel<2> : bulk_copy_kernel<1>;
    const int smem = cfg.bulk_bytes * (two ? 2 : 1);
    cudaError_t st = cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                          cudaSharedmemCarveoutMaxShared);
    if (st == cudaSuccess)
      st = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (st != cudaSuccess) return st;
    kernel<<<grid_for(cfg), 32, smem, stream>>>(
        reinterpret_cast<char*>(dst), reinterpret_cast<const char*>(src), n_vec * 16,
        static_cast<unsigned>(cfg.bulk_bytes), 200'000'000ull);
  } else if (n_vec > 0) {
    cudaError_t st = cudaSuccess;
    switch (cfg.cache) {
      case cache_hint::streaming:
        st = launch_copy_as<1>(d, s, n_vec, cfg, stream);
        break;
      case cache_hint::prefetch:
        st = launch_copy_as<2>(d, s, n_vec, cfg, stream);
        break;
      case cache_hint::prefetch_streaming:
        st = launch_copy_as<3>(d, s, n_vec, cfg, stream);
        break;
      default:
        st = launch_copy_as<0>(d, s, n_vec, cfg, stream);
        break;
    }
    if (st != cudaSuccess) return st;
  }
  if (n_words % 4 != 0)
    tail_kernel<<<1, 1, 0, stream>>>(dst, src, n_vec * 4, n_words, 0, 2, nullptr);
  return cudaGetLastError();
}

cudaError_t launch_count_mismatches(const std::uint32_t* p, std::size_t n_words, std::uint32_t seed,
                                    unsigned long long* count, cudaStream_t stream) {
  if (n_words == 0) return cudaSuccess;
  const std::size_t blocks = std::min<std::size_t>(4096, (n_words + 255) / 256);
  mismatch_kernel<<<static_cast<unsigned>(blocks), 256, 0, stream>>>(p, n_words, seed, count);
  return cudaGetLastError();
}

cudaError_t launch_spin(const volatile int* flag, std::uint64_t timeout_ns, int* timed_out,
                        cudaStream_t stream) {
  spin_kernel<<<1, 1, 0, stream>>>(flag, timeout_ns, timed_out);
  return cudaGetLastError();
}

cudaError_t launch_chase_build(std::uint64_t* base, std::uint64_t stride_bytes,
                               const chase_layout& layout, cudaStream_t stream) {
  const std::uint64_t n = layout.chunks * layout.lines;
  const std::uint64_t blocks = std::min<std::uint64_t>(8192, (n + 255) / 256);
  chase_build_kernel<<<static_cast<unsigned>(blocks), 256, 0, stream>>>(base, stride_bytes / 8,
                                                                        layout);
  return cudaGetLastError();
}

cudaError_t launch_chase(const std::uint64_t* start, std::uint64_t warm, std::uint64_t steps,
                         std::uint64_t* out, cudaStream_t stream) {
  chase_kernel<<<1, 1, 0, stream>>>(start, warm, steps, out);
  return cudaGetLastError();
}

}  // namespace vramkit::probe::detail

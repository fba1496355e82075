// The allocation-cost section: cudaMalloc/cudaFree against cudaMallocAsync/cudaFreeAsync from a
// warm pool, over one random size trace, timed per call by the host clock.
#include <chrono>
#include <cstdint>
#include <vector>

#include "common/cuda_check.hpp"
#include "gpu_probe_detail.hpp"
#include "vramkit/core/error.hpp"

namespace vramkit::probe::detail {
namespace {
constexpr std::size_t MiB = std::size_t{1} << 20;
}  // namespace

void run_alloc_section(gpu_context& ctx) {
  ctx.progress("allocation cost (cudaMalloc vs cudaMallocAsync pool)");
  const int n = ctx.quick() ? 300 : 1000;
  splitmix64 rng{0xA110C};
  std::vector<std::size_t> trace(n);
  for (auto& sz : trace) sz = 256 + rng.below(64 * MiB - 256 + 1);
  using clock = std::chrono::steady_clock;
  auto us = [](clock::time_point a, clock::time_point b) {
    return std::chrono::duration<double, std::micro>(b - a).count();
  };
  std::vector<double> t_malloc, t_free, t_amalloc, t_afree;
  bool ok = true;
  // cudaMalloc / cudaFree, one allocation live at a time.
  for (std::size_t sz : trace) {
    void* p = nullptr;
    const auto t0 = clock::now();
    VRAMKIT_CUDA_TRY(cudaMalloc(&p, sz));
    const auto t1 = clock::now();
    VRAMKIT_CUDA_TRY(cudaFree(p));
    const auto t2 = clock::now();
    if (p == nullptr || reinterpret_cast<std::uintptr_t>(p) % 256 != 0) ok = false;
    t_malloc.push_back(us(t0, t1));
    t_free.push_back(us(t1, t2));
  }
  // cudaMallocAsync from the device's default pool, kept warm by a high release threshold
  // (restored afterwards).
  cudaMemPool_t pool = nullptr;
  VRAMKIT_CUDA_TRY(cudaDeviceGetDefaultMemPool(&pool, ctx.ordinal));
  std::uint64_t old_threshold = 0, high = UINT64_MAX;
  VRAMKIT_CUDA_TRY(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &old_threshold));
  VRAMKIT_CUDA_TRY(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &high));
  owned_cuda_stream stream;
  const cudaStream_t s = stream.get();
  try {
    for (std::size_t sz : trace) {  // warm the pool
      void* p = nullptr;
      VRAMKIT_CUDA_TRY(cudaMallocAsync(&p, sz, s));
      VRAMKIT_CUDA_TRY(cudaFreeAsync(p, s));
    }
    VRAMKIT_CUDA_TRY(cudaStreamSynchronize(s));
    for (std::size_t sz : trace) {
      void* p = nullptr;
      const auto t0 = clock::now();
      VRAMKIT_CUDA_TRY(cudaMallocAsync(&p, sz, s));
      const auto t1 = clock::now();
      VRAMKIT_CUDA_TRY(cudaFreeAsync(p, s));
      const auto t2 = clock::now();
      if (p == nullptr || reinterpret_cast<std::uintptr_t>(p) % 256 != 0) ok = false;
      t_amalloc.push_back(us(t0, t1));
      t_afree.push_back(us(t1, t2));
    }
    VRAMKIT_CUDA_TRY(cudaStreamSynchronize(s));
  } catch (...) {
    VRAMKIT_CUDA_ASSERT(
        cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &old_threshold));
    throw;
  }
  VRAMKIT_CUDA_TRY(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &old_threshold));
  VRAMKIT_CUDA_TRY(cudaMemPoolTrimTo(pool, 0));

  auto add = [&](const char* key, const char* title, std::vector<double>& v) {
    measurement m;
    m.key = ctx.key(std::string("alloc.") + key);
    m.section = "alloc";
    m.title = title;
    m.device = ctx.tag;
    m.unit = "us";
    m.samples = v;
    m.repetitions = static_cast<int>(v.size());
    m.stats = sample_stats::of(v);
    m.size_bytes = 64 * MiB;
    m.note = std::to_string(n) +
             " sizes uniform in 256 B - 64 MiB (fixed seed), host time per call; "
             "every call succeeded with a 256-byte aligned pointer";
    add_verified(ctx, std::move(m), ok, "an allocation returned a null or misaligned pointer");
  };
  add("cuda_malloc", "cudaMalloc per call", t_malloc);
  add("cuda_free", "cudaFree per call", t_free);
  add("malloc_async", "cudaMallocAsync per call (warm pool)", t_amalloc);
  add("free_async", "cudaFreeAsync per call (warm pool)", t_afree);
}

}  // namespace vramkit::probe::detail

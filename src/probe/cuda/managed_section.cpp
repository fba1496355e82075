// The managed-memory section: a kernel's first touch of CPU-written managed memory, the same after
// cudaMemPrefetchAsync (and the prefetch itself), and after cudaMemAdvise.
#include <algorithm>
#include <memory>

#include "common/cuda_check.hpp"
#include "gpu_probe_detail.hpp"
#include "vramkit/core/error.hpp"

namespace vramkit::probe::detail {
namespace {
constexpr std::size_t MiB = std::size_t{1} << 20;
constexpr std::size_t GiB = std::size_t{1} << 30;
}  // namespace

void run_managed_section(gpu_context& ctx) {
  if (!ctx.concurrent_managed) {
    ctx.report->skips.push_back(
        {ctx.tag + ".managed",
         "the device has no concurrent managed access (concurrentManagedAccess = 0)"});
    return;
  }
  ctx.progress("managed memory (fault-driven, prefetched, advised)");
  std::size_t free_b = 0, total_b = 0;
  VRAMKIT_CUDA_TRY(cudaMemGetInfo(&free_b, &total_b));
  // Never more managed memory than a quarter of what is free: oversubscription can stall a GPU.
  // The CPU writes it first, so its pages also live in host memory for a while.
  const std::size_t bytes = ctx.host_fit(
      std::min<std::size_t>(ctx.quick() ? 128 * MiB : 512 * MiB, free_b / 4) / MiB * MiB, 1, 0);
  if (bytes < 16 * MiB) {
    ctx.report->skips.push_back(
        {ctx.tag + ".managed", "not enough free device memory or host memory available"});
    return;
  }
  const std::size_t words = bytes / 4;
  std::uint32_t* p = nullptr;
  VRAMKIT_CUDA_TRY(cudaMallocManaged(reinterpret_cast<void**>(&p), bytes, cudaMemAttachGlobal));
  std::unique_ptr<std::uint32_t, void (*)(std::uint32_t*)> guard(
      p, [](std::uint32_t* q) { VRAMKIT_CUDA_ASSERT(cudaFree(q)); });
  device_buffer sum(sizeof(std::uint32_t));
  auto* sum_p = static_cast<std::uint32_t*>(sum.get());
  owned_cuda_stream stream;
  const cudaStream_t s = stream.get();
  owned_cuda_event a, b, c;
  const launch_config cfg = ctx.default_launch();
  const int samples = 3;
  cudaMemLocation gpu{};
  gpu.type = cudaMemLocationTypeDevice;
  gpu.id = ctx.ordinal;

  struct mode_result {
    std::vector<double> touch, prefetch;
    bool ok = true;
  };
  auto run_mode = [&](int mode) {
    mode_result r;
    for (int smp = 0; smp < samples; ++smp) {
      const std::uint32_t seed = 0x3A000000u + mode * 16 + smp;
      parallel_fill(p, words, seed);  // the CPU writes: pages now live on the host
      if (mode == 2) {
        VRAMKIT_CUDA_TRY(cudaMemAdvise(p, bytes, cudaMemAdviseSetPreferredLocation, gpu));
        VRAMKIT_CUDA_TRY(cudaMemAdvise(p, bytes, cudaMemAdviseSetAccessedBy, gpu));
      }
      VRAMKIT_CUDA_TRY(cudaMemsetAsync(sum_p, 0, sizeof(std::uint32_t), s));
      VRAMKIT_CUDA_TRY(cudaEventRecord(a.get(), s));
      if (mode == 1) VRAMKIT_CUDA_TRY(cudaMemPrefetchAsync(p, bytes, gpu, 0, s));
      VRAMKIT_CUDA_TRY(cudaEventRecord(b.get(), s));
      VRAMKIT_CUDA_TRY(launch_read(p, words, sum_p, cfg, s));
      VRAMKIT_CUDA_TRY(cudaEventRecord(c.get(), s));
      VRAMKIT_CUDA_TRY(cudaStreamSynchronize(s));
      std::uint32_t got = 0;
      VRAMKIT_CUDA_TRY(cudaMemcpy(&got, sum_p, sizeof got, cudaMemcpyDeviceToHost));
      if (got != pattern_sum(words, seed)) r.ok = false;
      r.touch.push_back(elapsed_ms(b.get(), c.get()) / 1e3);
      if (mode == 1) r.prefetch.push_back(elapsed_ms(a.get(), b.get()) / 1e3);
      if (mode == 2) {
        VRAMKIT_CUDA_TRY(cudaMemAdvise(p, bytes, cudaMemAdviseUnsetPreferredLocation, gpu));
        VRAMKIT_CUDA_TRY(cudaMemAdvise(p, bytes, cudaMemAdviseUnsetAccessedBy, gpu));
      }
    }
    return r;
  };
  const char* keys[] = {"first_touch", "prefetched_touch", "advised_touch"};
  const char* titles[] = {
      "managed: GPU first touch after CPU writes (fault-driven migration)",
      "managed: GPU touch after cudaMemPrefetchAsync",
      "managed: GPU touch after cudaMemAdvise preferred location + accessed-by"};
  for (int mode = 0; mode < 3; ++mode) {
    auto r = run_mode(mode);
    auto m =
        bandwidth_measurement(ctx, ctx.key(std::string("managed.") + keys[mode]), "managed",
                              titles[mode], byte_convention::read, bytes, double(bytes), r.touch);
    m.note =
        "a read kernel over the buffer the CPU has just written; its sum checked against the "
        "pattern";
    if (mode == 1) {
      auto pf = bandwidth_measurement(
          ctx, ctx.key("managed.prefetch"), "managed", "managed: cudaMemPrefetchAsync to the GPU",
          byte_convention::copied_once, bytes, double(bytes), r.prefetch);
      pf.peak = ctx.pcie_peak_gbps;
      pf.peak_basis = ctx.pcie_peak_basis;
      pf.note = "the migration itself; verified by the read that follows";
      add_verified(ctx, std::move(pf), r.ok, "read sum after prefetch mismatch");
    }
    add_verified(ctx, std::move(m), r.ok, "read sum mismatch");
  }
}

}  // namespace vramkit::probe::detail

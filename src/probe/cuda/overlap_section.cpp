// The overlap section: a memory-bound kernel, an H2D and a D2H copy, serial on one stream against
// concurrent on three; the ratio says how much of the copies hides behind the kernel.
#include <algorithm>
#include <cmath>

#include "common/cuda_check.hpp"
#include "gpu_probe_detail.hpp"
#include "vramkit/core/error.hpp"
#include "vramkit/core/units.hpp"

namespace vramkit::probe::detail {

void run_overlap_section(gpu_context& ctx) {
  ctx.progress("copy/compute overlap");
  const std::size_t copy_bytes = ctx.host_fit(ctx.quick() ? 64 * MiB : 256 * MiB, 2, 16 * MiB);
  if (copy_bytes == 0) {
    ctx.report->skips.push_back(
        {ctx.tag + ".overlap", "too little host memory available for two 16 MiB pinned buffers"});
    return;
  }
  const std::size_t kernel_bytes =
      std::min<std::size_t>(ctx.quick() ? 256 * MiB : GiB, ctx.free_bytes / 8) / MiB * MiB;
  const std::size_t cw = copy_bytes / 4, kw = kernel_bytes / 4;
  pinned_buffer h_src(copy_bytes, pinned_buffer::mapping::unmapped),
      h_dst(copy_bytes, pinned_buffer::mapping::unmapped);
  device_buffer d_dst(copy_bytes), d_src(copy_bytes), k_src(kernel_bytes), k_dst(kernel_bytes);
  owned_cuda_stream s0, s1, s2;
  stream_blocker blocker;
  owned_cuda_event e0, e1, e2, e3, go, j1, j2;
  const launch_config cfg = ctx.default_launch();
  const std::uint32_t hs = 0x0F0F1234u, ds = 0x0E0E5678u, ks = 0x0D0D9ABCu;
  parallel_fill(h_src.words(), cw, hs);
  VRAMKIT_CUDA_TRY(launch_fill(d_src.words(), cw, ds, cfg, s0.get()));
  VRAMKIT_CUDA_TRY(launch_fill(k_src.words(), kw, ks, cfg, s0.get()));
  VRAMKIT_CUDA_TRY(cudaStreamSynchronize(s0.get()));

  auto kernel = [&](cudaStream_t st, int reps) {
    for (int i = 0; i < reps; ++i)
      VRAMKIT_CUDA_TRY(launch_copy(k_dst.words(), k_src.words(), kw, cfg, st));
  };
  auto h2d = [&](cudaStream_t st) {
    VRAMKIT_CUDA_TRY(
        cudaMemcpyAsync(d_dst.get(), h_src.get(), copy_bytes, cudaMemcpyHostToDevice, st));
  };
  auto d2h = [&](cudaStream_t st) {
    VRAMKIT_CUDA_TRY(
        cudaMemcpyAsync(h_dst.get(), d_src.get(), copy_bytes, cudaMemcpyDeviceToHost, st));
  };
  // Calibrate: repeat the kernel so that it lasts about as long as one copy.
  const cudaStream_t a = s0.get();
  VRAMKIT_CUDA_TRY(cudaEventRecord(e0.get(), a));
  h2d(a);
  VRAMKIT_CUDA_TRY(cudaEventRecord(e1.get(), a));
  kernel(a, 1);
  VRAMKIT_CUDA_TRY(cudaEventRecord(e2.get(), a));
  VRAMKIT_CUDA_TRY(cudaEventSynchronize(e2.get()));
  const double copy_ms = elapsed_ms(e0.get(), e1.get()), k_ms = elapsed_ms(e1.get(), e2.get());
  const int reps = std::clamp(static_cast<int>(std::lround(copy_ms / std::max(k_ms, 1e-3))), 1, 64);

  const int samples = ctx.quick() ? 3 : 5;
  std::vector<double> serial, concurrent, kpart, hpart, dpart;
  for (int smp = 0; smp < samples; ++smp) {
    // Serial: kernel, H2D, D2H one after another on one stream.
    blocker.block(a);
    VRAMKIT_CUDA_TRY(cudaEventRecord(e0.get(), a));
    kernel(a, reps);
    VRAMKIT_CUDA_TRY(cudaEventRecord(e1.get(), a));
    h2d(a);
    VRAMKIT_CUDA_TRY(cudaEventRecord(e2.get(), a));
    d2h(a);
    VRAMKIT_CUDA_TRY(cudaEventRecord(e3.get(), a));
    blocker.release();
    VRAMKIT_CUDA_TRY(cudaStreamSynchronize(a));
    blocker.check();
    kpart.push_back(elapsed_ms(e0.get(), e1.get()));
    hpart.push_back(elapsed_ms(e1.get(), e2.get()));
    dpart.push_back(elapsed_ms(e2.get(), e3.get()));
    serial.push_back(elapsed_ms(e0.get(), e3.get()));
    // Concurrent: the same three on three streams, released together.
    blocker.block(a);
    VRAMKIT_CUDA_TRY(cudaEventRecord(go.get(), a));
    VRAMKIT_CUDA_TRY(cudaStreamWaitEvent(s1.get(), go.get(), 0));
    VRAMKIT_CUDA_TRY(cudaStreamWaitEvent(s2.get(), go.get(), 0));
    kernel(a, reps);
    h2d(s1.get());
    d2h(s2.get());
    VRAMKIT_CUDA_TRY(cudaEventRecord(j1.get(), s1.get()));
    VRAMKIT_CUDA_TRY(cudaEventRecord(j2.get(), s2.get()));
    VRAMKIT_CUDA_TRY(cudaStreamWaitEvent(a, j1.get(), 0));
    VRAMKIT_CUDA_TRY(cudaStreamWaitEvent(a, j2.get(), 0));
    VRAMKIT_CUDA_TRY(cudaEventRecord(e3.get(), a));
    blocker.release();
    VRAMKIT_CUDA_TRY(cudaStreamSynchronize(a));
    blocker.check();
    concurrent.push_back(elapsed_ms(go.get(), e3.get()));
  }
  std::uint64_t bad = device_mismatches(d_dst.words(), cw, hs, a);
  bad += device_mismatches(k_dst.words(), kw, ks, a);
  bad += parallel_mismatches(h_dst.words(), cw, ds);

  std::vector<double> ratios;
  ratios.reserve(static_cast<std::size_t>(samples));
  for (int i = 0; i < samples; ++i) ratios.push_back(serial[i] / concurrent[i]);
  auto m =
      make_measurement(ctx.key("overlap"), "overlap",
                       "copy/compute overlap: serial time / concurrent time (kernel + H2D + D2H)",
                       ctx.tag, "x", std::move(ratios));
  m.size_bytes = copy_bytes;
  auto med = [](std::vector<double> v) { return sample_stats::of(std::move(v)).median; };
  const double ks_ms = med(kpart), hs_ms = med(hpart), ds_ms = med(dpart);
  m.extra["kernel_ms"] = ks_ms;
  m.extra["h2d_ms"] = hs_ms;
  m.extra["d2h_ms"] = ds_ms;
  m.extra["serial_ms"] = med(serial);
  m.extra["concurrent_ms"] = med(concurrent);
  m.extra["ideal_ratio"] = med(serial) / std::max({ks_ms, hs_ms, ds_ms});
  m.extra["kernel_launches"] = reps;
  m.peak = m.extra["ideal_ratio"];
  m.peak_basis = "ideal: serial time / the longest of the three parts";
  m.note = "memory-bound copy kernel sized to last about as long as one copy; every output checked";
  add_verified(ctx, std::move(m), bad == 0, std::to_string(bad) + " words differ from the pattern");
}

}  // namespace vramkit::probe::detail

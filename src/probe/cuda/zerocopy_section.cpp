// The zero-copy section: a kernel reading and writing mapped pinned host memory.

#include "common/cuda_check.hpp"
#include "gpu_probe_detail.hpp"
#include "launch_tuning.hpp"
#include "vramkit/core/error.hpp"
#include "vramkit/core/units.hpp"

namespace vramkit::probe::detail {

void run_zerocopy_section(gpu_context& ctx) {
  if (!ctx.can_map_host) {
    ctx.report->skips.push_back({ctx.tag + ".zerocopy", "the device cannot map host memory"});
    return;
  }
  ctx.progress("zero-copy (kernel on mapped pinned host memory)");
  const std::size_t bytes = ctx.host_fit(ctx.quick() ? 128 * MiB : 512 * MiB, 1, 16 * MiB);
  if (bytes == 0) {
    ctx.report->skips.push_back(
        {ctx.tag + ".zerocopy", "too little host memory available for a 16 MiB mapped buffer"});
    return;
  }
  const std::size_t words = bytes / 4;
  pinned_buffer host(bytes, pinned_buffer::mapping::mapped);
  auto* dev = static_cast<std::uint32_t*>(host.device_ptr());
  device_buffer sum(sizeof(std::uint32_t));
  auto* sum_p = static_cast<std::uint32_t*>(sum.get());
  owned_cuda_stream stream;
  stream_blocker blocker;
  const cudaStream_t s = stream.get();
  const launch_config cfg = ctx.default_launch();
  const int samples = ctx.quick() ? 3 : 5, loops = 2, warmup = 1;
  const std::uint32_t seed = 0x2E20C0F1u;
  parallel_fill(host.words(), words, seed);

  // One direction's figure: against the PCIe peak, with how it was checked and the host
  // buffer's NUMA node.
  const auto add = [&](const std::string& key, const char* title, byte_convention convention,
                       const std::vector<double>& seconds, const char* check, bool ok,
                       const std::string& why) {
    auto m = bandwidth_measurement(ctx, key, "zerocopy", title, convention, bytes, double(bytes),
                                   seconds);
    m.peak = ctx.pcie_peak_gbps;
    m.peak_basis = ctx.pcie_peak_basis;
    m.note = std::string(check) + "; " + cfg_note(cfg);
    if (const int node = host_numa_node(host.get()); node >= 0) m.extra["host_numa_node"] = node;
    add_verified(ctx, std::move(m), ok, why);
  };
  VRAMKIT_CUDA_TRY(cudaMemsetAsync(sum_p, 0, sizeof(std::uint32_t), s));
  auto secs = time_blocked(blocker, s, samples, loops, warmup,
                           [&] { VRAMKIT_CUDA_TRY(launch_read(dev, words, sum_p, cfg, s)); });
  std::uint32_t got = 0;
  VRAMKIT_CUDA_TRY(cudaMemcpy(&got, sum_p, sizeof got, cudaMemcpyDeviceToHost));
  const std::uint32_t want =
      pattern_sum(words, seed) * static_cast<std::uint32_t>(blocked_calls(samples, loops, warmup));
  add(ctx.key("zerocopy.read"), "kernel reading mapped pinned host memory", byte_convention::read,
      secs, "sum of all words checked against the pattern", got == want, "read sum mismatch");
  const std::uint32_t seed_w = seed + 99;
  secs = time_blocked(blocker, s, samples, loops, warmup,
                      [&] { VRAMKIT_CUDA_TRY(launch_fill(dev, words, seed_w, cfg, s)); });
  const std::uint64_t bad = parallel_mismatches(host.words(), words, seed_w);
  add(ctx.key("zerocopy.write"), "kernel writing mapped pinned host memory",
      byte_convention::written, secs, "host buffer checked word by word by the CPU", bad == 0,
      mismatch_text(bad, words));
}

}  // namespace vramkit::probe::detail

// The all-GPUs section: H2D and D2H with every GPU copying at the same time, each GPU from its own
// pinned buffer, against each GPU alone; the aggregate and per-GPU rates say whether the host
// side (root complex, memory, a shared switch) or each link is the limit. On one GPU it says so.
#include <algorithm>
#include <chrono>
#include <memory>
#include <vector>

#include "common/cuda_check.hpp"
#include "gpu_probe_detail.hpp"
#include "vramkit/core/error.hpp"

namespace vramkit::probe::detail {
namespace {

constexpr std::size_t MiB = std::size_t{1} << 20;

// One GPU's share: a device buffer, a pinned host buffer, a stream and two events, all of that
// GPU (created while it is current).
struct lane {
  int device = 0;
  std::unique_ptr<device_buffer> dev;
  std::unique_ptr<pinned_buffer> host;
  std::unique_ptr<owned_cuda_stream> stream;
  std::unique_ptr<owned_cuda_event> start, stop;
};

// The aggregate figure of one direction: every GPU's bytes over the host-clock seconds of each
// sample, with each GPU's rate together and alone in extra.
measurement all_at_once_measurement(bool h2d, std::size_t bytes, int loops, int samples,
                                    const std::vector<lane>& lanes,
                                    const std::vector<double>& total,
                                    const std::vector<std::vector<double>>& each,
                                    const std::vector<double>& alone) {
  const double all_bytes = double(bytes) * loops * double(lanes.size());
  measurement m;
  m.key = registered_key(h2d ? "gpus.h2d.all_at_once" : "gpus.d2h.all_at_once");
  m.title = std::string(h2d ? "host to device" : "device to host") + ", every GPU at once, summed";
  m.device = "gpus";
  m.unit = "GB/s";
  m.convention = byte_convention::copied_once;
  m.size_bytes = bytes;
  m.repetitions = samples;
  for (double sec : total) m.samples.push_back(gbps(all_bytes, sec));
  m.stats = sample_stats::of(m.samples);
  double alone_sum = 0;
  for (std::size_t i = 0; i < lanes.size(); ++i) {
    const std::string g = "gpu" + std::to_string(lanes[i].device);
    m.extra[g + "_together_gbps"] = sample_stats::of(each[i]).median;
    m.extra[g + "_alone_gbps"] = alone[i];
    alone_sum += alone[i];
  }
  m.extra["gpus"] = double(lanes.size());
  m.extra["sum_alone_gbps"] = alone_sum;
  if (alone_sum > 0) m.extra["ratio_to_sum_alone"] = m.stats.median / alone_sum;
  m.note =
      "pinned cudaMemcpyAsync on every GPU at once; aggregate by the host clock, per GPU by "
      "its events; every destination checked word by word";
  return m;
}

}  // namespace

void run_all_gpus_section(gpu_context& ctx) {
  if (ctx.device_count < 2) {
    for (const char* k : {"gpus.h2d.all_at_once", "gpus.d2h.all_at_once"})
      ctx.report->skips.push_back({k, "one GPU: nothing copies alongside it"});
    return;
  }
  ctx.progress("every GPU copying at once");
  const std::size_t bytes =
      ctx.host_fit(ctx.quick() ? 64 * MiB : 256 * MiB, ctx.device_count, 16 * MiB);
  if (bytes == 0) {
    for (const char* k : {"gpus.h2d.all_at_once", "gpus.d2h.all_at_once"})
      ctx.report->skips.push_back(
          {k, "too little host memory available for a pinned buffer per GPU"});
    return;
  }
  const std::size_t words = bytes / 4;
  const int loops = ctx.quick() ? 4 : 8, samples = ctx.quick() ? 3 : 5;
  std::vector<lane> lanes;
  for (int d = 0; d < ctx.device_count; ++d) {
    VRAMKIT_CUDA_TRY(cudaSetDevice(d));
    lane l;
    l.device = d;
    l.dev = std::make_unique<device_buffer>(bytes);
    l.host = std::make_unique<pinned_buffer>(bytes, pinned_buffer::mapping::unmapped);
    l.stream = std::make_unique<owned_cuda_stream>();
    l.start = std::make_unique<owned_cuda_event>();
    l.stop = std::make_unique<owned_cuda_event>();
    lanes.push_back(std::move(l));
  }
  for (int dir = 0; dir < 2; ++dir) {
    const bool h2d = dir == 0;
    const std::uint32_t seed = h2d ? 0xA11A0000u : 0xA11B0000u;
    for (auto& l : lanes) {
      VRAMKIT_CUDA_TRY(cudaSetDevice(l.device));
      const std::uint32_t sd = seed + static_cast<std::uint32_t>(l.device);
      if (h2d) {
        parallel_fill(l.host->words(), words, sd);
        VRAMKIT_CUDA_TRY(cudaMemset(l.dev->get(), 0, bytes));
      } else {
        VRAMKIT_CUDA_TRY(launch_fill(l.dev->words(), words, sd, ctx.default_launch(), nullptr));
        VRAMKIT_CUDA_TRY(cudaDeviceSynchronize());
      }
    }
    auto enqueue = [&](lane& l) {
      VRAMKIT_CUDA_TRY(cudaSetDevice(l.device));
      const cudaStream_t s = l.stream->get();
      VRAMKIT_CUDA_TRY(cudaEventRecord(l.start->get(), s));
      for (int i = 0; i < loops; ++i) {
        if (h2d)
          VRAMKIT_CUDA_TRY(
              cudaMemcpyAsync(l.dev->get(), l.host->get(), bytes, cudaMemcpyHostToDevice, s));
        else
          VRAMKIT_CUDA_TRY(
              cudaMemcpyAsync(l.host->get(), l.dev->get(), bytes, cudaMemcpyDeviceToHost, s));
      }
      VRAMKIT_CUDA_TRY(cudaEventRecord(l.stop->get(), s));
    };
    auto finish = [&](lane& l) {
      VRAMKIT_CUDA_TRY(cudaSetDevice(l.device));
      VRAMKIT_CUDA_TRY(cudaStreamSynchronize(l.stream->get()));
    };
    // Alone: one GPU at a time, timed by its own events.
    std::vector<double> alone;
    for (auto& l : lanes) {
      std::vector<double> g;
      for (int smp = 0; smp < samples; ++smp) {
        enqueue(l);
        finish(l);
        g.push_back(gbps(double(bytes) * loops, elapsed_ms(l.start->get(), l.stop->get()) / 1e3));
      }
      alone.push_back(sample_stats::of(g).median);
    }
    // Together: all enqueued back to back, the aggregate over the host clock from the first
    // enqueue to the last completion (events of different GPUs cannot be subtracted).
    std::vector<double> total;
    std::vector<std::vector<double>> each(lanes.size());
    for (int smp = 0; smp < samples; ++smp) {
      for (auto& l : lanes) finish(l);
      const auto t0 = std::chrono::steady_clock::now();
      for (auto& l : lanes) enqueue(l);
      for (auto& l : lanes) finish(l);
      const double sec =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      total.push_back(sec);
      for (std::size_t i = 0; i < lanes.size(); ++i)
        each[i].push_back(gbps(double(bytes) * loops,
                               elapsed_ms(lanes[i].start->get(), lanes[i].stop->get()) / 1e3));
    }
    std::uint64_t bad = 0;
    for (auto& l : lanes) {
      VRAMKIT_CUDA_TRY(cudaSetDevice(l.device));
      const std::uint32_t sd = seed + static_cast<std::uint32_t>(l.device);
      bad += h2d ? device_mismatches(l.dev->words(), words, sd, l.stream->get())
                 : parallel_mismatches(l.host->words(), words, sd);
    }
    VRAMKIT_CUDA_TRY(cudaSetDevice(ctx.ordinal));
    measurement m = all_at_once_measurement(h2d, bytes, loops, samples, lanes, total, each, alone);
    add_verified(ctx, std::move(m), bad == 0, std::to_string(bad) + " words differ");
  }
}

}  // namespace vramkit::probe::detail

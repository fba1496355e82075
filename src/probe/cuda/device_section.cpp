// The device-memory section: read, write and copy kernels (each at the fastest verified launch
// shape of a short trial) and cudaMemcpy device-to-device, over buffers several times the L2.
#include <algorithm>

#include "common/cuda_check.hpp"
#include "gpu_probe_detail.hpp"
#include "launch_tuning.hpp"
#include "vramkit/core/error.hpp"

namespace vramkit::probe::detail {
namespace {
constexpr std::size_t MiB = std::size_t{1} << 20;
constexpr std::size_t GiB = std::size_t{1} << 30;

// Buffers a (pattern seed_a) and b, the stream and the timing settings shared by the four tests,
// which run in order: read a, write b, copy a -> b, cudaMemcpy a -> b.
struct device_run {
  device_run(gpu_context& c, std::size_t n)
      : ctx(c), bytes(n), words(n / 4), a(n), b(n), sum(sizeof(std::uint32_t)) {}

  gpu_context& ctx;
  std::size_t bytes, words;
  device_buffer a, b, sum;
  owned_cuda_stream stream;
  stream_blocker blocker;
  const std::uint32_t seed_a = 0x1234567u, seed_b = 0x89ABCDEu, seed_w = 0x1234567u + 1;
  const launch_config def = ctx.default_launch();
  const int samples = ctx.quick() ? 10 : 20;
  const int loops = ctx.quick() ? 5 : 10;
  const int warmup = 2;

  [[nodiscard]] cudaStream_t s() const { return stream.get(); }
  [[nodiscard]] std::uint32_t* sum_p() const { return static_cast<std::uint32_t*>(sum.get()); }
  void clear_b() const { VRAMKIT_CUDA_TRY(cudaMemsetAsync(b.get(), 0, bytes, s())); }
  void fill_b_stale() const { VRAMKIT_CUDA_TRY(launch_fill(b.words(), words, seed_b, def, s())); }

  // A kernel figure against the device memory peak, with its launch shape and trial.
  measurement kernel_measurement(const char* key, const char* title, byte_convention conv,
                                 double bytes_per_op, const std::vector<double>& secs,
                                 const launch_config& cfg, const tune_result& trial) const {
    auto m =
        bandwidth_measurement(ctx, ctx.key(key), "device", title, conv, bytes, bytes_per_op, secs);
    m.peak = ctx.hbm_peak_gbps;
    m.peak_basis = ctx.hbm_peak_basis;
    put_cfg(m, cfg);
    put_trial(m, trial, bytes_per_op);
    m.extra["ops_per_sample"] = loops;
    return m;
  }

  // Read: the kernel sums every word; the sum must match the pattern's closed form.
  void read() {
    auto read_sum = [&] {
      std::uint32_t v = 0;
      VRAMKIT_CUDA_TRY(cudaMemcpyAsync(&v, sum_p(), sizeof v, cudaMemcpyDeviceToHost, s()));
      VRAMKIT_CUDA_TRY(cudaStreamSynchronize(s()));
      return v;
    };
    const tune_result rt = tune(
        ctx, s(), words / 4, true, 0,
        [&] { VRAMKIT_CUDA_TRY(cudaMemsetAsync(sum_p(), 0, sizeof(std::uint32_t), s())); },
        [&](const launch_config& c) {
          VRAMKIT_CUDA_TRY(launch_read(a.words(), words, sum_p(), c, s()));
        },
        [&](int runs) {
          return read_sum() == pattern_sum(words, seed_a) * static_cast<std::uint32_t>(runs);
        });
    const launch_config& rc = rt.best;
    ctx.tuned_read = rc;
    VRAMKIT_CUDA_TRY(cudaMemsetAsync(sum_p(), 0, sizeof(std::uint32_t), s()));
    const auto secs = time_blocked(blocker, s(), samples, loops, warmup, [&] {
      VRAMKIT_CUDA_TRY(launch_read(a.words(), words, sum_p(), rc, s()));
    });
    std::uint32_t got = 0;
    VRAMKIT_CUDA_TRY(cudaMemcpy(&got, sum_p(), sizeof got, cudaMemcpyDeviceToHost));
    const auto launches = static_cast<std::uint32_t>(blocked_calls(samples, loops, warmup));
    const std::uint32_t want = pattern_sum(words, seed_a) * launches;
    auto m = kernel_measurement("device.read", "device memory read (kernel, 16-byte loads)",
                                byte_convention::read, double(bytes), secs, rc, rt);
    m.note = "sum of all words checked against the pattern; " + cfg_note(rc) +
             " (fastest of a short trial of launch shapes)";
    add_verified(ctx, std::move(m), got == want,
                 "read sum " + std::to_string(got) + " != " + std::to_string(want));
  }

  // Write: the kernel writes pattern seed_w over b (which held seed_b).
  void write() {
    const tune_result wt = tune(
        ctx, s(), words / 4, false, 1, [&] { clear_b(); },
        [&](const launch_config& c) {
          VRAMKIT_CUDA_TRY(launch_fill(b.words(), words, seed_w, c, s()));
        },
        [&](int) { return device_mismatches(b.words(), words, seed_w, s()) == 0; });
    const launch_config& wc = wt.best;
    ctx.tuned_write = wc;
    fill_b_stale();
    const auto secs = time_blocked(blocker, s(), samples, loops, warmup, [&] {
      VRAMKIT_CUDA_TRY(launch_fill(b.words(), words, seed_w, wc, s()));
    });
    const std::uint64_t bad = device_mismatches(b.words(), words, seed_w, s());
    auto m = kernel_measurement("device.write", "device memory write (kernel, 16-byte stores)",
                                byte_convention::written, double(bytes), secs, wc, wt);
    m.note = "every word checked against the pattern; " + cfg_note(wc);
    add_verified(ctx, std::move(m), bad == 0, mismatch_text(bad, words));
  }

  // Copy kernel a -> b (b holds seed_w, a holds seed_a).
  void copy() {
    const tune_result ct = tune(
        ctx, s(), words / 4, true, 2, [&] { clear_b(); },
        [&](const launch_config& c) {
          VRAMKIT_CUDA_TRY(launch_copy(b.words(), a.words(), words, c, s()));
        },
        [&](int) { return device_mismatches(b.words(), words, seed_a, s()) == 0; });
    const launch_config& cc = ct.best;
    fill_b_stale();
    const auto secs = time_blocked(blocker, s(), samples, loops, warmup, [&] {
      VRAMKIT_CUDA_TRY(launch_copy(b.words(), a.words(), words, cc, s()));
    });
    const std::uint64_t bad = device_mismatches(b.words(), words, seed_a, s());
    auto m =
        kernel_measurement("device.copy", "device memory copy (kernel, 16-byte accesses)",
                           byte_convention::read_plus_written, 2.0 * double(bytes), secs, cc, ct);
    m.extra["copied_once_gbps"] = m.stats.median / 2;
    m.note =
        "read + written (copied once = half, in extra copied_once_gbps, comparable with "
        "cudaMemcpy); destination checked word by word; " +
        cfg_note(cc);
    add_verified(ctx, std::move(m), bad == 0, mismatch_text(bad, words));
  }

  // cudaMemcpy device-to-device a -> b.
  void memcpy_d2d() {
    fill_b_stale();
    const auto secs = time_blocked(blocker, s(), samples, loops, warmup, [&] {
      VRAMKIT_CUDA_TRY(cudaMemcpyAsync(b.get(), a.get(), bytes, cudaMemcpyDeviceToDevice, s()));
    });
    const std::uint64_t bad = device_mismatches(b.words(), words, seed_a, s());
    auto m = bandwidth_measurement(ctx, ctx.key("device.memcpy"), "device",
                                   "cudaMemcpy device-to-device", byte_convention::copied_once,
                                   bytes, double(bytes), secs);
    if (ctx.hbm_peak_gbps) {
      m.peak = *ctx.hbm_peak_gbps / 2;
      m.peak_basis =
          "half of the device memory peak (each byte is read and written): " + ctx.hbm_peak_basis;
    }
    m.extra["read_plus_written_gbps"] = m.stats.median * 2;
    m.note = "copied once (read + written = twice, in extra); destination checked word by word";
    m.extra["ops_per_sample"] = loops;
    add_verified(ctx, std::move(m), bad == 0, mismatch_text(bad, words));
  }
};

}  // namespace

void run_device_section(gpu_context& ctx) {
  ctx.progress("device memory read/write/copy");
  // Several times L2 so every pass streams from device memory; both buffers within a third of
  // free memory.
  std::size_t bytes = ctx.quick() ? 512 * MiB : 2 * GiB;
  bytes = std::max<std::size_t>(bytes, 8 * ctx.l2_bytes);
  bytes = std::min<std::size_t>(bytes, ctx.free_bytes / 3) / MiB * MiB;
  if (bytes < 64 * MiB) {
    ctx.report->skips.push_back({ctx.tag + ".device", "not enough free device memory"});
    return;
  }
  device_run run(ctx, bytes);
  VRAMKIT_CUDA_TRY(launch_fill(run.a.words(), run.words, run.seed_a, run.def, run.s()));
  run.fill_b_stale();
  run.read();
  run.write();
  run.copy();
  run.memcpy_d2d();
}

}  // namespace vramkit::probe::detail

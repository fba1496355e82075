// The GPU cache-level section: read bandwidth over the working set, from 16 KiB to 4x the L2,
// each set read again and again while it stays resident (gpu-benches' cache sweeps). Up to the L2
// size every block streams the whole set, from its own starting point, so each multiprocessor's
// L1 sees all of it; past the L2 the blocks share the set (each byte read once per pass, from
// device memory). The plateaus of the curve are the L1/shared, L2 and device-memory levels, with
// where each ends. Every launch's sum is checked against the pattern.
#include <algorithm>
#include <cmath>

#include "common/cuda_check.hpp"
#include "gpu_probe_detail.hpp"
#include "pattern_kernels.hpp"
#include "vramkit/core/error.hpp"
#include "vramkit/probe/detail/bandwidth_plateaus.hpp"

namespace vramkit::probe::detail {
namespace {

constexpr std::size_t KiB = std::size_t{1} << 10;
constexpr std::size_t MiB = std::size_t{1} << 20;

std::vector<std::size_t> cache_sizes(std::size_t max_ws, std::size_t l2, bool quick) {
  std::vector<std::size_t> out;
  for (std::size_t p = 16 * KiB; p <= max_ws; p *= 2) {
    out.push_back(p);
    // Half steps where they matter: everywhere in a full run, around the L2 in a quick one.
    const std::size_t mid = p + p / 2;
    if (mid <= max_ws && (!quick || (mid >= l2 / 4 && mid <= 2 * l2))) out.push_back(mid);
  }
  // Eighths of the L2 from half to one and a half L2: where the curve leaves the L2 plateau.
  for (std::size_t k = 4; k <= 12; ++k) {
    const std::size_t ws = l2 / 8 * k / 256 * 256;
    if (ws >= 16 * KiB && ws <= max_ws) out.push_back(ws);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

}  // namespace

void run_cache_section(gpu_context& ctx) {
  if (ctx.l2_bytes == 0) {
    ctx.report->skips.push_back({ctx.tag + ".cache", "the device reports no L2 size"});
    return;
  }
  ctx.progress("cache levels (read bandwidth over a resident working set)");
  std::size_t max_ws = std::max<std::size_t>(4 * ctx.l2_bytes, 64 * MiB);
  while (max_ws > 64 * MiB && max_ws > ctx.free_bytes / 4) max_ws /= 2;
  max_ws = max_ws / (16 * KiB) * (16 * KiB);
  device_buffer buf(max_ws), sum(sizeof(std::uint32_t));
  auto* sum_p = static_cast<std::uint32_t*>(sum.get());
  owned_cuda_stream stream;
  stream_blocker blocker;
  const cudaStream_t s = stream.get();
  const std::uint32_t seed = 0xCAC4E001u;
  const launch_config cfg = ctx.default_launch();
  VRAMKIT_CUDA_TRY(launch_fill(buf.words(), max_ws / 4, seed, cfg, s));
  // Bytes read per launch: enough that a launch of the smallest sets lasts tens of microseconds.
  const double target = ctx.quick() ? 2048.0 * MiB : 4096.0 * MiB;
  const int samples = ctx.quick() ? 3 : 5, loops = ctx.quick() ? 2 : 3, warmup = 1;

  curve c;
  c.key = ctx.key("cache.sweep");
  c.title = "read bandwidth over a resident working set, " + ctx.tag + " (16-byte loads)";
  c.x_label = "bytes";
  c.y_unit = "GB/s";
  for (std::size_t ws : cache_sizes(max_ws, ctx.l2_bytes, ctx.quick())) {
    const bool whole = ws <= ctx.l2_bytes;
    const double per_rep = whole ? double(cfg.blocks) * ws : double(ws);
    const int reps = static_cast<int>(std::clamp(target / per_rep, 1.0, 1e5));
    VRAMKIT_CUDA_TRY(cudaMemsetAsync(sum_p, 0, sizeof(std::uint32_t), s));
    const auto secs = time_blocked(blocker, s, samples, loops, warmup, [&] {
      VRAMKIT_CUDA_TRY(launch_resident_read(buf.words(), ws / 16, reps, whole, sum_p, cfg, s));
    });
    std::uint32_t got = 0;
    VRAMKIT_CUDA_TRY(cudaMemcpy(&got, sum_p, sizeof got, cudaMemcpyDeviceToHost));
    const auto per_launch = static_cast<std::uint32_t>(reps) *
                            static_cast<std::uint32_t>(whole ? cfg.blocks : 1) *
                            pattern_sum(ws / 4, seed);
    const auto want = per_launch * static_cast<std::uint32_t>(samples * (loops + warmup));
    if (got != want) {
      ctx.report->skips.push_back({c.key,
                                   "verification failed, curve withheld: read sum mismatch at " +
                                       std::to_string(ws) + " bytes",
                                   true});
      return;
    }
    curve::point pt;
    pt.x = double(ws);
    for (double t : secs) pt.samples.push_back(gbps(per_rep * reps, t));
    pt.y = sample_stats::of(pt.samples);
    c.points.push_back(std::move(pt));
  }

  auto plateaus = find_bandwidth_plateaus(c.points);
  name_gpu_cache_plateaus(plateaus, c.points, ctx.l2_bytes);
  const bandwidth_plateau* near = nullptr;
  for (const auto& p : plateaus)
    if (p.name == "L2 near") near = &p;
  for (const auto& p : plateaus) {
    if (p.name != "L1" && p.name != "L2" && p.name != "HBM") continue;
    const auto& mid = c.points[(p.first + p.last) / 2];
    measurement m;
    m.key = ctx.key(p.name == "L1" ? "cache.l1" : p.name == "L2" ? "cache.l2" : "cache.hbm");
    m.title = p.name + " read bandwidth (cache sweep plateau), " + ctx.tag;
    m.device = ctx.tag;
    m.unit = "GB/s";
    m.convention = byte_convention::read;
    m.size_bytes = static_cast<std::uint64_t>(mid.x);
    m.samples = mid.samples;
    m.repetitions = static_cast<int>(mid.samples.size());
    m.stats = mid.y;
    m.extra["plateau_gbps"] = p.bandwidth;
    m.extra["plateau_first_bytes"] = c.points[p.first].x;
    m.extra["plateau_last_bytes"] = c.points[p.last].x;
    if (p.end_x > 0) m.extra["measured_size_bytes"] = p.end_x;
    if (p.name == "L2") {
      m.extra["reported_size_bytes"] = double(ctx.l2_bytes);
      if (p.end_x > 0) m.extra["size_ratio_to_reported"] = p.end_x / double(ctx.l2_bytes);
      if (near != nullptr) {
        m.extra["near_plateau_gbps"] = near->bandwidth;
        m.extra["near_plateau_end_bytes"] = near->end_x;
      }
    }
    if (p.name == "HBM") {
      m.peak = ctx.hbm_peak_gbps;
      m.peak_basis = ctx.hbm_peak_basis;
    }
    m.note =
        "the median point of the plateau; its size is where the curve falls halfway to the "
        "next plateau; every launch's sum checked against the pattern";
    add_verified(ctx, std::move(m), true, "");
  }
  if (std::none_of(plateaus.begin(), plateaus.end(),
                   [](const bandwidth_plateau& p) { return p.name == "L2"; })) {
    ctx.report->skips.push_back({ctx.tag + ".cache.l2", "no L2 plateau found on the curve"});
  }
  add_curve(ctx, std::move(c));
}

}  // namespace vramkit::probe::detail

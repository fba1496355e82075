// The GPU cache-level section: read bandwidth over the working set, each set read again and again
// while it stays resident (gpu-benches' cache sweeps), in two sweeps.
// - cache.sweep, 16 KiB to half the L2: one block per multiprocessor reads the whole set through
//   L1, so each multiprocessor's L1 holds it or not: the L1/shared level and where it ends.
// - cache.l2_sweep, an eighth of the L2 to 4x: the grid reads the set once a pass, L1 bypassed, so
//   a line is read again only after every other one was and hits only while the L2 holds the whole
//   set: the L2 level, its size, and device memory. (With every block reading the whole set past
//   the L2, blocks trailing each other re-read what one just fetched and the L2 answers far past
//   its size: 88 MiB for the H200's 60 MiB in the run of 2026-12-01.)
// Before the sweeps, reads until the clocks have settled; each sweep reads its sizes in passes up
// and down and pools them. The plateaus of the curves are the levels, with where each ends
// (bandwidth_plateaus.hpp); a level not found is skipped with the reason. Every launch's sum is
// checked.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <string>
#include <vector>

#include "common/cuda_check.hpp"
#include "gpu_probe_detail.hpp"
#include "pattern_kernels.hpp"
#include "vramkit/core/error.hpp"
#include "vramkit/core/units.hpp"
#include "vramkit/probe/detail/bandwidth_plateaus.hpp"

namespace vramkit::probe::detail {
namespace {

void add_size(std::vector<std::size_t>& out, std::size_t ws, std::size_t max_ws) {
  ws = ws / (16 * KiB) * (16 * KiB);
  if (ws >= 16 * KiB && ws <= max_ws) out.push_back(ws);
}

void sort_unique(std::vector<std::size_t>& v) {
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
}

// Powers of two and half steps from 16 KiB to half the L2 (quick: half steps up to 1 MiB only).
std::vector<std::size_t> l1_sizes(std::size_t l2, std::size_t max_ws, bool quick) {
  std::vector<std::size_t> out;
  const std::size_t top = std::max<std::size_t>(l2 / 2, 64 * KiB);
  for (std::size_t p = 16 * KiB; p <= top; p *= 2) {
    add_size(out, p, max_ws);
    if (!quick || p < MiB) add_size(out, p + p / 2, std::min(top, max_ws));
  }
  sort_unique(out);
  return out;
}

// Eighths of the L2 from an eighth to twice it, then 3x and 4x; a full run adds sixteenths from
// half to one and a half L2 and thirty-seconds from 7/8 to 9/8, where the curve leaves the L2.
std::vector<std::size_t> l2_sizes(std::size_t l2, std::size_t max_ws, bool quick) {
  std::vector<std::size_t> out;
  for (std::size_t k = 1; k <= 16; ++k) add_size(out, l2 / 8 * k, max_ws);
  add_size(out, 3 * l2, max_ws);
  add_size(out, 4 * l2, max_ws);
  if (!quick) {
    for (std::size_t k = 8; k <= 24; ++k) add_size(out, l2 / 16 * k, max_ws);
    for (std::size_t k = 28; k <= 36; ++k) add_size(out, l2 / 32 * k, max_ws);
  }
  sort_unique(out);
  return out;
}

// What one launch of `mode` over `ws` bytes, `reps` times, adds to its sum (resident_read).
std::uint32_t launch_sum(std::size_t ws, int reps, resident_read mode, const launch_config& cfg,
                         std::uint32_t seed) {
  const bool whole = mode == resident_read::every_block_whole_set;
  return static_cast<std::uint32_t>(reps) * static_cast<std::uint32_t>(whole ? cfg.blocks : 1) *
         pattern_sum(ws / 4, seed);
}

// How long clocks took to settle before the sweeps (clock_warm_up).
struct warm_up {
  int rounds = 0;
  bool steady = false;
  double seconds = 0;  ///< device time spent reading
};

// Reads an L2-resident set (half the L2, L1 bypassed) and a device-memory set (`hbm_ws`) in
// rounds of about a millisecond each until both rates hold still (at least ten rounds, the last
// five of each within 2%), or `cap_s` of device time has passed. A GPU that was idle runs its
// clocks up under load over tens of milliseconds; a sweep timed during that climb reads the climb,
// not the levels (a quick sweep lasts tens of milliseconds too). Throws on a read sum mismatch.
warm_up clock_warm_up(const device_buffer& buf, std::uint32_t seed, std::size_t l2_ws,
                      std::size_t hbm_ws, const launch_config& cfg, double cap_s) {
  device_buffer sum(sizeof(std::uint32_t));
  auto* sum_p = static_cast<std::uint32_t*>(sum.get());
  owned_cuda_stream stream;
  owned_cuda_event start, stop;
  const cudaStream_t s = stream.get();
  VRAMKIT_CUDA_TRY(cudaMemsetAsync(sum_p, 0, sizeof(std::uint32_t), s));
  constexpr auto mode = resident_read::grid_once_l2_only;
  const std::array<std::size_t, 2> sets = {l2_ws, hbm_ws};
  // About a millisecond a round at the H200's L2 (~9 TB/s) and HBM (~4.7 TB/s) rates.
  const std::array<int, 2> reps = {
      std::max(1, static_cast<int>(8.0 * 1024 * MiB / double(l2_ws))),
      std::max(1, static_cast<int>(4.0 * 1024 * MiB / double(hbm_ws)))};
  std::array<std::vector<double>, 2> rates;
  warm_up w;
  std::uint32_t want = 0;
  auto still = [](const std::vector<double>& r) {
    if (r.size() < 10) return false;
    const auto [lo, hi] = std::minmax_element(r.end() - 5, r.end());
    return *hi <= 1.02 * *lo;
  };
  while (w.seconds < cap_s && !(still(rates[0]) && still(rates[1]))) {
    for (std::size_t k = 0; k < 2; ++k) {
      VRAMKIT_CUDA_TRY(cudaEventRecord(start.get(), s));
      VRAMKIT_CUDA_TRY(
          launch_resident_read(buf.words(), sets[k] / 16, reps[k], mode, sum_p, cfg, s));
      VRAMKIT_CUDA_TRY(cudaEventRecord(stop.get(), s));
      VRAMKIT_CUDA_TRY(cudaStreamSynchronize(s));
      const double secs = elapsed_ms(start.get(), stop.get()) / 1e3;
      rates[k].push_back(gbps(double(sets[k]) * reps[k], secs));
      w.seconds += secs;
      want += launch_sum(sets[k], reps[k], mode, cfg, seed);
    }
    ++w.rounds;
  }
  w.steady = still(rates[0]) && still(rates[1]);
  std::uint32_t got = 0;
  VRAMKIT_CUDA_TRY(cudaMemcpy(&got, sum_p, sizeof got, cudaMemcpyDeviceToHost));
  if (got != want)
    throw vramkit::error("verification failed: read sum mismatch in the clock warm-up");
  return w;
}

// One sweep: bandwidth at every size in `mode`, each launch's sum checked. The sizes are read in
// `passes` passes, ascending then descending in turn, and each point pools its samples over all
// passes, so a drift in the GPU's state during the sweep spreads over every size instead of
// tilting the curve. False (with a failed skip) on a mismatch.
bool sweep(gpu_context& ctx, const device_buffer& buf, std::uint32_t seed,
           const std::vector<std::size_t>& sizes, resident_read mode, const launch_config& cfg,
           curve& c) {
  device_buffer sum(sizeof(std::uint32_t));
  auto* sum_p = static_cast<std::uint32_t*>(sum.get());
  owned_cuda_stream stream;
  stream_blocker blocker;
  const cudaStream_t s = stream.get();
  // Bytes read per launch: enough that a launch of the smallest sets lasts tens of microseconds.
  const double target = ctx.quick() ? 2048.0 * MiB : 4096.0 * MiB;
  const int passes = 3, samples = ctx.quick() ? 2 : 3, loops = ctx.quick() ? 2 : 3, warmup = 1;
  const bool whole = mode == resident_read::every_block_whole_set;
  std::vector<curve::point> pts(sizes.size());
  for (int pass = 0; pass < passes; ++pass) {
    for (std::size_t n = 0; n < sizes.size(); ++n) {
      const std::size_t i = pass % 2 == 0 ? n : sizes.size() - 1 - n;
      const std::size_t ws = sizes[i];
      const auto set = static_cast<double>(ws);
      const double per_rep = whole ? cfg.blocks * set : set;
      const int reps = static_cast<int>(std::clamp(target / per_rep, 1.0, 1e5));
      VRAMKIT_CUDA_TRY(cudaMemsetAsync(sum_p, 0, sizeof(std::uint32_t), s));
      const auto secs = time_blocked(blocker, s, samples, loops, warmup, [&] {
        VRAMKIT_CUDA_TRY(launch_resident_read(buf.words(), ws / 16, reps, mode, sum_p, cfg, s));
      });
      std::uint32_t got = 0;
      VRAMKIT_CUDA_TRY(cudaMemcpy(&got, sum_p, sizeof got, cudaMemcpyDeviceToHost));
      const auto want = launch_sum(ws, reps, mode, cfg, seed) *
                        static_cast<std::uint32_t>(blocked_calls(samples, loops, warmup));
      if (got != want) {
        ctx.report->skips.push_back({c.key,
                                     "verification failed, curve withheld: read sum mismatch at " +
                                         std::to_string(ws) + " bytes",
                                     true});
        return false;
      }
      pts[i].x = double(ws);
      for (double t : secs) pts[i].samples.push_back(gbps(per_rep * reps, t));
    }
  }
  for (auto& pt : pts) {
    pt.y = sample_stats::of(pt.samples);
    c.points.push_back(std::move(pt));
  }
  return true;
}

curve cache_curve(const gpu_context& ctx, const char* suffix, const std::string& title) {
  curve c;
  c.key = ctx.key(suffix);
  c.title = title;
  c.x_label = "bytes";
  c.y_unit = "GB/s";
  return c;
}

// The measurement of a level: a cache at the middle of its plateau, device memory at its largest
// set (nearer sets still hit the L2 in part).
void add_level(gpu_context& ctx, const curve& c, const bandwidth_plateau& p, const char* how,
               const std::string& warm_note) {
  const auto& mid = c.points[p.name == "HBM" ? p.last : (p.first + p.last) / 2];
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
  }
  if (p.name == "HBM") {
    m.peak = ctx.hbm_peak_gbps;
    m.peak_basis = ctx.hbm_peak_basis;
  }
  m.note = std::string(p.name == "HBM" ? "the plateau's largest working set"
                                       : "the plateau's middle point") +
           "; " + how +
           "; a level's size is where the curve first falls below 88% of the plateau "
           "(log-interpolated); every launch's sum checked against the pattern; " +
           warm_note;
  add_verified(ctx, std::move(m), true, "");
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
  device_buffer buf(max_ws);
  const std::uint32_t seed = 0xCAC4E001u;
  const launch_config grid = ctx.default_launch();
  {
    owned_cuda_stream s;
    VRAMKIT_CUDA_TRY(launch_fill(buf.words(), max_ws / 4, seed, grid, s.get()));
    VRAMKIT_CUDA_TRY(cudaStreamSynchronize(s.get()));
  }
  // One block per multiprocessor with as many threads as the full-occupancy launch gives it.
  launch_config per_sm = grid;
  per_sm.blocks = ctx.sm_count;
  per_sm.threads =
      std::clamp(grid.threads * std::max(1, grid.blocks / std::max(1, ctx.sm_count)), 32, 1024) /
      32 * 32;

  const warm_up w = clock_warm_up(buf, seed, ctx.l2_bytes / 2 / (16 * KiB) * (16 * KiB), max_ws,
                                  grid, ctx.quick() ? 0.25 : 0.5);
  const std::string warm_note = fmt::format(
      "clock warm-up before the sweeps: {} rounds, {:.0f} ms, {}", w.rounds, w.seconds * 1e3,
      w.steady ? "rates steady (last five within 2%)" : "rates still moving at the cap");
  curve l1 = cache_curve(ctx, "cache.sweep",
                         "read bandwidth over a resident working set, " + ctx.tag +
                             " (one block per multiprocessor reads all of it through L1)");
  curve l2 = cache_curve(ctx, "cache.l2_sweep",
                         "read bandwidth over a resident working set, " + ctx.tag +
                             " (the grid reads it once a pass, L1 bypassed)");
  if (!sweep(ctx, buf, seed, l1_sizes(ctx.l2_bytes, max_ws, ctx.quick()),
             resident_read::every_block_whole_set, per_sm, l1))
    return;
  if (!sweep(ctx, buf, seed, l2_sizes(ctx.l2_bytes, max_ws, ctx.quick()),
             resident_read::grid_once_l2_only, grid, l2))
    return;

  auto p1 = find_bandwidth_plateaus(l1.points);
  if (p1.size() >= 2) {
    p1.front().name = "L1";
    add_level(ctx, l1, p1.front(), "one block per multiprocessor reads the whole set", warm_note);
  } else {
    ctx.report->skips.push_back({ctx.tag + ".cache.l1",
                                 "no L1 plateau found on the curve: one flat run only, no level "
                                 "after it to end it (" +
                                     describe_plateaus(p1, l1.points) + "; " + warm_note + ")"});
  }
  auto p2 = find_bandwidth_plateaus(l2.points);
  name_l2_sweep_plateaus(p2, l2.points, ctx.l2_bytes);
  for (const auto& p : p2)
    if (p.name == "L2" || p.name == "HBM")
      add_level(ctx, l2, p, "the grid reads the set once a pass, L1 bypassed", warm_note);
  const std::string why = why_no_l2_plateau(p2, l2.points, ctx.l2_bytes);
  if (!why.empty())
    ctx.report->skips.push_back(
        {ctx.tag + ".cache.l2", "no L2 plateau found on the curve: " + why + "; " + warm_note});
  add_curve(ctx, std::move(l1));
  add_curve(ctx, std::move(l2));
}

}  // namespace vramkit::probe::detail

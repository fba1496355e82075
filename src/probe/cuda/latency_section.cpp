// The GPU latency section: a single-thread pointer chase over device memory from 4 KiB to several
// times the L2 (levels read off the curve) and over mapped pinned host memory. Every chase is
// verified by where it ends.
#include <algorithm>
#include <cmath>

#include "common/cuda_check.hpp"
#include "gpu_probe_detail.hpp"
#include "vramkit/core/error.hpp"
#include "vramkit/core/units.hpp"

namespace vramkit::probe::detail {
namespace {
// L2 and L1 lines are 128 bytes on the GPUs vramkit targets; one node per line.
constexpr std::uint64_t line_bytes = 128;
constexpr std::uint64_t chunk_bytes = 64 * KiB;

// Host copies of a layout's permutations, and a device copy when the chase runs on the GPU.
struct layout_tables {
  std::vector<std::uint32_t> chunk_order, line_order, chunk_shift;
  [[nodiscard]] chase_layout host_view() const {
    return {chunk_order.size(), line_order.size(), chunk_order.data(), line_order.data(),
            chunk_shift.data()};
  }
};

layout_tables make_tables(std::uint64_t ws_bytes, std::uint64_t seed) {
  layout_tables t;
  const std::uint64_t chunk = std::min<std::uint64_t>(chunk_bytes, ws_bytes);
  const std::uint64_t chunks = ws_bytes / chunk, lines = chunk / line_bytes;
  splitmix64 rng{seed};
  t.chunk_order.resize(chunks);
  t.line_order.resize(lines);
  t.chunk_shift.resize(chunks);
  random_permutation(t.chunk_order.data(), chunks, rng);
  random_permutation(t.line_order.data(), lines, rng);
  for (auto& s : t.chunk_shift) s = static_cast<std::uint32_t>(rng.below(lines));
  return t;
}

struct chase_result {
  std::vector<double> ns_per_load;
  double cycles_per_load = 0;
  bool ok = true;
};

// Chases `steps` loads per sample, `samples` times, through the chain of `base` (an address the
// device can load from): the first sample starts at line visit(0) after `warm` untimed loads,
// each later one where the previous ended, so no sample re-walks lines an earlier one brought
// into the caches (while the chain is longer than all the loads). Checks every run ends on the
// right line.
chase_result chase(std::uint64_t* base, const layout_tables& t, std::uint64_t warm,
                   std::uint64_t steps, int samples, cudaStream_t s) {
  const chase_layout hv = t.host_view();
  const std::uint64_t n = hv.chunks * hv.lines;
  const std::uint64_t stride_words = line_bytes / 8;
  device_buffer out(3 * sizeof(std::uint64_t));
  chase_result r;
  std::vector<double> cycles;
  std::uint64_t at = 0;  // visits made so far
  for (int i = 0; i < samples; ++i) {
    const std::uint64_t* start = base + chase_visit(hv, at % n) * stride_words;
    const std::uint64_t w = i == 0 ? warm : 0;
    at += w + steps;
    const std::uint64_t* want = base + chase_visit(hv, at % n) * stride_words;
    VRAMKIT_CUDA_TRY(launch_chase(start, w, steps, static_cast<std::uint64_t*>(out.get()), s));
    std::uint64_t h[3];
    VRAMKIT_CUDA_TRY(cudaMemcpyAsync(h, out.get(), sizeof h, cudaMemcpyDeviceToHost, s));
    VRAMKIT_CUDA_TRY(cudaStreamSynchronize(s));
    if (h[0] != reinterpret_cast<std::uint64_t>(want)) r.ok = false;
    r.ns_per_load.push_back(double(h[1]) / double(steps));
    cycles.push_back(double(h[2]) / double(steps));
  }
  std::sort(cycles.begin(), cycles.end());
  r.cycles_per_load = cycles[cycles.size() / 2];
  return r;
}

}  // namespace

void run_latency_section(gpu_context& ctx) {
  ctx.progress("latency (pointer chase over device memory)");
  std::size_t max_ws = ctx.quick() ? GiB : 4 * GiB;
  while (max_ws > 64 * MiB && max_ws > ctx.free_bytes / 4) max_ws /= 2;
  device_buffer buf(max_ws);
  auto* base = static_cast<std::uint64_t*>(buf.get());
  owned_cuda_stream stream;
  const cudaStream_t s = stream.get();
  const std::uint64_t steps = ctx.quick() ? 8192 : 32768;
  const int samples = 3;
  curve c;
  c.key = ctx.key("latency.sweep");
  c.section = "gpu-latency";
  c.title = "load latency over working set, " + ctx.tag + " (random chase, 128-byte lines)";
  c.x_label = "bytes";
  c.y_unit = "ns";
  std::vector<double> cycles;
  bool ok = true;
  std::uint64_t seed = 0xC4A5E;
  for (std::size_t ws = 4 * KiB; ws <= max_ws; ws *= (ctx.quick() ? 4 : 2)) {
    layout_tables t = make_tables(ws, seed++);
    // The permutations go to the device for the build kernel, then the chain is linked in place.
    const std::size_t cb = t.chunk_order.size() * 4, lb = t.line_order.size() * 4;
    device_buffer tables(2 * cb + lb);
    auto* d = static_cast<std::uint32_t*>(tables.get());
    VRAMKIT_CUDA_TRY(cudaMemcpyAsync(d, t.chunk_order.data(), cb, cudaMemcpyHostToDevice, s));
    VRAMKIT_CUDA_TRY(
        cudaMemcpyAsync(d + cb / 4, t.chunk_shift.data(), cb, cudaMemcpyHostToDevice, s));
    VRAMKIT_CUDA_TRY(
        cudaMemcpyAsync(d + cb / 2, t.line_order.data(), lb, cudaMemcpyHostToDevice, s));
    chase_layout dv{t.chunk_order.size(), t.line_order.size(), d, d + cb / 2, d + cb / 4};
    VRAMKIT_CUDA_TRY(launch_chase_build(base, line_bytes, dv, s));
    VRAMKIT_CUDA_TRY(cudaStreamSynchronize(s));
    const std::uint64_t n = ws / line_bytes;
    // Warm the whole chain while it fits L2; beyond that a bounded warm-up suffices (a full pass
    // over a set larger than L2 would cost n device-memory latencies for nothing).
    const std::uint64_t warm = ws <= ctx.l2_bytes ? n : std::min<std::uint64_t>(n, steps);
    auto r = chase(base, t, warm, steps, samples, s);
    if (!r.ok) ok = false;
    curve::point pt;
    pt.x = double(ws);
    pt.samples = r.ns_per_load;
    pt.y = sample_stats::of(pt.samples);
    c.points.push_back(pt);
    cycles.push_back(r.cycles_per_load);
  }
  if (!ok || c.points.empty()) {
    ctx.report->skips.push_back(
        {c.key, "verification failed: a chase did not end on the expected line", true});
    return;
  }
  add_curve(ctx, c);

  // Levels read off the curve: L1 at the smallest set, L2 at the largest set within a quarter of
  // the reported L2, device memory at the first set past 4x L2; the TLB reach is where latency
  // climbs a further 20% above that.
  auto point_at = [&](auto pred) -> int {
    for (std::size_t i = 0; i < c.points.size(); ++i)
      if (pred(c.points[i].x)) return static_cast<int>(i);
    return -1;
  };
  auto add_level = [&](const std::string& key, const std::string& name, int i,
                       std::optional<std::uint64_t> reported) {
    if (i < 0) return;
    const auto& pt = c.points[i];
    measurement m;
    m.key = ctx.key("latency." + key);
    m.section = "gpu-latency";
    m.title = name + " load latency, " + ctx.tag;
    m.device = ctx.tag;
    m.unit = "ns";
    m.size_bytes = static_cast<std::uint64_t>(pt.x);
    m.samples = pt.samples;
    m.repetitions = static_cast<int>(pt.samples.size());
    m.stats = pt.y;
    m.extra["cycles_per_load"] = cycles[i];
    m.extra["loads_per_sample"] = double(steps);
    m.note =
        "single-thread dependent loads over a random cycle of 128-byte lines; chain end checked";
    m.verified = true;
    ctx.report->results.push_back(m);
    memory_level lv;
    lv.name = name;
    lv.device = ctx.tag;
    lv.latency_ns = pt.y.median;
    // Where the curve leaves this level: the last set within 30% of its latency.
    std::size_t j = i;
    while (j + 1 < c.points.size() && c.points[j + 1].y.median <= 1.3 * pt.y.median) ++j;
    lv.measured_size_bytes =
        j + 1 < c.points.size() ? static_cast<std::uint64_t>(c.points[j].x) : 0;
    lv.reported_size_bytes = reported;
    ctx.report->levels.push_back(lv);
  };
  add_level("l1", "L1", 0, std::nullopt);
  int l2 = -1;
  for (std::size_t i = 0; i < c.points.size(); ++i)
    if (c.points[i].x <= static_cast<double>(ctx.l2_bytes) / 4 &&
        c.points[i].x >= static_cast<double>(MiB))
      l2 = static_cast<int>(i);
  add_level("l2", "L2", l2, ctx.l2_bytes);
  const int hbm = point_at([&](double x) {
    return x >= 4.0 * static_cast<double>(ctx.l2_bytes) && x >= 256.0 * static_cast<double>(MiB);
  });
  add_level("hbm", "HBM", hbm, ctx.total_bytes);
  if (hbm >= 0) {
    const double base_ns = c.points[hbm].y.median;
    for (std::size_t i = hbm + 1; i < c.points.size(); ++i) {
      if (c.points[i].y.median > 1.2 * base_ns) {
        memory_level lv;
        lv.name = "TLB reach";
        lv.device = ctx.tag;
        lv.latency_ns = c.points[i].y.median;
        lv.measured_size_bytes = static_cast<std::uint64_t>(c.points[i - 1].x);
        ctx.report->levels.push_back(lv);
        break;
      }
    }
  }
}

// Zero-copy latency: the same chase over mapped pinned host memory, linked by the CPU.
void run_zerocopy_latency(gpu_context& ctx) {
  if (!ctx.can_map_host) {
    ctx.report->skips.push_back(
        {ctx.tag + ".latency.zerocopy", "the device cannot map host memory"});
    return;
  }
  ctx.progress("latency (pointer chase over mapped pinned host memory)");
  owned_cuda_stream stream;
  const cudaStream_t s = stream.get();
  const int samples = 3;
  const std::size_t ws = ctx.host_fit(ctx.quick() ? 16 * MiB : 64 * MiB, 1, MiB);
  if (ws == 0) {
    ctx.report->skips.push_back(
        {ctx.tag + ".latency.zerocopy", "too little host memory available for the chase"});
    return;
  }
  pinned_buffer host(ws, pinned_buffer::mapping::mapped);
  auto* dev = static_cast<std::uint64_t*>(host.device_ptr());
  auto* h = static_cast<std::uint64_t*>(host.get());
  layout_tables t = make_tables(ws, 0x2E20);
  const chase_layout hv = t.host_view();
  const std::uint64_t n = hv.chunks * hv.lines, sw = line_bytes / 8;
  for (std::uint64_t v = 0; v < n; ++v) {
    const std::uint64_t from = chase_visit(hv, v), to = chase_visit(hv, v + 1 == n ? 0 : v + 1);
    h[from * sw] = reinterpret_cast<std::uint64_t>(dev + to * sw);
  }
  const std::uint64_t zsteps = ctx.quick() ? 1024 : 4096;
  auto r = chase(dev, t, 256, zsteps, samples, s);
  auto m = make_measurement(ctx.key("latency.zerocopy"), "gpu-latency",
                            "load latency from the GPU to mapped pinned host memory", ctx.tag, "ns",
                            r.ns_per_load);
  m.size_bytes = ws;
  m.extra["cycles_per_load"] = r.cycles_per_load;
  m.extra["loads_per_sample"] = double(zsteps);
  m.note = "single-thread dependent loads over a random cycle in host memory; chain end checked";
  add_verified(ctx, std::move(m), r.ok, "the chase did not end on the expected line");
}

}  // namespace vramkit::probe::detail

// GPU latency (pointer chase over device memory and over mapped host memory, with the cache levels
// read off the curve), allocation cost (cudaMalloc vs cudaMallocAsync from a warm pool) and
// copy/compute overlap. Every chase is verified by where it ends; every copy word by word.
#include <algorithm>
#include <chrono>
#include <cmath>

#include "common/cuda_check.hpp"
#include "gpu_probe_detail.hpp"
#include "vramkit/core/error.hpp"

namespace vramkit::probe::detail {
namespace {

constexpr std::size_t KiB = std::size_t{1} << 10;
constexpr std::size_t MiB = std::size_t{1} << 20;
constexpr std::size_t GiB = std::size_t{1} << 30;
// L2 and L1 lines are 128 bytes on the GPUs vramkit targets; one node per line.
constexpr std::uint64_t line_bytes = 128;
constexpr std::uint64_t chunk_bytes = 64 * KiB;

// Host copies of a layout's permutations, and a device copy when the chase runs on the GPU.
struct layout_tables {
  std::vector<std::uint32_t> chunk_order, line_order, chunk_shift;
  chase_layout host_view() const {
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

// --- latency ------------------------------------------------------------------------------------

void run_latency_section(gpu_context& ctx) {
  ctx.progress("latency (pointer chase, device and mapped host memory)");
  std::size_t max_ws = ctx.quick() ? GiB : 4 * GiB;
  while (max_ws > 64 * MiB && max_ws > ctx.free_bytes / 4) max_ws /= 2;
  device_buffer buf(max_ws);
  auto* base = static_cast<std::uint64_t*>(buf.get());
  owned_cuda_stream stream;
  const cudaStream_t s = stream.get();
  const std::uint64_t steps = ctx.quick() ? 8192 : 32768;
  const int samples = 3;
  curve c;
  c.key = ctx.tag + ".latency.sweep";
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
  ctx.report->curves.push_back(c);

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
    m.key = ctx.tag + ".latency." + key;
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
    if (c.points[i].x <= ctx.l2_bytes / 4 && c.points[i].x >= 1 * MiB) l2 = static_cast<int>(i);
  add_level("l2", "L2", l2, ctx.l2_bytes);
  const int hbm = point_at([&](double x) { return x >= 4.0 * ctx.l2_bytes && x >= 256.0 * MiB; });
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

  // Zero-copy latency: the same chase over mapped pinned host memory, linked by the CPU.
  if (ctx.can_map_host) {
    const std::size_t ws = ctx.quick() ? 16 * MiB : 64 * MiB;
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
    measurement m;
    m.key = ctx.tag + ".latency.zerocopy";
    m.section = "gpu-latency";
    m.title = "load latency from the GPU to mapped pinned host memory";
    m.device = ctx.tag;
    m.unit = "ns";
    m.size_bytes = ws;
    m.samples = r.ns_per_load;
    m.repetitions = samples;
    m.stats = sample_stats::of(m.samples);
    m.extra["cycles_per_load"] = r.cycles_per_load;
    m.extra["loads_per_sample"] = double(zsteps);
    m.note = "single-thread dependent loads over a random cycle in host memory; chain end checked";
    add_verified(ctx, std::move(m), r.ok, "the chase did not end on the expected line");
  }
}

// --- allocation cost ----------------------------------------------------------------------------

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
    m.key = ctx.tag + ".alloc." + key;
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

// --- overlap ------------------------------------------------------------------------------------

void run_overlap_section(gpu_context& ctx) {
  ctx.progress("copy/compute overlap");
  const std::size_t copy_bytes = ctx.quick() ? 64 * MiB : 256 * MiB;
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

  measurement m;
  m.key = ctx.tag + ".overlap";
  m.section = "overlap";
  m.title = "copy/compute overlap: serial time / concurrent time (kernel + H2D + D2H)";
  m.device = ctx.tag;
  m.unit = "x";
  m.size_bytes = copy_bytes;
  for (int i = 0; i < samples; ++i) m.samples.push_back(serial[i] / concurrent[i]);
  m.repetitions = samples;
  m.stats = sample_stats::of(m.samples);
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

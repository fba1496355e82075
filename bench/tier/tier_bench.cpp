// tier_bench: out-of-core reduction and transform through the streaming pipeline, side by side
// with the baselines measured in the same run (pinned host->device copies, bidirectional copies,
// managed memory with fault-driven migration and with prefetch, cudaMemcpy from pageable memory),
// and the residency manager on a trace of buffer uses larger than its budget (bytes moved against
// an LRU simulation, stream stall with and without prefetch hints). Every result is checked against
// a CPU reference before its speed is reported. Writes a markdown table (--summary) and JSON
// (--json). Needs a CUDA device.
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/cuda_check.hpp"
#include "residency_trace.hpp"
#include "tier_kernels.hpp"
#include "vramkit/core/cuda_device_api.hpp"
#include "vramkit/core/error.hpp"
#include "vramkit/core/sample_stats.hpp"
#include "vramkit/core/units.hpp"
#include "vramkit/tier/lru_simulation.hpp"
#include "vramkit/tier/residency_manager.hpp"
#include "vramkit/tier/stream_pipeline.hpp"

namespace {

using vramkit::GiB;
using vramkit::MiB;
using vramkit::stream_view;
namespace tier = vramkit::tier;
namespace bench = vramkit::bench;

struct settings {
  std::size_t dataset_bytes = 16 * GiB;
  std::size_t chunk_bytes = 128 * MiB;
  int depth = 4;
  std::size_t managed_bytes = 4 * GiB;  // capped at 1/4 of free device memory
  std::size_t pageable_bytes = 4 * GiB;
  int reps = 3;
  std::string summary_path;
  std::string json_path;
  std::string trace_path;
};

unsigned host_threads() { return std::max(1u, std::min(32u, std::thread::hardware_concurrency())); }

// Runs fn(begin, end) over [0, n) on all host threads.
void parallel_for(std::size_t n, const std::function<void(std::size_t, std::size_t)>& fn) {
  const unsigned t = host_threads();
  std::vector<std::thread> threads;
  const std::size_t per = (n + t - 1) / t;
  for (unsigned i = 0; i < t; ++i) {
    const std::size_t b = std::min(n, i * per);
    const std::size_t e = std::min(n, b + per);
    if (b < e) threads.emplace_back(fn, b, e);
  }
  for (auto& th : threads) th.join();
}

constexpr std::uint32_t pattern(std::size_t i) noexcept {
  const auto x = static_cast<std::uint32_t>(i * 2654435761u) ^ static_cast<std::uint32_t>(i >> 7);
  return (x & 0xffffffu) | 1u;  // 24 bits: 2^32 elements sum without overflow; never zero
}

void fill_pattern(std::uint32_t* data, std::size_t n, std::size_t first = 0) {
  parallel_for(n, [&](std::size_t b, std::size_t e) {
    for (std::size_t i = b; i < e; ++i) data[i] = pattern(first + i);
  });
}

std::uint64_t cpu_sum(const std::uint32_t* data, std::size_t n) {
  std::vector<std::uint64_t> partial(host_threads() + 1, 0);
  std::atomic<unsigned> slot{0};
  parallel_for(n, [&](std::size_t b, std::size_t e) {
    std::uint64_t s = 0;
    for (std::size_t i = b; i < e; ++i) s += data[i];
    partial[slot++] = s;
  });
  std::uint64_t total = 0;
  for (auto p : partial) total += p;
  return total;
}

std::uint32_t transformed(std::uint32_t x, int times) {
  for (int k = 0; k < times; ++k) x = bench::transform_u32(x);
  return x;
}

// Number of elements that differ from pattern(first + i) transformed `times` times.
std::size_t count_mismatches(const std::uint32_t* data, std::size_t n, int times,
                             std::size_t first = 0) {
  std::atomic<std::size_t> bad{0};
  parallel_for(n, [&](std::size_t b, std::size_t e) {
    std::size_t local = 0;
    for (std::size_t i = b; i < e; ++i) local += data[i] != transformed(pattern(first + i), times);
    bad += local;
  });
  return bad.load();
}

struct spread {
  double median = 0, min = 0, max = 0;
  int samples = 0;
};
spread summarize(std::vector<double> v) {
  const auto st = vramkit::sample_stats::of(std::move(v));
  return {st.median, st.min, st.max, static_cast<int>(st.count)};
}
nlohmann::json to_json(const spread& s) {
  return {{"median", s.median}, {"min", s.min}, {"max", s.max}, {"samples", s.samples}};
}

cudaStream_t cs(stream_view s) { return static_cast<cudaStream_t>(s.handle); }

// Times work enqueued by `fn` on `stream` with CUDA events; milliseconds.
double time_on_stream(cudaStream_t stream, const std::function<void()>& fn) {
  cudaEvent_t a = nullptr, b = nullptr;
  VRAMKIT_CUDA_TRY(cudaEventCreate(&a));
  VRAMKIT_CUDA_TRY(cudaEventCreate(&b));
  VRAMKIT_CUDA_TRY(cudaEventRecord(a, stream));
  fn();
  VRAMKIT_CUDA_TRY(cudaEventRecord(b, stream));
  VRAMKIT_CUDA_TRY(cudaEventSynchronize(b));
  float ms = 0;
  VRAMKIT_CUDA_TRY(cudaEventElapsedTime(&ms, a, b));
  VRAMKIT_CUDA_TRY(cudaEventDestroy(a));
  VRAMKIT_CUDA_TRY(cudaEventDestroy(b));
  return ms;
}

struct device_sum {
  unsigned long long* ptr = nullptr;
  device_sum() { VRAMKIT_CUDA_TRY(cudaMalloc(&ptr, sizeof *ptr)); }
  ~device_sum() { VRAMKIT_CUDA_ASSERT(cudaFree(ptr)); }
  // The library's streams are non-blocking: finish the reset before any of them runs a kernel.
  void reset() {
    VRAMKIT_CUDA_TRY(cudaMemset(ptr, 0, sizeof *ptr));
    VRAMKIT_CUDA_TRY(cudaDeviceSynchronize());
  }
  std::uint64_t read() {
    unsigned long long v = 0;
    VRAMKIT_CUDA_TRY(cudaMemcpy(&v, ptr, sizeof v, cudaMemcpyDeviceToHost));
    return v;
  }
};

[[noreturn]] void fail(const std::string& what) {
  throw vramkit::error("verification failed: " + what);
}

std::size_t arg_bytes(const char* v) { return static_cast<std::size_t>(vramkit::parse_bytes(v)); }

struct row {
  std::string figure, value, baseline, ratio, target, verdict;
};

std::string fmt_gbps(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.2f GB/s", v);
  return b;
}
std::string ratio(double a, double b) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", b > 0 ? a / b : 0.0);
  return buf;
}
std::string verdict(bool ok) { return ok ? "met" : "NOT met"; }

// The residency manager replaying a trace of buffer uses larger than its budget, without and with
// prefetch hints (the next use prefetched while the current buffer is computed on).
void residency_section(vramkit::device_api& api, const settings& cfg, nlohmann::json& out,
                       std::vector<row>& rows) {
  constexpr std::uint32_t buffers = 48;
  constexpr std::size_t buffer_bytes = 16 * MiB;
  constexpr std::size_t budget = 256 * MiB;
  constexpr std::size_t steps = 600;
  constexpr std::uint32_t spin_us = 300;
  const auto trace = bench::make_locality_trace(buffers, steps, 24, 0.3, 42);
  const std::vector<std::size_t> sizes(buffers, buffer_bytes);
  const auto lru = tier::simulate_lru(sizes, trace, budget);
  const std::size_t words = buffer_bytes / 4;
  nlohmann::json section;
  section["buffers"] = buffers;
  section["buffer_bytes"] = buffer_bytes;
  section["budget_bytes"] = budget;
  section["steps"] = steps;
  section["lru_simulation"] = {
      {"bytes_h2d", lru.bytes_h2d}, {"bytes_d2h", lru.bytes_d2h}, {"misses", lru.misses}};
  double stall_ms[2] = {0, 0};
  std::uint64_t moved[2] = {0, 0};
  for (int with_prefetch = 0; with_prefetch < 2; ++with_prefetch) {
    tier::residency_options o;
    o.device_budget_bytes = budget;
    o.record_trace = with_prefetch == 1 && !cfg.trace_path.empty();
    tier::residency_manager m(api, o);
    std::vector<tier::tiered_buffer> handles;
    std::vector<std::uint32_t> writes(buffers, 0);
    for (std::uint32_t b = 0; b < buffers; ++b) {
      handles.push_back(m.create(buffer_bytes));
      fill_pattern(
          static_cast<std::uint32_t*>(m.host_data(handles.back(), tier::access_mode::write)), words,
          std::size_t(b) * words);
    }
    m.reset_counters();
    vramkit::owned_stream s(api);
    const auto a = std::chrono::steady_clock::now();
    for (std::size_t t = 0; t < trace.size(); ++t) {
      const auto& use = trace[t];
      auto* p = static_cast<std::uint32_t*>(m.acquire(handles[use.buffer], s, use.access));
      if (with_prefetch == 1 && t + 1 < trace.size()) m.prefetch(handles[trace[t + 1].buffer], s);
      const std::uint32_t add = use.access == tier::access_mode::read ? 0 : 1;
      bench::launch_touch_u32(p, words, add, spin_us, s);
      writes[use.buffer] += add;
      m.release(handles[use.buffer], s);
      // The host consumes each step's result before it issues the next (as a training loop that
      // reads its loss does), so without a hint the next copy cannot start before this point.
      api.synchronize(s);
    }
    api.synchronize(s);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count();
    const auto st = m.stats();
    for (std::uint32_t b = 0; b < buffers; ++b) {
      const auto* h = static_cast<const std::uint32_t*>(m.host_data(handles[b]));
      std::size_t bad = 0;
      for (std::size_t i = 0; i < words; ++i)
        bad += h[i] != pattern(std::size_t(b) * words + i) + writes[b];
      if (bad != 0)
        fail("residency buffer " + std::to_string(b) + ": " + std::to_string(bad) +
             " words differ");
    }
    if (st.peak_resident_bytes > budget) fail("residency manager exceeded its budget");
    if (o.record_trace) {
      std::ofstream f(cfg.trace_path);
      m.write_trace(f);
    }
    stall_ms[with_prefetch] = st.stream_wait.count() / 1e6;
    moved[with_prefetch] = st.bytes_h2d + st.bytes_d2h;
    const char* key = with_prefetch ? "with_prefetch" : "without_prefetch";
    section[key] = {{"bytes_h2d", st.bytes_h2d},
                    {"bytes_d2h", st.bytes_d2h},
                    {"hits", st.hits},
                    {"misses", st.misses},
                    {"prefetch_hits", st.prefetch_hits},
                    {"prefetches_dropped", st.prefetches_dropped},
                    {"evictions", st.evictions},
                    {"stream_wait_ms", stall_ms[with_prefetch]},
                    {"wall_s", secs},
                    {"peak_resident_bytes", st.peak_resident_bytes}};
    std::printf(
        "residency %s: moved %s (h2d %s, d2h %s), stall %.1f ms, %zu hits %zu misses, %.2f s\n",
        key, vramkit::format_bytes(double(moved[with_prefetch])).c_str(),
        vramkit::format_bytes(double(st.bytes_h2d)).c_str(),
        vramkit::format_bytes(double(st.bytes_d2h)).c_str(), stall_ms[with_prefetch],
        std::size_t(st.hits), std::size_t(st.misses), secs);
  }
  const std::uint64_t lru_moved = lru.bytes_h2d + lru.bytes_d2h;
  std::printf("residency LRU simulation: moved %s\n",
              vramkit::format_bytes(double(lru_moved)).c_str());
  out["residency"] = section;
  rows.push_back({"residency: bytes moved, no hints (48 x 16 MiB, 256 MiB budget, 600 uses)",
                  vramkit::format_bytes(double(moved[0])),
                  "ideal LRU " + vramkit::format_bytes(double(lru_moved)),
                  ratio(double(moved[0]), double(lru_moved)), "<= 1",
                  verdict(moved[0] <= lru_moved)});
  rows.push_back({"residency: bytes moved, with prefetch hints",
                  vramkit::format_bytes(double(moved[1])),
                  "ideal LRU " + vramkit::format_bytes(double(lru_moved)),
                  ratio(double(moved[1]), double(lru_moved)), "(report)", "-"});
  char with[32], without[32];
  std::snprintf(with, sizeof with, "%.1f ms", stall_ms[1]);
  std::snprintf(without, sizeof without, "%.1f ms", stall_ms[0]);
  rows.push_back({"residency: stream stall waiting for copies, with prefetch hints", with,
                  std::string("without hints ") + without, ratio(stall_ms[1], stall_ms[0]), "< 1",
                  verdict(stall_ms[1] < stall_ms[0])});
}

}  // namespace

int main(int argc, char** argv) try {
  settings cfg;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) throw vramkit::invalid_input("tier_bench: " + a + " needs a value");
      return argv[++i];
    };
    if (a == "--dataset")
      cfg.dataset_bytes = arg_bytes(next());
    else if (a == "--chunk")
      cfg.chunk_bytes = arg_bytes(next());
    else if (a == "--depth")
      cfg.depth = std::stoi(next());
    else if (a == "--managed")
      cfg.managed_bytes = arg_bytes(next());
    else if (a == "--pageable")
      cfg.pageable_bytes = arg_bytes(next());
    else if (a == "--reps")
      cfg.reps = std::stoi(next());
    else if (a == "--summary")
      cfg.summary_path = next();
    else if (a == "--json")
      cfg.json_path = next();
    else if (a == "--trace")
      cfg.trace_path = next();
    else
      throw vramkit::invalid_input("tier_bench: unknown argument '" + a + "'");
  }
  auto api_or = vramkit::cuda_device_api();
  if (!api_or) {
    std::fprintf(stderr, "tier_bench: no usable GPU\n");
    return 1;
  }
  vramkit::device_api& api = **api_or;
  const auto props = api.properties(api.current_device());
  const auto mem = api.memory_info();
  const auto gbps = [](double bytes, double ms) { return bytes / (ms * 1e-3) / 1e9; };
  nlohmann::json out;
  std::vector<row> rows;
  out["device"] = props.name;
  out["free_device_bytes"] = mem.free_bytes;
  std::printf("device: %s, %s free of %s\n", props.name.c_str(),
              vramkit::format_bytes(static_cast<double>(mem.free_bytes)).c_str(),
              vramkit::format_bytes(static_cast<double>(mem.total_bytes)).c_str());

  const std::size_t n = cfg.dataset_bytes / 4;
  const std::size_t budget = cfg.chunk_bytes * static_cast<std::size_t>(cfg.depth);
  std::printf("dataset %s pinned host, pipeline device budget %s (depth %d x chunk %s): %.1fx\n",
              vramkit::format_bytes(double(cfg.dataset_bytes)).c_str(),
              vramkit::format_bytes(double(budget)).c_str(), cfg.depth,
              vramkit::format_bytes(double(cfg.chunk_bytes)).c_str(),
              double(cfg.dataset_bytes) / double(budget));
  out["dataset_bytes"] = cfg.dataset_bytes;
  out["pipeline_budget_bytes"] = budget;

  auto t0 = std::chrono::steady_clock::now();
  auto* data = static_cast<std::uint32_t*>(api.allocate_pinned_host(cfg.dataset_bytes));
  std::unique_ptr<void, std::function<void(void*)>> data_guard(
      data, [&](void* p) { api.free_pinned_host(p); });
  fill_pattern(data, n);
  const std::uint64_t ref_sum = cpu_sum(data, n);
  std::printf("pinned + filled in %.1f s\n",
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());

  vramkit::owned_stream s1(api), s2(api);
  device_sum acc;

  // --- baselines: pinned H2D, bidirectional ---------------------------------------------------
  const std::size_t copy_bytes = std::min<std::size_t>(1 * GiB, cfg.dataset_bytes / 2);
  void* dev_a = nullptr;
  void* dev_b = nullptr;
  VRAMKIT_CUDA_TRY(cudaMalloc(&dev_a, copy_bytes));
  VRAMKIT_CUDA_TRY(cudaMalloc(&dev_b, copy_bytes));
  auto* back = static_cast<std::uint32_t*>(api.allocate_pinned_host(copy_bytes));
  std::vector<double> h2d_ms, bidir_ms;
  for (int r = 0; r < cfg.reps + 1; ++r) {
    const double ms = time_on_stream(cs(s1), [&] {
      VRAMKIT_CUDA_TRY(cudaMemcpyAsync(dev_a, data, copy_bytes, cudaMemcpyHostToDevice, cs(s1)));
    });
    if (r > 0) h2d_ms.push_back(ms);
  }
  acc.reset();
  bench::launch_sum_u32(static_cast<std::uint32_t*>(dev_a), copy_bytes / 4, acc.ptr, s1);
  VRAMKIT_CUDA_TRY(cudaStreamSynchronize(cs(s1)));
  if (acc.read() != cpu_sum(data, copy_bytes / 4)) fail("pinned host->device copy");
  // dev_b holds the second GiB of the dataset; D2H of it runs while H2D of the first runs.
  VRAMKIT_CUDA_TRY(cudaMemcpy(dev_b, data + copy_bytes / 4, copy_bytes, cudaMemcpyHostToDevice));
  for (int r = 0; r < cfg.reps + 1; ++r) {
    std::memset(back, 0, copy_bytes);
    cudaEvent_t go = nullptr, d2h_end = nullptr;
    VRAMKIT_CUDA_TRY(cudaEventCreateWithFlags(&go, cudaEventDisableTiming));
    VRAMKIT_CUDA_TRY(cudaEventCreateWithFlags(&d2h_end, cudaEventDisableTiming));
    const double ms = time_on_stream(cs(s1), [&] {
      VRAMKIT_CUDA_TRY(cudaEventRecord(go, cs(s1)));
      VRAMKIT_CUDA_TRY(cudaStreamWaitEvent(cs(s2), go, 0));
      VRAMKIT_CUDA_TRY(cudaMemcpyAsync(dev_a, data, copy_bytes, cudaMemcpyHostToDevice, cs(s1)));
      VRAMKIT_CUDA_TRY(cudaMemcpyAsync(back, dev_b, copy_bytes, cudaMemcpyDeviceToHost, cs(s2)));
      VRAMKIT_CUDA_TRY(cudaEventRecord(d2h_end, cs(s2)));
      VRAMKIT_CUDA_TRY(cudaStreamWaitEvent(cs(s1), d2h_end, 0));
    });
    VRAMKIT_CUDA_TRY(cudaEventDestroy(go));
    VRAMKIT_CUDA_TRY(cudaEventDestroy(d2h_end));
    if (std::memcmp(back, data + copy_bytes / 4, copy_bytes) != 0)
      fail("bidirectional device->host copy");
    if (r > 0) bidir_ms.push_back(ms);
  }
  api.free_pinned_host(back);
  VRAMKIT_CUDA_TRY(cudaFree(dev_b));
  std::vector<double> h2d_gbps, bidir_gbps;
  for (double ms : h2d_ms) h2d_gbps.push_back(gbps(double(copy_bytes), ms));
  for (double ms : bidir_ms) bidir_gbps.push_back(gbps(2.0 * double(copy_bytes), ms));
  const spread h2d = summarize(h2d_gbps), bidir = summarize(bidir_gbps);
  std::printf("baseline pinned H2D %.2f GB/s (min %.2f max %.2f, %d x %s)\n", h2d.median, h2d.min,
              h2d.max, h2d.samples, vramkit::format_bytes(double(copy_bytes)).c_str());
  std::printf("baseline bidirectional %.2f GB/s (H2D + D2H bytes / time)\n", bidir.median);
  out["baseline_h2d_gbps"] = to_json(h2d);
  out["baseline_bidirectional_gbps"] = to_json(bidir);

  // --- pipeline: out-of-core reduction and transform over the pinned dataset --------------------
  tier::pipeline_options popts;
  popts.chunk_bytes = cfg.chunk_bytes;
  popts.depth = cfg.depth;
  popts.element_bytes = 4;
  popts.measure_stages = false;
  tier::stream_pipeline pipe(api, popts);
  auto sum_cb = [&](tier::chunk_view c, stream_view s) {
    bench::launch_sum_u32(static_cast<const std::uint32_t*>(c.data), c.bytes / 4, acc.ptr, s);
  };
  std::vector<double> red_gbps;
  for (int r = 0; r < cfg.reps + 1; ++r) {
    acc.reset();
    const auto st = pipe.run(
        tier::pipeline_input::from_host(data, cfg.dataset_bytes, tier::host_memory::pinned),
        sum_cb);
    if (acc.read() != ref_sum) fail("pipeline reduction sum");
    if (r > 0) red_gbps.push_back(st.bytes_per_second() / 1e9);
  }
  const spread red = summarize(red_gbps);
  std::printf("pipeline reduction %.2f GB/s = %.1f%% of pinned H2D\n", red.median,
              100 * red.median / h2d.median);
  out["pipeline_reduction_gbps"] = to_json(red);
  rows.push_back({"out-of-core reduction (pipeline, pinned source)", fmt_gbps(red.median),
                  "pinned H2D " + fmt_gbps(h2d.median), ratio(red.median, h2d.median), ">= 0.90",
                  verdict(red.median >= 0.9 * h2d.median)});

  std::vector<double> tr_gbps;
  int applied = 0;
  auto tr_cb = [&](tier::chunk_view c, stream_view s) {
    bench::launch_transform_u32(static_cast<std::uint32_t*>(c.data), c.bytes / 4, s);
  };
  for (int r = 0; r < cfg.reps; ++r) {
    const auto st = pipe.run(
        tier::pipeline_input::from_host(data, cfg.dataset_bytes, tier::host_memory::pinned), tr_cb,
        tier::pipeline_output::to_host(data, cfg.dataset_bytes, tier::host_memory::pinned));
    ++applied;
    tr_gbps.push_back(2.0 * st.bytes_per_second() / 1e9);  // read + written, as the baseline
  }
  if (const auto bad = count_mismatches(data, n, applied); bad != 0) {
    fail("pipeline transform: " + std::to_string(bad) + " elements differ");
  }
  const spread tr = summarize(tr_gbps);
  std::printf("pipeline transform %.2f GB/s (read + written) = %.1f%% of bidirectional\n",
              tr.median, 100 * tr.median / bidir.median);
  out["pipeline_transform_gbps_read_plus_written"] = to_json(tr);
  rows.push_back({"out-of-core transform (pipeline, in place; bytes read + written)",
                  fmt_gbps(tr.median), "bidirectional " + fmt_gbps(bidir.median),
                  ratio(tr.median, bidir.median), ">= 0.85",
                  verdict(tr.median >= 0.85 * bidir.median)});
  // Restore the pattern for the stage-timed run and the pageable section.
  fill_pattern(data, n);

  // One run with per-stage timing, to show where the time goes.
  {
    tier::pipeline_options timed = popts;
    timed.measure_stages = true;
    tier::stream_pipeline tp(api, timed);
    acc.reset();
    const auto st =
        tp.run(tier::pipeline_input::from_host(data, cfg.dataset_bytes, tier::host_memory::pinned),
               sum_cb);
    if (acc.read() != ref_sum) fail("stage-timed reduction sum");
    auto stage = [](const tier::stage_stats& s) {
      return nlohmann::json{{"bytes", s.bytes},
                            {"busy_ms", s.busy.count() / 1e6},
                            {"stall_ms", s.stall.count() / 1e6}};
    };
    out["stage_timed_reduction"] = {{"gbps", st.bytes_per_second() / 1e9},
                                    {"h2d", stage(st.h2d)},
                                    {"compute", stage(st.compute)}};
    std::printf(
        "stage-timed reduction %.2f GB/s: h2d busy %.1f ms stall %.1f ms, compute busy %.1f ms "
        "stall %.1f ms\n",
        st.bytes_per_second() / 1e9, st.h2d.busy.count() / 1e6, st.h2d.stall.count() / 1e6,
        st.compute.busy.count() / 1e6, st.compute.stall.count() / 1e6);
  }

  // --- managed memory: fault-driven and prefetched, within free device memory -----------------
  {
    const auto free_now = api.memory_info().free_bytes;
    const std::size_t mbytes = std::min(cfg.managed_bytes, (free_now / 4) & ~(MiB - 1));
    const std::size_t mn = mbytes / 4;
    auto* m = static_cast<std::uint32_t*>(api.allocate_managed(mbytes));
    std::unique_ptr<void, std::function<void(void*)>> m_guard(
        m, [&](void* p) { api.free_managed(p); });
    fill_pattern(m, mn);
    const std::uint64_t mref = cpu_sum(m, mn);
    const int dev = api.current_device();
    auto to_host = [&] {
      api.prefetch_managed(m, mbytes, {vramkit::memory_location::host}, s1);
      api.synchronize(s1);
    };
    std::vector<double> fault, pref, fault_tr, pref_tr;
    for (int r = 0; r < cfg.reps + 1; ++r) {
      to_host();
      acc.reset();
      const double ms_fault =
          time_on_stream(cs(s1), [&] { bench::launch_sum_u32(m, mn, acc.ptr, s1); });
      if (acc.read() != mref) fail("managed fault-driven reduction");
      to_host();
      acc.reset();
      const double ms_pref = time_on_stream(cs(s1), [&] {
        api.prefetch_managed(m, mbytes, {dev}, s1);
        bench::launch_sum_u32(m, mn, acc.ptr, s1);
      });
      if (acc.read() != mref) fail("managed prefetched reduction");
      if (r > 0) {
        fault.push_back(gbps(double(mbytes), ms_fault));
        pref.push_back(gbps(double(mbytes), ms_pref));
      }
    }
    int mapplied = 0;
    for (int r = 0; r < cfg.reps; ++r) {
      to_host();
      const double ms_fault = time_on_stream(cs(s1), [&] {
        bench::launch_transform_u32(m, mn, s1);
        api.prefetch_managed(m, mbytes, {vramkit::memory_location::host}, s1);
      });
      ++mapplied;
      const double ms_pref = time_on_stream(cs(s1), [&] {
        api.prefetch_managed(m, mbytes, {dev}, s1);
        bench::launch_transform_u32(m, mn, s1);
        api.prefetch_managed(m, mbytes, {vramkit::memory_location::host}, s1);
      });
      ++mapplied;
      fault_tr.push_back(gbps(2.0 * double(mbytes), ms_fault));
      pref_tr.push_back(gbps(2.0 * double(mbytes), ms_pref));
    }
    api.synchronize(s1);
    if (const auto bad = count_mismatches(m, mn, mapplied); bad != 0) {
      fail("managed transform: " + std::to_string(bad) + " elements differ");
    }
    const spread f = summarize(fault), p = summarize(pref), ft = summarize(fault_tr),
                 pt = summarize(pref_tr);
    std::printf(
        "managed (%s): reduction fault-driven %.2f GB/s, prefetched %.2f GB/s; transform %.2f / "
        "%.2f GB/s\n",
        vramkit::format_bytes(double(mbytes)).c_str(), f.median, p.median, ft.median, pt.median);
    out["managed_bytes"] = mbytes;
    out["managed_reduction_fault_gbps"] = to_json(f);
    out["managed_reduction_prefetch_gbps"] = to_json(p);
    out["managed_transform_fault_gbps_read_plus_written"] = to_json(ft);
    out["managed_transform_prefetch_gbps_read_plus_written"] = to_json(pt);
    rows.push_back({"reduction: pipeline vs managed fault-driven (" +
                        vramkit::format_bytes(double(mbytes)) + ")",
                    fmt_gbps(red.median), "managed faults " + fmt_gbps(f.median),
                    ratio(red.median, f.median), ">= 5", verdict(red.median >= 5 * f.median)});
    rows.push_back({"reduction: pipeline vs managed + cudaMemPrefetchAsync", fmt_gbps(red.median),
                    "managed prefetched " + fmt_gbps(p.median), ratio(red.median, p.median), ">= 1",
                    verdict(red.median >= p.median)});
    rows.push_back({"transform: pipeline vs managed fault-driven", fmt_gbps(tr.median),
                    "managed faults " + fmt_gbps(ft.median), ratio(tr.median, ft.median), ">= 5",
                    verdict(tr.median >= 5 * ft.median)});
    rows.push_back({"transform: pipeline vs managed + cudaMemPrefetchAsync", fmt_gbps(tr.median),
                    "managed prefetched " + fmt_gbps(pt.median), ratio(tr.median, pt.median),
                    ">= 1", verdict(tr.median >= pt.median)});
  }
  VRAMKIT_CUDA_TRY(cudaFree(dev_a));

  // --- pageable source: staging through pinned slots vs cudaMemcpy ------------------------------
  {
    const std::size_t pn = cfg.pageable_bytes / 4;
    std::vector<std::uint32_t> pageable(pn);
    fill_pattern(pageable.data(), pn);
    const std::uint64_t pref_sum = cpu_sum(pageable.data(), pn);
    const std::size_t piece = std::min<std::size_t>(1 * GiB, cfg.pageable_bytes);
    void* dev = nullptr;
    VRAMKIT_CUDA_TRY(cudaMalloc(&dev, piece));
    std::vector<double> memcpy_gbps, staged_gbps;
    for (int r = 0; r < cfg.reps + 1; ++r) {
      VRAMKIT_CUDA_TRY(cudaDeviceSynchronize());
      const auto a = std::chrono::steady_clock::now();
      for (std::size_t off = 0; off < cfg.pageable_bytes; off += piece) {
        const std::size_t len = std::min(piece, cfg.pageable_bytes - off);
        VRAMKIT_CUDA_TRY(cudaMemcpy(dev, reinterpret_cast<const char*>(pageable.data()) + off, len,
                                    cudaMemcpyHostToDevice));
      }
      VRAMKIT_CUDA_TRY(cudaDeviceSynchronize());
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count();
      if (r > 0) memcpy_gbps.push_back(double(cfg.pageable_bytes) / s / 1e9);
    }
    {
      const std::size_t last_off = ((cfg.pageable_bytes - 1) / piece) * piece;
      const std::size_t last_len = cfg.pageable_bytes - last_off;
      acc.reset();
      bench::launch_sum_u32(static_cast<std::uint32_t*>(dev), last_len / 4, acc.ptr, s1);
      api.synchronize(s1);
      if (acc.read() != cpu_sum(pageable.data() + last_off / 4, last_len / 4))
        fail("pageable cudaMemcpy");
    }
    VRAMKIT_CUDA_TRY(cudaFree(dev));
    tier::pipeline_options sopts = popts;
    sopts.chunk_bytes = std::min<std::size_t>(cfg.chunk_bytes, 64 * MiB);
    sopts.staging_threads = static_cast<int>(host_threads());
    tier::stream_pipeline sp(api, sopts);
    for (int r = 0; r < cfg.reps + 1; ++r) {
      acc.reset();
      const auto st =
          sp.run(tier::pipeline_input::from_host(pageable.data(), cfg.pageable_bytes), sum_cb);
      if (acc.read() != pref_sum) fail("pipeline reduction from pageable memory");
      if (r > 0) staged_gbps.push_back(st.bytes_per_second() / 1e9);
    }
    const spread mc = summarize(memcpy_gbps), sg = summarize(staged_gbps);
    std::printf(
        "pageable %s: cudaMemcpy %.2f GB/s, pipeline with %u staging threads %.2f GB/s (%.2fx)\n",
        vramkit::format_bytes(double(cfg.pageable_bytes)).c_str(), mc.median, host_threads(),
        sg.median, sg.median / mc.median);
    out["pageable_cudamemcpy_gbps"] = to_json(mc);
    out["pageable_pipeline_gbps"] = to_json(sg);
    out["staging_threads"] = host_threads();
    rows.push_back({"pageable std::vector -> device: pipeline staging (" +
                        std::to_string(host_threads()) + " threads)",
                    fmt_gbps(sg.median), "cudaMemcpy pageable " + fmt_gbps(mc.median),
                    ratio(sg.median, mc.median), ">= 4", verdict(sg.median >= 4 * mc.median)});
  }
  data_guard.reset();

  // --- residency manager on a trace larger than its budget --------------------------------------
  residency_section(api, cfg, out, rows);

  if (!cfg.json_path.empty()) std::ofstream(cfg.json_path) << out.dump(2) << "\n";
  if (!cfg.summary_path.empty()) {
    std::ofstream md(cfg.summary_path);
    md << "| figure | value | baseline (same run) | ratio | target | verdict "
          "|\n|---|---|---|---|---|---|\n";
    for (const auto& r : rows) {
      md << "| " << r.figure << " | " << r.value << " | " << r.baseline << " | " << r.ratio << " | "
         << r.target << " | " << r.verdict << " |\n";
    }
  }
  for (const auto& r : rows)
    std::printf("%-70s %-14s %-34s %-8s %-8s %s\n", r.figure.c_str(), r.value.c_str(),
                r.baseline.c_str(), r.ratio.c_str(), r.target.c_str(), r.verdict.c_str());
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "tier_bench: %s\n", e.what());
  return 1;
}

// Monitor overhead: CPU time per sample (as % of one core at 1 Hz) with 8 fake GPUs and, with
// --real-nvml, the driver's NVML; /metrics render and scrape latency; and a bounded load test of
// 100 concurrent scrapers on loopback with RSS before and after. Each figure is printed with its
// target and its baseline from the same run. Not a test: it never fails on a slow figure.
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "vramkit/core/testing/fake_nvml.hpp"
#include "vramkit/monitor/exporter.hpp"
#include "vramkit/monitor/exposition.hpp"
#include "vramkit/monitor/host_reader.hpp"
#include "vramkit/monitor/sample_history.hpp"
#include "vramkit/monitor/sampler.hpp"

#if defined(VRAMKIT_BENCH_HTTP)
#include <httplib.h>
#endif

namespace mon = vramkit::monitor;

namespace {

double cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

struct stats {
  double min = 0, p50 = 0, p90 = 0, p99 = 0, max = 0;
  std::size_t n = 0;
};

stats summarize(std::vector<double> v) {
  stats s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  auto at = [&](double q) {
    return v[std::min(v.size() - 1, static_cast<std::size_t>(q * static_cast<double>(v.size())))];
  };
  s.min = v.front();
  s.p50 = at(0.5);
  s.p90 = at(0.9);
  s.p99 = at(0.99);
  s.max = v.back();
  s.n = v.size();
  return s;
}

std::uint64_t rss_bytes() {
  auto p = mon::read_host_process("/", static_cast<std::uint32_t>(getpid()));
  return p && p->rss_bytes ? *p->rss_bytes : 0;
}

std::vector<vramkit::testing::fake_gpu> eight_gpus() {
  std::vector<vramkit::testing::fake_gpu> gpus;
  for (int i = 0; i < 8; ++i) {
    vramkit::testing::fake_gpu g;
    g.name = "NVIDIA H200";
    g.uuid = "GPU-bench-" + std::to_string(i);
    g.memory_total_bytes = 150754820096ULL;
    g.memory_used_bytes = (10ULL + i) << 30;
    g.memory_reserved_bytes = 597688320ULL;
    g.utilization = vramkit::nvml_utilization{50, 0};
    g.temperature_celsius = 50;
    g.power_watts = 400;
    g.pcie_throughput = vramkit::nvml_pcie{1ULL << 30, 1ULL << 29};
    g.clocks = vramkit::nvml_clocks{1980, 0};
    for (int p = 0; p < 4; ++p) {
      // Real pids of this process so the host join reads /proc as it would for real processes.
      g.processes.push_back({static_cast<std::uint32_t>(getpid()), (1ULL + p) << 30,
                             vramkit::nvml_process_kind::compute, "bench"});
    }
    gpus.push_back(std::move(g));
  }
  return gpus;
}

// CPU time per sample over `n` samples; prints it as % of one core at 1 Hz.
stats sample_cost(mon::sampler& s, int n) {
  s.take();  // warm-up (first /proc reads, allocations)
  std::vector<double> cpu;
  for (int i = 0; i < n; ++i) {
    double a = cpu_seconds();
    s.take();
    cpu.push_back(cpu_seconds() - a);
  }
  return summarize(cpu);
}

double g_baseline_cpu = 0;  // host readers alone, median CPU seconds per sample

void print_cost(const char* what, const stats& s) {
  std::printf(
      "%-44s CPU per sample: median %.3f ms (min %.3f, max %.3f, n=%zu) -> %.4f %% of one core at "
      "1 Hz (target < 1 %%); %.1fx the host-only baseline\n",
      what, s.p50 * 1e3, s.min * 1e3, s.max * 1e3, s.n, s.p50 * 100.0,
      g_baseline_cpu > 0 ? s.p50 / g_baseline_cpu : 1.0);
}

}  // namespace

int main(int argc, char** argv) {
  bool real = argc > 1 && std::strcmp(argv[1], "--real-nvml") == 0;
  std::printf("vramkit monitor overhead (host: %u hardware threads)\n\n",
              std::thread::hardware_concurrency());

  // Baseline: the host side alone (meminfo, NUMA, cgroup), which every sample pays.
  {
    mon::sampler host_only(vramkit::unavailable{vramkit::unavailable_kind::no_driver, "bench"},
                           mon::sampler_options{});
    auto base = sample_cost(host_only, 200);
    g_baseline_cpu = base.p50;
    print_cost("baseline: host readers only", base);
  }
  auto fake = std::make_shared<vramkit::testing::fake_nvml>(eight_gpus());
  mon::sampler fake_sampler(std::shared_ptr<vramkit::nvml_api>(fake), mon::sampler_options{});
  print_cost("8 fake GPUs x 4 processes + host", sample_cost(fake_sampler, 200));
  if (real) {
    auto api = vramkit::load_nvml();
    if (!api) {
      std::printf("real NVML: unavailable (%s)\n", api.error().reason.c_str());
    } else {
      mon::sampler real_sampler(std::move(api), mon::sampler_options{});
      // Wall time too: NVML calls block in the driver, which CPU time of this process misses.
      auto t0 = std::chrono::steady_clock::now();
      auto st = sample_cost(real_sampler, 50);
      double wall =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / 51;
      print_cost("real NVML, all GPUs + host", st);
      std::printf("%-44s wall time per sample: %.3f ms\n", "real NVML", wall * 1e3);
      mon::sampler_options gpu_opts;
      gpu_opts.read_host = false;
      mon::sampler gpu_only(vramkit::load_nvml(), gpu_opts);
      print_cost("real NVML, GPUs only", sample_cost(gpu_only, 50));
    }
  }

  // Rendering /metrics from a sample (what a scrape costs the server, minus HTTP).
  auto smp = fake_sampler.take();
  {
    std::vector<double> t;
    std::size_t bytes = 0;
    for (int i = 0; i < 500; ++i) {
      auto a = std::chrono::steady_clock::now();
      bytes = mon::render_metrics(smp, {}).size();
      t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count());
    }
    auto s = summarize(t);
    std::printf(
        "\nrender /metrics (8 GPUs, %zu bytes): median %.3f ms, p99 %.3f ms, max %.3f ms (n=%zu)\n",
        bytes, s.p50 * 1e3, s.p99 * 1e3, s.max * 1e3, s.n);
  }

#if defined(VRAMKIT_BENCH_HTTP)
  mon::exporter_options eo;
  eo.port = 0;
  eo.interval = std::chrono::milliseconds(1000);
  mon::exporter ex(std::make_unique<mon::sampler>(std::shared_ptr<vramkit::nvml_api>(fake),
                                                  mon::sampler_options{}),
                   eo);
  int port = ex.start();
  // The server's work per scrape, without HTTP: before, each scrape copied the latest sample out
  // of the history and rendered it (render_metrics); now exporter::metrics() copies the page
  // rendered once at the sample and appends the scrape counter.
  {
    mon::sample_history history(600);
    history.push(fake_sampler.take());
    auto time_calls = [](auto&& call) {
      std::vector<double> t;
      for (int i = 0; i < 2000; ++i) {
        auto a = std::chrono::steady_clock::now();
        call();
        t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count());
      }
      return summarize(t);
    };
    std::size_t sink = 0;
    const auto before =
        time_calls([&] { sink += mon::render_metrics(*history.latest(), {}).size(); });
    const auto now = time_calls([&] { sink += ex.metrics().size(); });
    std::printf(
        "per-scrape work (no HTTP): render per scrape (before) median %.1f us, p99 %.1f us; page "
        "rendered per sample (now) median %.1f us, p99 %.1f us: %.1fx less (n=%zu each, %zu "
        "bytes)\n",
        before.p50 * 1e6, before.p99 * 1e6, now.p50 * 1e6, now.p99 * 1e6,
        now.p50 > 0 ? before.p50 / now.p50 : 0.0, now.n, sink / (2 * now.n));
  }
  auto timed_gets = [&](const char* path, int n) {
    httplib::Client cli("127.0.0.1", port);
    cli.set_keep_alive(true);
    cli.set_tcp_nodelay(true);
    std::vector<double> t;
    for (int i = 0; i < n; ++i) {
      auto a = std::chrono::steady_clock::now();
      auto r = cli.Get(path);
      if (!r || r->status != 200) continue;
      t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count());
    }
    return summarize(t);
  };
  auto base = timed_gets("/healthz", 300);
  auto scrape = timed_gets("/metrics", 300);
  std::printf("baseline GET /healthz over loopback: median %.3f ms, p99 %.3f ms (n=%zu)\n",
              base.p50 * 1e3, base.p99 * 1e3, base.n);
  std::printf(
      "scrape GET /metrics over loopback:   median %.3f ms, p99 %.3f ms, max %.3f ms (n=%zu; "
      "target < 5 ms; %.2fx the baseline)\n",
      scrape.p50 * 1e3, scrape.p99 * 1e3, scrape.max * 1e3, scrape.n,
      base.p50 > 0 ? scrape.p50 / base.p50 : 0.0);

  // Load: 100 concurrent scrapers x 50 requests per round. Bounded: every thread stops at a
  // deadline.
  const int threads = 100, per_thread = 50;
  auto round = [&](std::vector<double>& lat, std::atomic<int>& errors) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    std::vector<std::thread> pool;
    pool.reserve(threads);
    std::mutex m;
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&] {
        httplib::Client cli("127.0.0.1", port);
        cli.set_keep_alive(true);
        cli.set_tcp_nodelay(true);
        cli.set_read_timeout(10, 0);
        std::vector<double> mine;
        for (int i = 0; i < per_thread && std::chrono::steady_clock::now() < deadline; ++i) {
          auto a = std::chrono::steady_clock::now();
          auto r = cli.Get("/metrics");
          if (!r || r->status != 200) {
            ++errors;
            continue;
          }
          mine.push_back(
              std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count());
        }
        std::lock_guard lock(m);
        lat.insert(lat.end(), mine.begin(), mine.end());
      });
    }
    for (auto& th : pool) th.join();
  };
  // Three rounds: the first warms up (thread pools, malloc arenas); memory must stay flat after.
  std::vector<std::uint64_t> rss{rss_bytes()};
  std::vector<double> lat;
  std::atomic<int> errors{0};
  auto t0 = std::chrono::steady_clock::now();
  for (int r = 0; r < 3; ++r) {
    lat.clear();
    round(lat, errors);
    rss.push_back(rss_bytes());
  }
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  auto s = summarize(lat);
  std::printf("\nload: %d scrapers x %d requests, 3 rounds in %.1f s; failed requests %d of %d\n",
              threads, per_thread, secs, errors.load(), 3 * threads * per_thread);
  std::printf(
      "load latency (last round): p50 %.2f ms, p90 %.2f ms, p99 %.2f ms, max %.2f ms (n=%zu)\n",
      s.p50 * 1e3, s.p90 * 1e3, s.p99 * 1e3, s.max * 1e3, s.n);
  std::printf(
      "RSS: start %.1f MiB, after rounds 1/2/3: %.1f / %.1f / %.1f MiB (growth over rounds 2-3: "
      "%+.1f MiB; target: flat)\n",
      static_cast<double>(rss[0]) / 1048576.0, static_cast<double>(rss[1]) / 1048576.0,
      static_cast<double>(rss[2]) / 1048576.0, static_cast<double>(rss[3]) / 1048576.0,
      (static_cast<double>(rss[3]) - static_cast<double>(rss[1])) / 1048576.0);
  ex.stop();
#else
  std::printf("\nHTTP scrape and load figures: not built (cpp-httplib was not found)\n");
#endif
  return 0;
}

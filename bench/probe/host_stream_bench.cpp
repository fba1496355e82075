// Side by side, in one run: the probe's all-thread host copy (vramkit::probe::run_host_probe, copy
// only) and a STREAM-style OpenMP copy loop (c[j] = a[j] over doubles, static schedule, first
// touch by the same loop, bytes counted read + written as STREAM does) at the same array size and
// thread count, alternating round by round so that a shared host's slow spells hit both alike.
// Prints both and the median of the per-round ratios (target: probe >= 0.95x STREAM); --json FILE
// writes them for bench/probe/compare.py. Exit 0 whether or not the target is met; 1 when a
// result fails to verify.
//
//   host_stream_bench [--size BYTES] [--threads N] [--rounds N] [--json FILE]
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "vramkit/core/units.hpp"
#include "vramkit/probe/host_probe.hpp"
#include "vramkit/probe/measurement.hpp"

namespace {

struct stream_result {
  std::vector<double> gbs;  // one per timed iteration
  bool verified = false;
};

// STREAM's copy kernel and run rules: NTIMES iterations, the first one dropped, best rate reported.
stream_result stream_copy(std::size_t bytes, int threads, int ntimes) {
  const std::size_t n = bytes / sizeof(double);
  std::unique_ptr<double[]> a(new double[n]), c(new double[n]);
  double* pa = a.get();
  double* pc = c.get();
#pragma omp parallel for schedule(static) num_threads(threads)
  for (std::size_t j = 0; j < n; ++j) {
    pa[j] = 1.0 + static_cast<double>(j % 1024);
    pc[j] = 0.0;
  }
  stream_result r;
  for (int k = 0; k < ntimes; ++k) {
    const auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel for schedule(static) num_threads(threads)
    for (std::size_t j = 0; j < n; ++j) pc[j] = pa[j];
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (k > 0) r.gbs.push_back(2.0 * static_cast<double>(n * sizeof(double)) / s / 1e9);
  }
  double sum_a = 0, sum_c = 0;
#pragma omp parallel for schedule(static) num_threads(threads) reduction(+ : sum_a, sum_c)
  for (std::size_t j = 0; j < n; ++j) {
    sum_a += pa[j];
    sum_c += pc[j];
  }
  r.verified = sum_a == sum_c && pc[n / 2] == pa[n / 2];
  return r;
}

double median(std::vector<double> v) {
  return vramkit::probe::sample_stats::of(std::move(v)).median;
}

}  // namespace

int main(int argc, char** argv) {
  std::uint64_t size = 0;
  int threads = 0, rounds = 7;
  std::string json_path;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "host_stream_bench: %s needs a value\n", arg.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    try {
      if (arg == "--size")
        size = vramkit::parse_bytes(value());
      else if (arg == "--threads")
        threads = std::stoi(value());
      else if (arg == "--rounds")
        rounds = std::max(1, std::stoi(value()));
      else if (arg == "--json")
        json_path = value();
      else {
        std::fprintf(stderr, "host_stream_bench: unknown argument '%s'\n", arg.c_str());
        return 2;
      }
    } catch (const std::exception& e) {
      std::fprintf(stderr, "host_stream_bench: %s: %s\n", arg.c_str(), e.what());
      return 2;
    }
  }

  vramkit::probe::probe_options o;
  o.only = {"host"};
  o.host_kernels = {"copy"};
  o.host_one_thread = false;
  o.host_buffer_bytes = size;
  o.host_threads = threads;
  std::vector<double> probe_medians, stream_medians, stream_best, ratios;
  std::uint64_t bytes = 0;
  int used_threads = 0;
  for (int round = 0; round < rounds; ++round) {
    vramkit::probe::probe_report report;
    vramkit::probe::run_host_probe(o, report);
    const auto it = std::find_if(report.results.begin(), report.results.end(),
                                 [](const auto& m) { return m.key == "host.bw.copy.all_threads"; });
    if (it == report.results.end() || !it->verified) {
      std::fprintf(stderr, "host_stream_bench: the probe reported no verified all-thread copy\n");
      return 1;
    }
    bytes = it->size_bytes;
    used_threads = static_cast<int>(it->extra.at("threads"));
    probe_medians.push_back(it->stats.median);
    // Same array size and thread count as the probe just used.
    const auto s = stream_copy(bytes, used_threads, 10);
    if (!s.verified) {
      std::fprintf(stderr, "host_stream_bench: the STREAM copy did not verify\n");
      return 1;
    }
    stream_medians.push_back(median(s.gbs));
    stream_best.push_back(*std::max_element(s.gbs.begin(), s.gbs.end()));
    ratios.push_back(probe_medians.back() / stream_medians.back());
    std::printf(
        "round %d: probe copy median %.2f GB/s | STREAM copy median %.2f GB/s, best %.2f GB/s | "
        "ratio %.3f\n",
        round + 1, probe_medians.back(), stream_medians.back(), stream_best.back(), ratios.back());
  }
  const double probe = median(probe_medians);
  const double stream = median(stream_medians);
  const double best = *std::max_element(stream_best.begin(), stream_best.end());
  const double ratio = median(ratios);
  std::printf(
      "\nhost copy, %d threads, 2 arrays of %s, bytes counted read + written (STREAM convention), "
      "%d rounds\n",
      used_threads, vramkit::format_bytes(static_cast<double>(bytes)).c_str(), rounds);
  std::printf("  %-40s %10.2f GB/s (median of round medians)\n", "vramkit probe all-thread copy",
              probe);
  std::printf("  %-40s %10.2f GB/s (median of round medians; best %.2f)\n",
              "STREAM-style OpenMP copy (baseline)", stream, best);
  std::printf("  %-40s %10.3fx  (target >= 0.95x: %s)\n", "ratio probe / STREAM (median of rounds)",
              ratio, ratio >= 0.95 ? "met" : "NOT met");
  std::printf("  %-40s %10.3fx .. %.3fx\n", "per-round ratios, min .. max",
              *std::min_element(ratios.begin(), ratios.end()),
              *std::max_element(ratios.begin(), ratios.end()));
  if (!json_path.empty()) {
    nlohmann::json j;
    j["size_bytes"] = bytes;
    j["threads"] = used_threads;
    j["convention"] = "read_plus_written";
    j["stream_copy"] = {{"median", stream}, {"best", best}, {"unit", "GB/s"}};
    j["probe_all_threads"] = {{"median", probe}, {"unit", "GB/s"}};
    j["ratio_probe_over_stream"] = ratio;
    j["rounds"] = rounds;
    j["round_ratios"] = ratios;
    std::ofstream(json_path) << j.dump(2) << "\n";
  }
  return 0;
}

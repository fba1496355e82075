// Simulation of memory-aware placement on a large cluster: 1,000 nodes x 8 GPUs (H200, H100 80 GB,
// A100 80 GB and 40 GB), a stream of jobs whose per-GPU sizes come from the planner for common
// models, Poisson arrivals and exponential run times. Every decision is the extender's: filter +
// score every node with place_on_node, take the best. Policies: pack and spread, against
// whole-GPU allocation (what GPU-count scheduling does) as the baseline, all on the same job
// stream. Usage: cluster_placement_sim [--nodes N] [--jobs N] [--load F] [--seed N]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <deque>
#include <queue>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "vramkit/cluster/placement.hpp"
#include "vramkit/core/sample_stats.hpp"
#include "vramkit/core/units.hpp"
#include "vramkit/core/version.hpp"

#if VRAMKIT_SIM_WITH_PLAN
#include "vramkit/plan/config_loader.hpp"
#include "vramkit/plan/memory_model.hpp"
#endif

namespace {

using namespace vramkit;
using namespace vramkit::cluster;

struct workload {
  std::string name;
  std::uint64_t bytes = 0;
};

struct gpu_type {
  const char* name;
  std::uint64_t total_bytes;  // as NVML reports it
  double share;               // of the nodes
};

// Totals as the driver reports them (nvidia-smi memory.total): H200 143771 MiB, H100 SXM 81559 MiB,
// A100 80 GB 81920 MiB, A100 40 GB 40960 MiB.
constexpr gpu_type k_types[] = {{"NVIDIA H200", 143771ULL * MiB, 0.25},
                                {"NVIDIA H100 80GB HBM3", 81559ULL * MiB, 0.35},
                                {"NVIDIA A100-SXM4-80GB", 81920ULL * MiB, 0.20},
                                {"NVIDIA A100-SXM4-40GB", 40960ULL * MiB, 0.20}};

std::vector<workload> workloads() {
  std::vector<workload> out;
#if VRAMKIT_SIM_WITH_PLAN
  struct spec {
    const char* model;
    const char* mode;
    int batch;
    bool ckpt;
    int prompt = 0;  // 0: the planner's default (512 prompt + 128 new tokens)
  };
  // Inference at two batch sizes for every language model; fine-tuning (bf16, AdamW) of the small
  // and mid-size ones; full fine-tuning of 7-8B models, which no single GPU holds (refused).
  const spec specs[] = {
      {"gpt2", "infer", 1, false},
      {"gpt2", "infer", 32, false},
      {"gpt2-medium", "infer", 16, false},
      {"gpt2-large", "infer", 16, false},
      {"gpt2-xl", "infer", 8, false},
      {"bert-base", "infer", 64, false, 384},
      {"bert-large", "infer", 32, false, 384},
      {"pythia-410m", "infer", 16, false},
      {"qwen2-0.5b", "infer", 16, false},
      {"tinyllama-1.1b", "infer", 8, false},
      {"llama-2-7b", "infer", 1, false},
      {"llama-2-7b", "infer", 16, false},
      {"llama-3-8b", "infer", 1, false},
      {"llama-3-8b", "infer", 8, false},
      {"mistral-7b", "infer", 4, false},
      {"qwen2-7b", "infer", 4, false},
      {"gpt2", "train", 8, false},
      {"gpt2-medium", "train", 8, false},
      {"gpt2-large", "train", 4, true},
      {"bert-base", "train", 32, false},
      {"bert-large", "train", 16, false},
      {"pythia-410m", "train", 8, false},
      {"qwen2-0.5b", "train", 8, true},
      {"tinyllama-1.1b", "train", 4, true},
      {"resnet-50", "train", 64, false},
      {"vit-b-16", "train", 64, false},
      {"llama-3-8b", "train", 1, true},
      {"mistral-7b", "train", 1, true},
  };
  for (const spec& s : specs) {
    try {
      plan::plan_request r;
      r.mode = plan::parse_mode(s.mode);
      r.prec = plan::parse_precision("bf16");
      r.batch = s.batch;
      r.ckpt = s.ckpt ? plan::checkpointing::full : plan::checkpointing::none;
      if (s.prompt > 0)
        r.prompt = s.prompt;  // encoders have 512 positions: prompt + new tokens must fit
      const plan::plan_result p = plan::make_plan(plan::preset_model(s.model), r);
      out.push_back({fmt::format("{} {} b{}{}", s.model, s.mode, s.batch, s.ckpt ? " ckpt" : ""),
                     p.device_peak_bytes});
    } catch (const std::exception& e) {
      std::fprintf(stderr, "skipping %s %s: %s\n", s.model, s.mode, e.what());
    }
  }
#endif
  if (out.empty()) {
    // Without the planner: weights + KV cache + activations + CUDA context, rounded, for the same
    // kinds of job (bf16). These are estimates, not measurements.
    out = {{"gpt2 infer", 1 * GiB},           {"gpt2-large infer", 3 * GiB},
           {"bert-large infer", 2 * GiB},     {"tinyllama-1.1b infer", 4 * GiB},
           {"llama-2-7b infer b1", 15 * GiB}, {"llama-2-7b infer b16", 26 * GiB},
           {"llama-3-8b infer b8", 22 * GiB}, {"mistral-7b infer b4", 18 * GiB},
           {"gpt2 train", 4 * GiB},           {"gpt2-medium train", 9 * GiB},
           {"bert-large train", 12 * GiB},    {"tinyllama-1.1b train", 24 * GiB},
           {"llama-3-8b train", 140 * GiB}};
  }
  return out;
}

enum class policy { pack, spread, whole_gpu };
const char* name_of(policy p) {
  return p == policy::pack     ? "pack (vramkit)"
         : p == policy::spread ? "spread (vramkit)"
                               : "whole GPU (baseline)";
}

struct job {
  double arrival = 0;
  double duration = 0;
  std::uint64_t bytes = 0;
  double start = -1;
};

struct outcome {
  policy pol;
  std::vector<double> latency_us;
  std::size_t refused = 0, queued = 0, started = 0;
  double mean_wait = 0, p95_wait = 0, makespan = 0;
  double mem_util = 0, gpu_busy = 0;  // time-averaged over [warmup, last arrival]
  double peak_mem_util = 0;
};

outcome simulate(policy pol, const std::vector<job>& stream, std::vector<node_state> cluster) {
  outcome o;
  o.pol = pol;
  std::vector<job> jobs = stream;
  std::uint64_t total_bytes = 0, max_capacity = 0;
  std::size_t gpu_count = 0;
  for (const auto& n : cluster)
    for (const auto& g : n.gpus) {
      total_bytes += g.total_bytes;
      max_capacity = std::max(max_capacity, g.total_bytes);
      ++gpu_count;
    }
  std::vector<std::vector<bool>> busy(cluster.size(), std::vector<bool>(8, false));
  const placement_options opts{
      pol == policy::spread ? placement_policy::spread : placement_policy::pack, {}};

  struct departure {
    double t;
    std::size_t node;
    int gpu;
    std::uint64_t bytes;
    bool operator>(const departure& d) const { return t > d.t; }
  };
  std::priority_queue<departure, std::vector<departure>, std::greater<>> running;
  std::deque<std::size_t> waiting;
  std::uint64_t used_bytes = 0;
  std::size_t busy_gpus = 0;
  double now = 0, mem_integral = 0, busy_integral = 0;
  const double warmup = stream.back().arrival * 0.2, horizon = stream.back().arrival;
  auto advance = [&](double t) {
    const double a = std::clamp(now, warmup, horizon), b = std::clamp(t, warmup, horizon);
    mem_integral += static_cast<double>(used_bytes) * (b - a);
    busy_integral += static_cast<double>(busy_gpus) * (b - a);
    now = t;
  };
  // One scheduling decision over every node, timed as the extender would spend it.
  auto try_place = [&](std::size_t j) -> bool {
    const auto t0 = std::chrono::steady_clock::now();
    std::size_t best_node = SIZE_MAX;
    int best_gpu = -1;
    double best_score = -1;
    if (pol == policy::whole_gpu) {
      // GPU-count scheduling, given the benefit of knowing capacities: the smallest idle GPU that
      // can hold the job.
      std::uint64_t best_total = UINT64_MAX;
      for (std::size_t n = 0; n < cluster.size(); ++n)
        for (const auto& g : cluster[n].gpus)
          if (!busy[n][g.index] && g.total_bytes >= jobs[j].bytes && g.total_bytes < best_total) {
            best_total = g.total_bytes;
            best_node = n;
            best_gpu = g.index;
          }
    } else {
      for (std::size_t n = 0; n < cluster.size(); ++n) {
        const placement p = place_on_node(jobs[j].bytes, cluster[n], opts);
        if (p.fits && p.score > best_score) {
          best_score = p.score;
          best_node = n;
          best_gpu = p.gpu_index;
        }
      }
    }
    o.latency_us.push_back(
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
    if (best_node == SIZE_MAX) return false;
    gpu_state& g = cluster[best_node].gpus[static_cast<std::size_t>(best_gpu)];
    g.free_bytes -= jobs[j].bytes;
    g.used_bytes += jobs[j].bytes;
    if (pol == policy::whole_gpu) {
      busy[best_node][static_cast<std::size_t>(best_gpu)] = true;
      ++busy_gpus;
    } else if (g.used_bytes == jobs[j].bytes) {
      ++busy_gpus;
    }
    used_bytes += jobs[j].bytes;
    o.peak_mem_util = std::max(o.peak_mem_util,
                               static_cast<double>(used_bytes) / static_cast<double>(total_bytes));
    jobs[j].start = now;
    ++o.started;
    running.push({now + jobs[j].duration, best_node, best_gpu, jobs[j].bytes});
    return true;
  };
  auto release = [&](const departure& d) {
    gpu_state& g = cluster[d.node].gpus[static_cast<std::size_t>(d.gpu)];
    g.free_bytes += d.bytes;
    g.used_bytes -= d.bytes;
    used_bytes -= d.bytes;
    if (pol == policy::whole_gpu) {
      busy[d.node][static_cast<std::size_t>(d.gpu)] = false;
      --busy_gpus;
    } else if (g.used_bytes == 0) {
      --busy_gpus;
    }
  };

  // Free memory on the emptiest GPU (memory policies) or the largest idle GPU (whole GPU).
  auto largest_room = [&]() -> std::uint64_t {
    std::uint64_t room = 0;
    for (std::size_t n = 0; n < cluster.size(); ++n)
      for (const auto& g : cluster[n].gpus) {
        if (pol == policy::whole_gpu) {
          if (!busy[n][static_cast<std::size_t>(g.index)]) room = std::max(room, g.total_bytes);
        } else {
          room = std::max(room, g.free_bytes);
        }
      }
    return room;
  };

  std::size_t next = 0;
  while (next < jobs.size() || !running.empty()) {
    const bool arrival_first =
        next < jobs.size() && (running.empty() || jobs[next].arrival <= running.top().t);
    if (arrival_first) {
      advance(jobs[next].arrival);
      if (jobs[next].bytes > max_capacity) {
        ++o.refused;  // no GPU type can hold it: refused at submission, never queued
      } else if (!waiting.empty() || !try_place(next)) {
        waiting.push_back(next);  // FIFO: a new job does not overtake those already waiting
        ++o.queued;
      }
      ++next;
    } else {
      advance(running.top().t);
      release(running.top());
      running.pop();
      // Queued jobs in order; up to 32 per departure may be skipped over (a bounded backfill).
      // The largest room anywhere lets the simulation skip a job that cannot fit without a full
      // decision; it stands for the scheduler's own queue logic and is not counted as a decision.
      std::size_t skipped = 0;
      std::uint64_t room = largest_room();
      for (auto it = waiting.begin(); it != waiting.end() && skipped < 32;) {
        if (jobs[*it].bytes <= room && try_place(*it)) {
          it = waiting.erase(it);
          room = largest_room();
        } else {
          ++it;
          ++skipped;
        }
      }
    }
  }
  o.makespan = now;
  std::vector<double> waits;
  for (const job& j : jobs)
    if (j.start >= 0) waits.push_back(j.start - j.arrival);
  double sum = 0;
  for (double w : waits) sum += w;
  o.mean_wait = waits.empty() ? 0 : sum / static_cast<double>(waits.size());
  o.p95_wait = vramkit::percentile(waits, 0.95);
  o.mem_util = mem_integral / ((horizon - warmup) * static_cast<double>(total_bytes));
  o.gpu_busy = busy_integral / ((horizon - warmup) * static_cast<double>(gpu_count));
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  int nodes = 1000;
  std::size_t job_count = 100000;
  double load = 0.85;
  unsigned seed = 1;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--nodes"))
      nodes = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--jobs"))
      job_count = static_cast<std::size_t>(std::atol(argv[i + 1]));
    else if (!std::strcmp(argv[i], "--load"))
      load = std::atof(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--seed"))
      seed = static_cast<unsigned>(std::atoi(argv[i + 1]));
    else {
      std::fprintf(stderr,
                   "usage: cluster_placement_sim [--nodes N] [--jobs N] [--load F] [--seed N]\n");
      return 2;
    }
  }
  if (nodes <= 0 || job_count == 0 || !(load > 0)) {
    std::fprintf(stderr, "cluster_placement_sim: --nodes, --jobs and --load must be above zero\n");
    return 2;
  }

  std::vector<node_state> cluster;
  std::uint64_t total_bytes = 0, max_capacity = 0;
  for (int n = 0; n < nodes; ++n) {
    // Node types in blocks by share, so every run sees the same mix.
    double acc = 0;
    const gpu_type* t = &k_types[0];
    for (const gpu_type& c : k_types) {
      acc += c.share;
      if (static_cast<double>(n) < acc * nodes) {
        t = &c;
        break;
      }
    }
    node_state node{"node-" + std::to_string(n), {}};
    for (int g = 0; g < 8; ++g) {
      gpu_state s;
      s.index = g;
      s.name = t->name;
      s.total_bytes = t->total_bytes;
      s.free_bytes = t->total_bytes;
      node.gpus.push_back(s);
      total_bytes += s.total_bytes;
      max_capacity = std::max(max_capacity, s.total_bytes);
    }
    cluster.push_back(std::move(node));
  }

  const std::vector<workload> mix = workloads();
  double mean_bytes = 0;
  std::size_t placeable = 0;
  for (const auto& w : mix)
    if (w.bytes <= max_capacity) {
      mean_bytes += static_cast<double>(w.bytes);
      ++placeable;
    }
  mean_bytes /= static_cast<double>(std::max<std::size_t>(1, placeable));
  // Arrival rate so that placeable jobs would hold `load` of all GPU memory on average (mean run
  // time 1.0): Little's law, concurrent jobs = rate x mean time.
  const double rate = load * static_cast<double>(total_bytes) / mean_bytes;
  std::mt19937_64 rng(seed);
  std::exponential_distribution<double> gap(rate), run(1.0);
  std::uniform_int_distribution<std::size_t> pick(0, mix.size() - 1);
  std::vector<job> stream(job_count);
  double t = 0;
  for (auto& j : stream) {
    t += gap(rng);
    j.arrival = t;
    j.duration = run(rng);
    j.bytes = mix[pick(rng)].bytes;
  }

  std::printf("# vramkit cluster placement simulation\n\n");
  std::printf("%s\n\n", build_summary().c_str());
  std::printf(
      "- cluster: %d nodes x 8 GPUs = %d GPUs, %s of GPU memory (25%% H200 141 GB, 35%% H100 80 "
      "GB, "
      "20%% A100 80 GB, 20%% A100 40 GB)\n",
      nodes, nodes * 8, format_bytes(static_cast<double>(total_bytes)).c_str());
  std::printf(
      "- jobs: %zu, Poisson arrivals, exponential run time (mean 1.0), offered memory load %.2f; "
      "per-GPU sizes from %s, drawn uniformly:\n\n",
      job_count, load,
#if VRAMKIT_SIM_WITH_PLAN
      "the planner (make_plan, bf16, device_peak_bytes)"
#else
      "a fixed table (no planner in this build)"
#endif
  );
  std::printf("| workload | device peak per GPU |\n| --- | ---: |\n");
  for (const auto& w : mix)
    std::printf("| %s | %s%s |\n", w.name.c_str(),
                format_bytes(static_cast<double>(w.bytes)).c_str(),
                w.bytes > max_capacity ? " (larger than any GPU)" : "");
  std::printf(
      "\nEvery placement decision scans all %d nodes (the extender's filter + prioritize over a "
      "full "
      "node list); latency is one decision, wall clock on this host.\n\n",
      nodes);

  std::vector<outcome> results;
  for (policy p : {policy::whole_gpu, policy::pack, policy::spread}) {
    const auto t0 = std::chrono::steady_clock::now();
    results.push_back(simulate(p, stream, cluster));
    std::fprintf(stderr, "%s: simulated in %.1f s\n", name_of(p),
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  const outcome& base = results[0];
  std::printf(
      "| policy | decisions | latency median | p99 | max | memory used (avg) | vs baseline | peak "
      "| GPUs busy | "
      "refused | queued | mean wait | p95 wait | makespan | vs baseline |\n");
  std::printf(
      "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | "
      "---: | ---: |\n");
  for (const outcome& o : results) {
    std::printf(
        "| %s | %zu | %.1f us | %.1f us | %.1f us | %.1f%% | %.2fx | %.1f%% | %.1f%% | %zu | %zu | "
        "%.3f | %.3f | %.2f | %.2fx |\n",
        name_of(o.pol), o.latency_us.size(), vramkit::percentile(o.latency_us, 0.5),
        vramkit::percentile(o.latency_us, 0.99), vramkit::percentile(o.latency_us, 1.0),
        100 * o.mem_util, o.mem_util / base.mem_util, 100 * o.peak_mem_util, 100 * o.gpu_busy,
        o.refused, o.queued, o.mean_wait, o.p95_wait, o.makespan, o.makespan / base.makespan);
  }
  std::printf(
      "\nmemory used: time average of job bytes / all GPU memory, from 20%% of the arrivals to the "
      "last "
      "arrival. Waits and makespan in units of the mean run time. A refused job is larger than "
      "every GPU. "
      "Queued jobs wait in arrival order; each departure retries them, skipping at most 32 that "
      "still do "
      "not fit.\n");
  return 0;
}

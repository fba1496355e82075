// Simulation of GPU sharing policies on a cluster at steady state, answering two operator
// questions at a target p95 queue wait: how many GPUs does a given job stream need, and how many
// jobs per unit time does a given cluster sustain? Policies, all on the same job streams:
//   whole GPU          one job per GPU (GPU-count scheduling), the smallest idle GPU that holds it
//   shards by count    Slurm GRES shards without memory: a fixed number of slots per GPU; a job
//                      whose memory does not fit next to the others fails (out of memory) and is
//                      resubmitted for a whole GPU
//   MIG-like           fixed partitions (half the nodes with whole GPUs, half with every GPU as
//                      4/8 + 2/8 + 1/8 + 1/8 of the memory with 3/7, 2/7, 1/7, 1/7 of the
//                      compute); a job takes the smallest partition that holds its request;
//                      multi-GPU jobs take whole GPUs
//   HAMi-style         placement by declared requests only (no live data): node binpack, GPU
//                      spread (HAMi's defaults), at most 10 jobs per GPU, requests capped
//   requests, spread   vramkit spread's scoring on requests alone, to isolate what live data adds
//   vramkit pack /     requests reserved until the node's exporter shows the job's real use, then
//   vramkit spread     the observed figure (extender reservations + live data); capped; the
//                      extender's two policies
// Jobs: per-GPU sizes from the planner for common models; real use = estimate x a ratio drawn
// from the planner's measured accuracy on an H200 (measured / predicted, nvidia-smi column of
// docs/results/2026-11-29-h200-plan-accuracy.md); requests = estimate + 10%, in whole GiB.
// Multi-GPU training jobs (2, 4, 8 GPUs on one node), long-running inference services, and a
// slowdown when jobs share a GPU (each job has a compute demand; a GPU whose jobs demand more
// than 1 runs them all proportionally slower; --no-slowdown turns it off). Usage:
// cluster_placement_sim [--nodes N] [--target-p95 W] [--horizon T] [--seed N] [--no-slowdown]
// [--hand-requests] [--quick]; --hand-requests: requests written by hand (estimate x 0.9-2.5,
// rounded up to sizes people write) instead of the planner's.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <deque>
#include <limits>
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

struct workload {
  std::string name;
  std::uint64_t bytes = 0;  // the planner's per-GPU estimate
  bool train = false;
  double demand = 1.0;  // fraction of a whole GPU's compute the job can use
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

// measured / predicted GPU memory (nvidia-smi GiB) of the 25 cases of
// docs/results/2026-11-29-h200-plan-accuracy.md (H200, torch 2.11, 2026-11-29).
constexpr double k_accuracy[][2] = {
    {15.55, 15.51}, {25.70, 25.64}, {7.56, 7.55},   {8.41, 8.39},   {27.57, 27.79},
    {29.77, 29.71}, {37.96, 36.96}, {24.76, 24.43}, {36.89, 36.73}, {18.80, 18.49},
    {10.67, 10.66}, {8.29, 8.25},   {12.69, 13.29}, {10.62, 11.52}, {7.29, 7.43},
    {4.12, 4.32},   {5.81, 5.58},   {3.44, 3.14},   {4.37, 4.31},   {16.25, 16.18},
    {14.79, 14.71}, {15.50, 15.42}, {1.96, 1.88},   {1.82, 1.76},   {18.06, 17.69}};

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
      if (s.prompt > 0) r.prompt = s.prompt;
      const plan::plan_result p = plan::make_plan(plan::preset_model(s.model), r);
      const bool train = std::strcmp(s.mode, "train") == 0;
      // Compute demand (an assumption, not a measurement): training saturates a GPU; batched
      // inference uses about half of it; one-sequence decoding a fifth.
      const double demand = train ? 1.0 : s.batch == 1 ? 0.2 : 0.5;
      out.push_back({fmt::format("{} {} b{}{}", s.model, s.mode, s.batch, s.ckpt ? " ckpt" : ""),
                     p.device_peak_bytes, train, demand});
    } catch (const std::exception& e) {
      std::fprintf(stderr, "skipping %s %s: %s\n", s.model, s.mode, e.what());
    }
  }
#endif
  if (out.empty()) {
    // Without the planner: rounded estimates for the same kinds of job (bf16), not measurements.
    out = {{"gpt2 infer", 1 * GiB, false, 0.2},
           {"gpt2-large infer", 3 * GiB, false, 0.5},
           {"bert-large infer", 2 * GiB, false, 0.5},
           {"tinyllama-1.1b infer", 4 * GiB, false, 0.5},
           {"llama-2-7b infer b1", 15 * GiB, false, 0.2},
           {"llama-2-7b infer b16", 26 * GiB, false, 0.5},
           {"llama-3-8b infer b8", 22 * GiB, false, 0.5},
           {"gpt2 train", 4 * GiB, true, 1.0},
           {"gpt2-medium train", 9 * GiB, true, 1.0},
           {"bert-large train", 12 * GiB, true, 1.0},
           {"tinyllama-1.1b train", 24 * GiB, true, 1.0},
           {"llama-3-8b train ckpt", 76 * GiB, true, 1.0}};
  }
  return out;
}

enum class policy { whole_gpu, shards, mig, hami, requests_spread, vramkit_pack, vramkit_spread };
constexpr policy k_policies[] = {
    policy::whole_gpu,       policy::shards,       policy::mig,           policy::hami,
    policy::requests_spread, policy::vramkit_pack, policy::vramkit_spread};
bool is_vramkit(policy p) { return p == policy::vramkit_pack || p == policy::vramkit_spread; }
const char* name_of(policy p) {
  switch (p) {
    case policy::whole_gpu:
      return "whole GPU";
    case policy::shards:
      return "shards by count (4/GPU)";
    case policy::mig:
      return "MIG-like partitions";
    case policy::hami:
      return "HAMi-style (requests only)";
    case policy::requests_spread:
      return "requests only, spread";
    case policy::vramkit_pack:
      return "vramkit pack";
    case policy::vramkit_spread:
      return "vramkit spread";
  }
  return "?";
}

constexpr int k_shards_per_gpu = 4;       // a common time-slicing / shard count
constexpr int k_hami_split = 10;          // HAMi's default deviceSplitCount
constexpr double k_margin = 0.10;         // requests: planner estimate + 10%, whole GiB
constexpr double k_observe_delay = 0.02;  // reservation until the exporter shows the job
constexpr double k_retry_growth = 1.5;    // an out-of-memory job asks again for 1.5x

struct job {
  double arrival = 0;
  double work = 0;  // run time at full speed
  std::uint64_t estimate = 0;
  std::uint64_t request = 0;  // per GPU, as submitted
  std::uint64_t real = 0;     // per GPU
  int gpus = 1;
  double demand = 1.0;
  bool service = false;
};

struct stream_options {
  double rate = 100;  // arrivals per unit time (mean batch run time = 1)
  double horizon = 60;
  double service_share = 0.10;
  double service_mean = 5.0;
  double multi_gpu_share = 0.25;  // of training jobs
  bool hand_requests = false;     // requests written by hand instead of from the planner
  unsigned seed = 1;
};

std::uint64_t request_of(const job& j);

// A request written by hand: the estimate times a factor drawn log-uniformly from [0.9, 2.5]
// (an assumption: people round up generously, and sometimes under-ask), rounded up to a size
// people write.
std::uint64_t hand_request(std::uint64_t estimate, double factor) {
  constexpr std::uint64_t ladder[] = {2, 4, 8, 12, 16, 24, 32, 40, 48, 64, 80, 96, 120, 140};
  const double want = static_cast<double>(estimate) * factor;
  for (std::uint64_t g : ladder)
    if (static_cast<double>(g * GiB) >= want) return g * GiB;
  return ladder[std::size(ladder) - 1] * GiB;
}

std::vector<job> make_stream(const std::vector<workload>& mix, const stream_options& o) {
  std::mt19937_64 rng(o.seed);
  std::exponential_distribution<double> gap(o.rate), run(1.0), serve(1.0 / o.service_mean);
  std::uniform_real_distribution<double> u(0, 1);
  std::vector<std::size_t> infer;
  for (std::size_t i = 0; i < mix.size(); ++i)
    if (!mix[i].train) infer.push_back(i);
  std::uniform_int_distribution<std::size_t> pick(0, mix.size() - 1),
      pick_infer(0, infer.size() - 1), pick_ratio(0, std::size(k_accuracy) - 1);
  const int widths[] = {2, 4, 8};
  std::uniform_int_distribution<int> pick_width(0, 2);
  std::vector<job> out;
  double t = 0;
  while (true) {
    t += gap(rng);
    if (t > o.horizon) break;
    job j;
    j.arrival = t;
    const bool service = !infer.empty() && u(rng) < o.service_share;
    const workload& w = service ? mix[infer[pick_infer(rng)]] : mix[pick(rng)];
    j.service = service;
    j.work = service ? serve(rng) : run(rng);
    j.estimate = w.bytes;
    const auto& acc = k_accuracy[pick_ratio(rng)];
    j.real = static_cast<std::uint64_t>(static_cast<double>(w.bytes) * acc[0] / acc[1]);
    j.demand = service ? 0.4 : w.demand;
    if (w.train && u(rng) < o.multi_gpu_share) j.gpus = widths[pick_width(rng)];
    const double factor = std::exp(std::log(0.9) + u(rng) * (std::log(2.5) - std::log(0.9)));
    j.request = o.hand_requests ? hand_request(j.estimate, factor) : request_of(j);
    out.push_back(j);
  }
  return out;
}

std::uint64_t request_of(const job& j) {
  const double b = static_cast<double>(j.estimate) * (1.0 + k_margin);
  return static_cast<std::uint64_t>(std::ceil(b / static_cast<double>(GiB))) * GiB;
}

// --- the cluster under one policy --------------------------------------------------------------

struct partition {  // MIG-like: a fixed slice of one GPU
  std::uint64_t bytes = 0;
  double compute = 1.0;
  int holder = -1;  // running job index
};

struct gpu {
  std::uint64_t total = 0;
  std::uint64_t real_used = 0;     // what the jobs on it really hold
  std::uint64_t requested = 0;     // sum of requests (HAMi's view)
  std::uint64_t vramkit_used = 0;  // observed real + open reservations (vramkit's view)
  int jobs = 0;
  double demand = 0;
  std::vector<partition> parts;  // MIG-like only
  std::vector<int> running;      // job indices
};

struct node {
  std::vector<gpu> gpus;
};

struct placement_choice {
  int node = -1;
  std::vector<int> gpus;
  std::vector<int> parts;  // MIG-like: partition per GPU
};

struct run_result {
  bool stable = true;
  double p95_wait = 0;
  double p95_wait_late = 0;  // of the jobs that arrived in the second half of the window
  double mean_wait = 0;
  std::size_t jobs = 0;        // arrivals in the measurement window
  std::size_t attempts = 0;    // starts, including ones that ran out of memory
  std::size_t oom = 0;         // starts that ran out of memory
  double throughput = 0;       // completed jobs per unit time (arrivals in the window)
  double mem_used = 0;         // time-averaged real bytes / total GPU memory
  double busy_gpus = 0;        // time-averaged share of GPUs with at least one job
  double slowdown = 0;         // mean elapsed / work of completed jobs
  double occupancy_drift = 0;  // (second half - first half) / mean of the jobs in the system
  std::size_t gpu_count = 0;
};

class simulation {
 public:
  simulation(policy p, int nodes, const std::vector<job>& stream, double warmup, double horizon,
             bool slowdown)
      : pol_(p), jobs_(stream), warmup_(warmup), horizon_(horizon), slowdown_(slowdown) {
    build(nodes);
    state_.resize(jobs_.size());
  }

  run_result run() {
    std::size_t next = 0;
    while (next < jobs_.size() || !events_.empty()) {
      if (!stable_) break;
      const bool arrival =
          next < jobs_.size() && (events_.empty() || jobs_[next].arrival <= events_.top().t);
      if (arrival) {
        advance(jobs_[next].arrival);
        const int j = static_cast<int>(next++);
        state_[static_cast<std::size_t>(j)].request = jobs_[static_cast<std::size_t>(j)].request;
        if (!try_start(j)) enqueue(j);  // tried at once, as a new pod is, queue or not
      } else {
        const event e = events_.top();
        events_.pop();
        advance(e.t);
        handle(e);
      }
    }
    return finish();
  }

 private:
  struct job_state {
    std::uint64_t request = 0;  // per GPU, grows after an out-of-memory failure
    bool whole_retry = false;   // shards: resubmitted for a whole GPU
    double start = -1;          // of the successful attempt
    double end = -1;
    double remaining = 0;
    double rate = 1;
    double since = 0;
    int version = 0;
    bool confirmed = false;
    placement_choice where;
  };
  enum class kind { finish, observe };
  struct event {
    double t;
    kind k;
    int job;
    int version;
    bool operator>(const event& o) const { return t > o.t; }
  };

  void build(int nodes) {
    for (int n = 0; n < nodes; ++n) {
      double acc = 0;
      const gpu_type* t = &k_types[0];
      for (const gpu_type& c : k_types) {
        acc += c.share;
        if (static_cast<double>(n) + 0.5 < acc * nodes) {
          t = &c;
          break;
        }
      }
      node nd;
      for (int g = 0; g < 8; ++g) {
        gpu x;
        x.total = t->total_bytes;
        if (pol_ == policy::mig) {
          // Half the nodes of each type keep whole GPUs (for multi-GPU and large jobs), half
          // are partitioned.
          if (n % 2 == 0) {
            x.parts = {{x.total, 1.0, -1}};
          } else {
            x.parts = {{x.total / 2, 3.0 / 7, -1},
                       {x.total / 4, 2.0 / 7, -1},
                       {x.total / 8, 1.0 / 7, -1},
                       {x.total / 8, 1.0 / 7, -1}};
          }
        }
        nd.gpus.push_back(std::move(x));
        total_bytes_ += t->total_bytes;
        max_total_ = std::max(max_total_, t->total_bytes);
        ++gpu_count_;
      }
      nodes_.push_back(std::move(nd));
    }
  }

  // --- placement per policy -------------------------------------------------------------------

  // The GPUs of `nd` that can take one GPU's share of job `j`, each with a score (higher better).
  void candidates(int j, const node& nd, std::vector<std::pair<double, int>>& out,
                  std::vector<int>& parts) const {
    const job& jb = jobs_[static_cast<std::size_t>(j)];
    const job_state& st = state_[static_cast<std::size_t>(j)];
    out.clear();
    parts.assign(nd.gpus.size(), -1);
    for (int g = 0; g < static_cast<int>(nd.gpus.size()); ++g) {
      const gpu& x = nd.gpus[static_cast<std::size_t>(g)];
      const double total = static_cast<double>(x.total);
      switch (pol_) {
        case policy::whole_gpu:
          // The user picks a GPU type that holds the job: the smallest one wins.
          if (x.jobs == 0 && x.total >= jb.real) out.emplace_back(-total, g);
          break;
        case policy::shards: {
          const int need = st.whole_retry ? k_shards_per_gpu : 1;
          if (k_shards_per_gpu - x.jobs < need) break;
          if (st.whole_retry && x.total < jb.real) break;    // after a failure: a GPU that holds it
          out.emplace_back(static_cast<double>(x.jobs), g);  // pack: the fullest GPU first
          break;
        }
        case policy::mig: {
          int best = -1;
          for (int p = 0; p < static_cast<int>(x.parts.size()); ++p) {
            const partition& pt = x.parts[static_cast<std::size_t>(p)];
            if (pt.holder >= 0 || pt.bytes < st.request) continue;
            // NCCL does not run across MIG instances: multi-GPU jobs take whole GPUs.
            if (jb.gpus > 1 && pt.compute < 1.0) continue;
            if (best < 0 || pt.bytes < x.parts[static_cast<std::size_t>(best)].bytes) best = p;
          }
          if (best >= 0) {
            parts[static_cast<std::size_t>(g)] = best;
            out.emplace_back(-static_cast<double>(x.parts[static_cast<std::size_t>(best)].bytes),
                             g);
          }
          break;
        }
        case policy::hami:
          if (x.jobs >= k_hami_split || x.requested + st.request > x.total) break;
          // GPU policy spread: the GPU with the least requested.
          out.emplace_back(-static_cast<double>(x.requested) / total, g);
          break;
        case policy::requests_spread:
          // vramkit spread's scoring over requests alone: what live data adds, isolated.
          if (x.requested + st.request > x.total) break;
          out.emplace_back(1.0 - static_cast<double>(x.requested + st.request) / total, g);
          break;
        case policy::vramkit_pack:
        case policy::vramkit_spread: {
          if (x.vramkit_used + st.request > x.total) break;
          // pack: the GPU left fullest; spread: the GPU left emptiest (place_on_node's scores).
          const double full = static_cast<double>(x.vramkit_used + st.request) / total;
          out.emplace_back(pol_ == policy::vramkit_pack ? full : 1.0 - full, g);
          break;
        }
      }
    }
  }

  // The best node and GPUs for job `j`, or none.
  placement_choice choose(int j) const {
    const job& jb = jobs_[static_cast<std::size_t>(j)];
    placement_choice best;
    double best_score = -std::numeric_limits<double>::infinity();
    std::vector<std::pair<double, int>> c;
    std::vector<int> parts;
    for (int n = 0; n < static_cast<int>(nodes_.size()); ++n) {
      candidates(j, nodes_[static_cast<std::size_t>(n)], c, parts);
      if (static_cast<int>(c.size()) < jb.gpus) continue;
      std::partial_sort(c.begin(), c.begin() + jb.gpus, c.end(),
                        [](const auto& a, const auto& b) { return a.first > b.first; });
      double score = 0;
      for (int k = 0; k < jb.gpus; ++k) score += c[static_cast<std::size_t>(k)].first;
      // Node policy: HAMi binpack by requested share, the others by their GPU score.
      if (pol_ == policy::hami) {
        double req = 0, tot = 0;
        for (const gpu& x : nodes_[static_cast<std::size_t>(n)].gpus) {
          req += static_cast<double>(x.requested);
          tot += static_cast<double>(x.total);
        }
        score = req / tot;
      }
      if (score > best_score) {
        best_score = score;
        best.node = n;
        best.gpus.clear();
        best.parts.clear();
        for (int k = 0; k < jb.gpus; ++k) {
          const int g = c[static_cast<std::size_t>(k)].second;
          best.gpus.push_back(g);
          best.parts.push_back(parts[static_cast<std::size_t>(g)]);
        }
      }
    }
    return best;
  }

  // Whether the job runs out of memory when it starts there: the policies that cap a job fail
  // it when its real use passes its cap; shards by count when the GPU's memory runs out.
  bool runs_out(int j, const placement_choice& c) const {
    const job& jb = jobs_[static_cast<std::size_t>(j)];
    const job_state& st = state_[static_cast<std::size_t>(j)];
    for (std::size_t k = 0; k < c.gpus.size(); ++k) {
      const gpu& x =
          nodes_[static_cast<std::size_t>(c.node)].gpus[static_cast<std::size_t>(c.gpus[k])];
      switch (pol_) {
        case policy::whole_gpu:
          if (jb.real > x.total) return true;
          break;
        case policy::shards:
          if (x.real_used + jb.real > x.total) return true;
          break;
        case policy::mig:
          if (jb.real > x.parts[static_cast<std::size_t>(c.parts[k])].bytes) return true;
          break;
        case policy::hami:
        case policy::requests_spread:
        case policy::vramkit_pack:
        case policy::vramkit_spread:
          if (jb.real > st.request || x.real_used + jb.real > x.total) return true;
          break;
      }
    }
    return false;
  }

  bool try_start(int j) {
    ++decisions_;
    placement_choice c = choose(j);
    if (c.node < 0) return false;
    job_state& st = state_[static_cast<std::size_t>(j)];
    const job& jb = jobs_[static_cast<std::size_t>(j)];
    ++attempts_;
    if (jb.arrival >= warmup_ && jb.arrival <= horizon_) ++window_attempts_;
    if (runs_out(j, c)) {
      // The job dies at its first allocations (models allocate their peak at start) and is
      // submitted again: with a larger request, or for a whole GPU under shards by count.
      if (jb.arrival >= warmup_ && jb.arrival <= horizon_) ++window_oom_;
      if (pol_ == policy::shards)
        st.whole_retry = true;
      else
        st.request =
            std::min(max_total_,
                     static_cast<std::uint64_t>(static_cast<double>(st.request) * k_retry_growth));
      enqueue(j);
      return true;  // the attempt consumed the decision; the job waits again
    }
    st.where = c;
    st.start = now_;
    st.remaining = jb.work;
    st.since = now_;
    st.confirmed = false;
    for (std::size_t k = 0; k < c.gpus.size(); ++k) {
      gpu& x = nodes_[static_cast<std::size_t>(c.node)].gpus[static_cast<std::size_t>(c.gpus[k])];
      const bool first = x.jobs == 0;
      x.jobs += (pol_ == policy::shards && st.whole_retry) ? k_shards_per_gpu : 1;
      x.demand += jb.demand;
      x.real_used += jb.real;
      x.requested += st.request;
      x.vramkit_used += st.request;
      x.running.push_back(j);
      if (pol_ == policy::mig) x.parts[static_cast<std::size_t>(c.parts[k])].holder = j;
      if (first) ++busy_;
      real_used_ += jb.real;
    }
    ++running_jobs_;
    if (is_vramkit(pol_)) events_.push({now_ + k_observe_delay, kind::observe, j, 0});
    rerate(c);
    return true;
  }

  void enqueue(int j) {
    waiting_.push_back(j);
    if (waiting_.size() > 40 * gpu_count_) stable_ = false;  // the queue grows without bound
  }

  // The job's speed: 1 alone; proportionally slower on a GPU whose jobs demand more than it has;
  // on a MIG-like partition its compute share over its demand. Multi-GPU jobs run at their
  // slowest GPU's pace.
  double rate_of(int j) const {
    if (!slowdown_) return 1.0;
    const job_state& st = state_[static_cast<std::size_t>(j)];
    const job& jb = jobs_[static_cast<std::size_t>(j)];
    double r = 1.0;
    for (std::size_t k = 0; k < st.where.gpus.size(); ++k) {
      const gpu& x = nodes_[static_cast<std::size_t>(st.where.node)]
                         .gpus[static_cast<std::size_t>(st.where.gpus[k])];
      if (pol_ == policy::mig) {
        r = std::min(r, x.parts[static_cast<std::size_t>(st.where.parts[k])].compute / jb.demand);
      } else if (x.demand > 1.0) {
        r = std::min(r, 1.0 / x.demand);
      }
    }
    return std::min(r, 1.0);
  }

  // Recomputes the speed of every job on the GPUs of `c` and reschedules its finish.
  void rerate(const placement_choice& c) {
    for (int g : c.gpus) {
      for (int j :
           nodes_[static_cast<std::size_t>(c.node)].gpus[static_cast<std::size_t>(g)].running) {
        job_state& st = state_[static_cast<std::size_t>(j)];
        st.remaining -= st.rate * (now_ - st.since);
        st.since = now_;
        st.rate = rate_of(j);
        ++st.version;
        events_.push({now_ + std::max(0.0, st.remaining) / st.rate, kind::finish, j, st.version});
      }
    }
  }

  void handle(const event& e) {
    job_state& st = state_[static_cast<std::size_t>(e.job)];
    const job& jb = jobs_[static_cast<std::size_t>(e.job)];
    if (e.k == kind::observe) {
      if (st.end >= 0 || st.confirmed) return;
      // The exporter now shows the job: its reservation gives way to the observed figure.
      st.confirmed = true;
      for (int g : st.where.gpus) {
        gpu& x = nodes_[static_cast<std::size_t>(st.where.node)].gpus[static_cast<std::size_t>(g)];
        x.vramkit_used = x.vramkit_used - st.request + jb.real;
      }
      drain();
      return;
    }
    if (e.version != st.version) return;
    st.end = now_;
    const placement_choice c = st.where;
    for (std::size_t k = 0; k < c.gpus.size(); ++k) {
      gpu& x = nodes_[static_cast<std::size_t>(c.node)].gpus[static_cast<std::size_t>(c.gpus[k])];
      x.jobs -= (pol_ == policy::shards && st.whole_retry) ? k_shards_per_gpu : 1;
      x.demand -= jb.demand;
      x.real_used -= jb.real;
      x.requested -= st.request;
      x.vramkit_used -= st.confirmed ? jb.real : st.request;
      x.running.erase(std::find(x.running.begin(), x.running.end(), e.job));
      if (pol_ == policy::mig) x.parts[static_cast<std::size_t>(c.parts[k])].holder = -1;
      if (x.jobs == 0) --busy_;
      real_used_ -= jb.real;
    }
    --running_jobs_;
    if (jb.arrival >= warmup_ && jb.arrival <= horizon_) {
      slowdown_sum_ += (now_ - st.start) / jb.work;
      ++completed_;
    }
    rerate(c);
    drain();
  }

  // The most one GPU can take now under the policy's own view, in the unit need() uses: bytes
  // (the largest idle GPU for whole GPUs, the largest free partition, the most room by requests
  // or by vramkit's view) or free slots (shards). A necessary condition only; choose() decides.
  std::uint64_t room() const {
    std::uint64_t best = 0;
    for (const node& nd : nodes_) {
      for (const gpu& x : nd.gpus) {
        std::uint64_t r = 0;
        switch (pol_) {
          case policy::whole_gpu:
            r = x.jobs == 0 ? x.total : 0;
            break;
          case policy::shards:
            r = static_cast<std::uint64_t>(k_shards_per_gpu - x.jobs);
            break;
          case policy::mig:
            for (const partition& p : x.parts)
              if (p.holder < 0) r = std::max(r, p.bytes);
            break;
          case policy::hami:
            r = x.jobs < k_hami_split ? x.total - std::min(x.total, x.requested) : 0;
            break;
          case policy::requests_spread:
            r = x.total - std::min(x.total, x.requested);
            break;
          case policy::vramkit_pack:
          case policy::vramkit_spread:
            r = x.total - std::min(x.total, x.vramkit_used);
            break;
        }
        best = std::max(best, r);
      }
    }
    return best;
  }

  std::uint64_t need(int j) const {
    const job_state& st = state_[static_cast<std::size_t>(j)];
    switch (pol_) {
      case policy::whole_gpu:
        return jobs_[static_cast<std::size_t>(j)].real;
      case policy::shards:
        return st.whole_retry ? k_shards_per_gpu : 1;
      default:
        return st.request;
    }
  }

  // Queued jobs in arrival order, every one that could fit tried, as kube-scheduler retries its
  // unschedulable pods on a cluster event and Slurm backfills: a large request at the head does
  // not hold back the small ones behind it. At most 64 full decisions per event.
  void drain() {
    std::size_t i = 0, budget = waiting_.size(), decisions = 0;
    std::uint64_t r = room();
    while (i < waiting_.size() && budget-- > 0 && decisions < 64) {
      const int j = waiting_[i];
      if (need(j) > r) {
        ++i;
        continue;
      }
      ++decisions;
      waiting_.erase(waiting_.begin() + static_cast<std::ptrdiff_t>(i));
      if (try_start(j)) {  // started, or ran out of memory and queued again at the end
        r = room();
        continue;
      }
      waiting_.insert(waiting_.begin() + static_cast<std::ptrdiff_t>(i), j);
      ++i;
    }
  }

  void advance(double t) {
    const double a = std::clamp(now_, warmup_, horizon_), b = std::clamp(t, warmup_, horizon_);
    mem_integral_ += static_cast<double>(real_used_) * (b - a);
    busy_integral_ += static_cast<double>(busy_) * (b - a);
    const double mid = (warmup_ + horizon_) / 2;
    const double a1 = std::clamp(now_, warmup_, mid), b1 = std::clamp(t, warmup_, mid);
    const double a2 = std::clamp(now_, mid, horizon_), b2 = std::clamp(t, mid, horizon_);
    const double in_system = static_cast<double>(running_jobs_ + waiting_.size());
    occ_first_ += in_system * (b1 - a1);
    occ_second_ += in_system * (b2 - a2);
    now_ = t;
  }

  run_result finish() {
    run_result r;
    r.gpu_count = gpu_count_;
    r.stable = stable_;
    if (!stable_) {
      r.p95_wait = std::numeric_limits<double>::infinity();
      r.mean_wait = r.p95_wait_late = r.p95_wait;
      return r;
    }
    std::vector<double> waits, late;
    const double mid = (warmup_ + horizon_) / 2;
    for (std::size_t i = 0; i < jobs_.size(); ++i) {
      if (jobs_[i].arrival < warmup_ || jobs_[i].arrival > horizon_) continue;
      if (state_[i].start < 0) {  // never placed: the cluster cannot hold the stream
        r.stable = false;
        r.p95_wait = r.mean_wait = r.p95_wait_late = std::numeric_limits<double>::infinity();
        return r;
      }
      waits.push_back(state_[i].start - jobs_[i].arrival);
      if (jobs_[i].arrival >= mid) late.push_back(waits.back());
    }
    r.jobs = waits.size();
    r.p95_wait = waits.empty() ? 0 : percentile(waits, 0.95);
    r.p95_wait_late = late.empty() ? 0 : percentile(late, 0.95);
    double sum = 0;
    for (double w : waits) sum += w;
    r.mean_wait = waits.empty() ? 0 : sum / static_cast<double>(waits.size());
    r.attempts = window_attempts_;
    r.oom = window_oom_;
    const double span = horizon_ - warmup_;
    r.throughput = static_cast<double>(completed_) / span;
    r.mem_used = mem_integral_ / (span * static_cast<double>(total_bytes_));
    r.busy_gpus = busy_integral_ / (span * static_cast<double>(gpu_count_));
    r.slowdown = completed_ > 0 ? slowdown_sum_ / static_cast<double>(completed_) : 0;
    const double m = (occ_first_ + occ_second_) / span;
    r.occupancy_drift = m > 0 ? (occ_second_ - occ_first_) / (span / 2) / m : 0;
    return r;
  }

  policy pol_;
  const std::vector<job>& jobs_;
  double warmup_, horizon_;
  bool slowdown_;
  std::vector<node> nodes_;
  std::vector<job_state> state_;
  std::priority_queue<event, std::vector<event>, std::greater<>> events_;
  std::deque<int> waiting_;
  double now_ = 0;
  bool stable_ = true;
  std::uint64_t total_bytes_ = 0, max_total_ = 0, real_used_ = 0;
  std::size_t gpu_count_ = 0, busy_ = 0, running_jobs_ = 0, decisions_ = 0, attempts_ = 0;
  std::size_t window_attempts_ = 0, window_oom_ = 0, completed_ = 0;
  double mem_integral_ = 0, busy_integral_ = 0, slowdown_sum_ = 0, occ_first_ = 0, occ_second_ = 0;
};

struct settings {
  int nodes = 32;
  double target = 0.1;  // p95 wait, in mean batch run times
  double horizon = 60;
  double warmup = 20;
  unsigned seed = 1;
  bool quick = false;
  bool slowdown = true;
  bool hand_requests = false;
};

run_result run_once(policy p, int nodes, double rate, const std::vector<workload>& mix,
                    const settings& s) {
  stream_options o;
  o.rate = rate;
  o.horizon = s.horizon;
  o.seed = s.seed;
  o.hand_requests = s.hand_requests;
  const std::vector<job> stream = make_stream(mix, o);
  simulation sim(p, nodes, stream, s.warmup, s.horizon, s.slowdown);
  return sim.run();
}

// Within the target at steady state: the queue stays bounded, the p95 wait is within the target
// over the window and over its second half alone, and the jobs in the system (running or queued)
// grow by at most 10% from the first half of the window to the second. Memory-packed GPUs can be
// overloaded without a queue: every job is placed, all run slower, and the running set grows.
bool meets(const run_result& r, double target) {
  return r.stable && r.p95_wait <= target && r.p95_wait_late <= target && r.occupancy_drift <= 0.10;
}

// The largest arrival rate at which `nodes` keep the p95 wait within the target (bisection; the
// same seed at every rate, so the comparison between rates is of one stream, thinned or thickened).
double max_rate(policy p, int nodes, const std::vector<workload>& mix, const settings& s,
                double guess) {
  double lo = 0, hi = guess;
  while (meets(run_once(p, nodes, hi, mix, s), s.target)) {
    lo = hi;
    hi *= 2;
  }
  const int steps = s.quick ? 6 : 10;
  for (int i = 0; i < steps; ++i) {
    const double mid = (lo + hi) / 2;
    (meets(run_once(p, nodes, mid, mix, s), s.target) ? lo : hi) = mid;
  }
  return lo;
}

// The fewest nodes that keep the p95 wait within the target at `rate`.
int nodes_needed(policy p, double rate, const std::vector<workload>& mix, const settings& s,
                 int guess) {
  int lo = 0, hi = std::max(1, guess);
  while (!meets(run_once(p, hi, rate, mix, s), s.target)) {
    lo = hi;
    hi *= 2;
    if (hi > 1 << 14) return -1;
  }
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    (meets(run_once(p, mid, rate, mix, s), s.target) ? hi : lo) = mid;
  }
  return hi;
}

int usage() {
  std::fprintf(stderr,
               "usage: cluster_placement_sim [--nodes N] [--target-p95 W] [--horizon T] "
               "[--seed N] [--no-slowdown] [--hand-requests] [--quick]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  settings s;
  for (int i = 1; i < argc; ++i) {
    const bool has_value = i + 1 < argc;
    if (!std::strcmp(argv[i], "--quick")) {
      s.quick = true;
    } else if (!std::strcmp(argv[i], "--no-slowdown")) {
      s.slowdown = false;
    } else if (!std::strcmp(argv[i], "--hand-requests")) {
      s.hand_requests = true;
    } else if (!std::strcmp(argv[i], "--nodes") && has_value) {
      s.nodes = std::atoi(argv[++i]);
    } else if (!std::strcmp(argv[i], "--target-p95") && has_value) {
      s.target = std::atof(argv[++i]);
    } else if (!std::strcmp(argv[i], "--horizon") && has_value) {
      s.horizon = std::atof(argv[++i]);
    } else if (!std::strcmp(argv[i], "--seed") && has_value) {
      s.seed = static_cast<unsigned>(std::atoi(argv[++i]));
    } else {
      return usage();
    }
  }
  if (s.quick) s.horizon = std::min(s.horizon, 30.0);
  s.warmup = s.horizon / 3;
  if (s.nodes <= 0 || !(s.target > 0) || !(s.horizon > 3)) {
    std::fprintf(stderr,
                 "cluster_placement_sim: --nodes, --target-p95 and --horizon must be above zero\n");
    return 2;
  }
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<workload> mix = workloads();

  std::printf("# vramkit cluster sharing simulation\n\n%s\n\n", build_summary().c_str());
  std::printf(
      "- cluster: %d nodes x 8 GPUs (25%% H200 141 GB, 35%% H100 80 GB, 20%% A100 80 GB, 20%% "
      "A100 40 GB, by node)\n",
      s.nodes);
  std::printf(
      "- jobs: Poisson arrivals; 90%% batch jobs (exponential run time, mean 1) drawn uniformly "
      "from the workloads below, a quarter of the training ones on 2, 4 or 8 GPUs of one node; "
      "10%% long-running inference services (mean 5); real use = estimate x a measured/predicted "
      "ratio of the planner's H200 accuracy (0.92-1.10); %s\n",
      s.hand_requests ? "requests written by hand: estimate x a factor log-uniform in [0.9, 2.5], "
                        "rounded up to 2, 4, 8, 12, 16, 24, 32, 40, 48, 64, 80, 96, 120 or 140 GiB"
                      : "requests = estimate + 10%, whole GiB (the planner's)");
  if (s.slowdown) {
    std::printf(
        "- sharing slowdown: a GPU whose jobs' compute demand sums past 1 runs them all "
        "proportionally slower (demand: training 1.0, batched inference 0.5, single-sequence 0.2, "
        "services 0.4); a MIG-like partition gives its compute share (1/7..7/7)\n");
  } else {
    std::printf("- no sharing slowdown (--no-slowdown): jobs run at full speed however shared\n");
  }
  std::printf("- seed %u\n", s.seed);
  std::printf(
      "- measured from t=%.0f to t=%.0f (mean batch run times), after a warm-up of %.0f; "
      "target: p95 queue wait <= %.3g at steady state (over the window and over its second half "
      "alone, and the jobs in the system growing by at most 10%% between the halves)\n\n",
      s.warmup, s.horizon, s.warmup, s.target);
  std::printf("| workload | planner estimate per GPU | planner request | compute demand |\n");
  std::printf("| --- | ---: | ---: | ---: |\n");
  for (const auto& w : mix) {
    job j;
    j.estimate = w.bytes;
    std::printf("| %s | %s | %s | %.1f |\n", w.name.c_str(),
                format_bytes(static_cast<double>(w.bytes)).c_str(),
                format_bytes(static_cast<double>(request_of(j))).c_str(), w.demand);
  }

  // Question 1: throughput of the fixed cluster at the target.
  std::vector<double> rates;
  std::vector<run_result> at_rate;
  double guess = 20.0 * s.nodes;
  for (policy p : k_policies) {
    const double r = max_rate(p, s.nodes, mix, s, guess);
    rates.push_back(r);
    at_rate.push_back(run_once(p, s.nodes, r, mix, s));
    std::fprintf(stderr, "%s: max rate %.1f\n", name_of(p), r);
  }
  // Question 2: GPUs needed for the stream whole-GPU sustains on the fixed cluster.
  const double rate0 = rates[0];
  std::vector<int> needed;
  std::vector<run_result> at_nodes;
  for (policy p : k_policies) {
    const int n = nodes_needed(p, rate0, mix, s, s.nodes / 2);
    needed.push_back(n);
    at_nodes.push_back(n > 0 ? run_once(p, n, rate0, mix, s) : run_result{});
    std::fprintf(stderr, "%s: %d nodes\n", name_of(p), n);
  }

  std::printf(
      "\n## Throughput of %d nodes (%d GPUs) at p95 wait <= %.3g\n\n"
      "| policy | jobs per unit time | vs whole GPU | out-of-memory (of starts) | memory used | "
      "GPUs busy | slowdown | p95 wait | steady (drift) |\n"
      "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n",
      s.nodes, s.nodes * 8, s.target);
  for (std::size_t i = 0; i < std::size(k_policies); ++i) {
    const run_result& r = at_rate[i];
    std::printf(
        "| %s | %.1f | %.2fx | %.2f%% (%zu of %zu) | %.1f%% | %.1f%% | %.2fx | %.3f | %.1f%% |\n",
        name_of(k_policies[i]), r.throughput, r.throughput / at_rate[0].throughput,
        r.attempts ? 100.0 * static_cast<double>(r.oom) / static_cast<double>(r.attempts) : 0.0,
        r.oom, r.attempts, 100 * r.mem_used, 100 * r.busy_gpus, r.slowdown, r.p95_wait,
        100 * r.occupancy_drift);
  }
  std::printf(
      "\n## GPUs needed for %.1f jobs per unit time (what whole GPUs sustain on %d nodes) at p95 "
      "wait <= %.3g\n\n"
      "| policy | nodes | GPUs | vs whole GPU | out-of-memory (of starts) | memory used | slowdown "
      "| p95 wait |\n"
      "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n",
      rate0, s.nodes, s.target);
  for (std::size_t i = 0; i < std::size(k_policies); ++i) {
    const run_result& r = at_nodes[i];
    if (needed[i] < 0) {
      std::printf("| %s | - | - | - | - | - | - | not reached |\n", name_of(k_policies[i]));
      continue;
    }
    std::printf(
        "| %s | %d | %d | %.2fx | %.2f%% (%zu of %zu) | %.1f%% | %.2fx | %.3f |\n",
        name_of(k_policies[i]), needed[i], needed[i] * 8,
        static_cast<double>(needed[i]) / static_cast<double>(needed[0]),
        r.attempts ? 100.0 * static_cast<double>(r.oom) / static_cast<double>(r.attempts) : 0.0,
        r.oom, r.attempts, 100 * r.mem_used, r.slowdown, r.p95_wait);
  }
  std::printf(
      "\nout-of-memory: starts that failed because the job's memory did not fit (shards by "
      "count: the GPU ran out; capped policies: the job passed its request); each is "
      "resubmitted (shards: for a whole GPU; capped: asking 1.5x, at most the largest GPU) and its "
      "wait counts until it runs; every queued job that could fit is tried when a job ends "
      "(kube-scheduler's retry of unschedulable pods, Slurm's backfill). memory used: time average "
      "of the jobs' real bytes / all GPU memory. slowdown: mean "
      "elapsed / run time alone. steady (drift): growth of the jobs in the system (running or "
      "queued) from the first half of the window to the second; at most 10%% counts as steady. "
      "Simulated in %.0f s on this host.\n",
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return 0;
}

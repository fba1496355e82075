// Launch-shape trials of the GPU probe's bandwidth kernels (see launch_tuning.hpp).
#include "launch_tuning.hpp"

#include <algorithm>
#include <optional>
#include <set>

#include "common/cuda_check.hpp"
#include "vramkit/core/error.hpp"

namespace vramkit::probe::detail {
namespace {

const char* cache_name(cache_hint h) {
  switch (h) {
    case cache_hint::streaming:
      return ", streaming (evict-first) accesses";
    case cache_hint::prefetch:
      return ", read-only loads with 256-byte L2 prefetch";
    case cache_hint::prefetch_streaming:
      return ", read-only loads with 256-byte L2 prefetch, evict-first stores";
    default:
      return "";
  }
}

// Launch shapes worth trying for a bandwidth kernel on this device: occupancy, unroll, cache hint
// and layout (grid-stride, per-block chunks, one pass) all move the last few percent of device
// bandwidth. `kind` says which hints apply: 0 read, 1 write, 2 copy.
std::vector<launch_config> candidates(const gpu_context& ctx, std::size_t n_vec, bool vary_unroll,
                                      int kind) {
  std::vector<launch_config> out;
  const int full256 = std::max(1, ctx.max_threads_per_sm / 256);
  const int full512 = std::max(1, ctx.max_threads_per_sm / 512);
  const std::pair<int, int> shapes[] = {
      {256, full256}, {512, full512}, {256, std::max(1, full256 / 2)}};
  std::vector<cache_hint> hints = {cache_hint::normal, cache_hint::streaming};
  if (kind != 1) hints.push_back(cache_hint::prefetch);
  if (kind == 2) hints.push_back(cache_hint::prefetch_streaming);
  const std::vector<int> unrolls = vary_unroll ? std::vector<int>{4, 8} : std::vector<int>{4};
  for (cache_hint hint : hints) {
    for (int unroll : unrolls) {
      for (bool chunked : {false, true}) {
        for (auto [threads, per_sm] : shapes) {
          out.push_back({ctx.sm_count * per_sm, threads, hint, chunked, unroll});
        }
      }
      for (int threads : {256, 512, 1024}) {  // one pass: as many blocks as the data needs
        const std::size_t per_block = static_cast<std::size_t>(threads) * unroll;
        const std::size_t blocks = (n_vec + per_block - 1) / per_block;
        if (blocks < static_cast<std::size_t>(1) << 30) {
          out.push_back({static_cast<int>(blocks), threads, hint, true, unroll});
        }
      }
    }
  }
  // Copies, one pass with one block per multiprocessor at a time: 48 KiB in flight per
  // multiprocessor (1024 x 3 or 768 x 4 vectors) beat every fuller occupancy on the H200, which
  // sees fewer interleaved read and write streams (docs/probe.md); 64 KiB for a neighbour.
  const int reserve = ctx.smem_per_sm / 2 + 1024;  // two blocks' reservations no longer fit
  if (kind == 2 && ctx.smem_per_sm > 0 && reserve <= ctx.smem_per_block_optin) {
    for (cache_hint hint : {cache_hint::streaming, cache_hint::normal}) {
      for (auto [threads, unroll] : {std::pair{1024, 3}, std::pair{768, 4}, std::pair{1024, 4}}) {
        const std::size_t per_block = static_cast<std::size_t>(threads) * unroll;
        const std::size_t blocks = (n_vec + per_block - 1) / per_block;
        if (blocks >= static_cast<std::size_t>(1) << 30) continue;
        launch_config c{static_cast<int>(blocks), threads, hint, true, unroll};
        c.smem_reserve = reserve;
        out.push_back(c);
      }
    }
  }
  if (kind == 2 && ctx.cc_major >= 9) {
    for (int stages : {1, 2}) {
      for (int chunk_kib : {16, 32}) {
        for (int per_sm : {4, 8}) {
          launch_config c;
          c.blocks = ctx.sm_count * per_sm;
          c.threads = 32;
          c.chunked = true;
          c.unroll = stages;
          c.bulk_bytes = chunk_kib * 1024;
          out.push_back(c);
        }
      }
    }
  }
  return out;
}

std::string family(const launch_config& c) {
  if (c.bulk_bytes > 0) return c.unroll >= 2 ? "bulk2" : "bulk1";
  if (c.smem_reserve > 0)
    return c.cache == cache_hint::streaming ? "one_block_streaming" : "one_block";
  switch (c.cache) {
    case cache_hint::streaming:
      return "streaming";
    case cache_hint::prefetch:
      return "prefetch";
    case cache_hint::prefetch_streaming:
      return "prefetch_streaming";
    default:
      return "normal";
  }
}

}  // namespace

std::string cfg_note(const launch_config& c) {
  if (c.bulk_bytes > 0) {
    return std::to_string(c.blocks) + " blocks, each moving " +
           std::to_string(c.bulk_bytes / 1024) +
           " KiB at a time by bulk asynchronous copies through " + std::to_string(c.unroll) +
           " shared-memory buffer(s)";
  }
  return std::to_string(c.blocks) + " blocks x " + std::to_string(c.threads) + " threads, unroll " +
         std::to_string(c.unroll) + cache_name(c.cache) +
         (c.chunked ? ", one contiguous chunk per block" : ", grid-stride") +
         (c.smem_reserve > 0 ? ", one block per multiprocessor at a time" : "");
}

void put_cfg(measurement& m, const launch_config& c) {
  m.extra["blocks"] = c.blocks;
  m.extra["threads_per_block"] = c.threads;
  m.extra["unroll"] = c.unroll;
  m.extra["cache_hint"] = static_cast<int>(c.cache);
  m.extra["chunked"] = c.chunked ? 1 : 0;
  m.extra["bulk_bytes"] = c.bulk_bytes;
  m.extra["smem_reserve"] = c.smem_reserve;
}

// Picks the fastest candidate: a short event-timed trial of every shape (3 runs after one
// warm-up), then the five fastest again with 10 runs each. Before each candidate `prepare` resets
// the output, after it `check` must confirm the result: a shape that fails to launch or to
// produce the right data is never chosen.
tune_result tune(const gpu_context& ctx, cudaStream_t stream, std::size_t n_vec, bool vary_unroll,
                 int kind, const std::function<void()>& prepare,
                 const std::function<void(const launch_config&)>& run,
                 const std::function<bool(int runs)>& check) {
  owned_cuda_event a, b;
  tune_result r;
  r.best = ctx.default_launch();
  std::set<std::string> broken;  // bulk families that failed once: do not wait on their others
  auto trial = [&](const launch_config& c, int runs) -> std::optional<double> {
    prepare();
    try {
      run(c);
      VRAMKIT_CUDA_TRY(cudaEventRecord(a.get(), stream));
      for (int i = 0; i < runs; ++i) run(c);
      VRAMKIT_CUDA_TRY(cudaEventRecord(b.get(), stream));
      VRAMKIT_CUDA_TRY(cudaEventSynchronize(b.get()));
    } catch (const cuda_error&) {
      // A shape this device cannot launch (the error is not sticky: the context stays usable).
      (void)cudaGetLastError();
      VRAMKIT_CUDA_TRY(cudaStreamSynchronize(stream));
      return std::nullopt;
    }
    if (!check(runs + 1)) return std::nullopt;
    return elapsed_ms(a.get(), b.get()) / runs;
  };
  std::vector<std::pair<double, launch_config>> timed;
  for (const auto& c : candidates(ctx, n_vec, vary_unroll, kind)) {
    if (broken.count(family(c))) continue;
    ++r.tried;
    const auto ms = trial(c, 3);
    if (!ms) {
      ++r.rejected;
      if (c.bulk_bytes > 0) broken.insert(family(c));
      continue;
    }
    timed.emplace_back(*ms, c);
    auto& fb = r.family_best_ms[family(c)];
    if (fb == 0 || *ms < fb) fb = *ms;
  }
  std::sort(timed.begin(), timed.end(),
            [](const auto& x, const auto& y) { return x.first < y.first; });
  double best_ms = 1e30;
  for (std::size_t i = 0; i < std::min<std::size_t>(5, timed.size()); ++i) {
    const auto ms = trial(timed[i].second, 10);
    if (ms && *ms < best_ms) {
      best_ms = *ms;
      r.best = timed[i].second;
    }
  }
  return r;
}

void put_trial(measurement& m, const tune_result& t, double bytes_per_op) {
  m.extra["trial_shapes"] = t.tried;
  m.extra["trial_rejected"] = t.rejected;
  for (const auto& [fam, ms] : t.family_best_ms)
    m.extra["trial_best_gbps_" + fam] = gbps(bytes_per_op, ms / 1e3);
}

}  // namespace vramkit::probe::detail

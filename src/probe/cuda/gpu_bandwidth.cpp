// GPU bandwidth sections: device memory (read/write/copy kernels, cudaMemcpy D2D), host<->device
// copies (pinned and pageable size sweeps, bidirectional), zero-copy and managed memory. Every
// figure is verified against the data pattern before it is reported.
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <thread>

#include "common/cuda_check.hpp"
#include "gpu_probe_detail.hpp"
#include "vramkit/core/error.hpp"

namespace vramkit::probe::detail {
namespace {

constexpr std::size_t MiB = std::size_t{1} << 20;
constexpr std::size_t GiB = std::size_t{1} << 30;

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

// What a launch-shape trial found, for the record: the chosen shape and the best rate each family
// of shapes reached (so a report shows how far the alternatives were).
struct tune_result {
  launch_config best;
  int tried = 0, rejected = 0;
  std::map<std::string, double> family_best_ms;
};

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

std::string mismatch_text(std::uint64_t bad, std::size_t words) {
  return std::to_string(bad) + " of " + std::to_string(words) + " words differ from the pattern";
}

}  // namespace

// --- device memory ------------------------------------------------------------------------------

void run_device_section(gpu_context& ctx) {
  ctx.progress("device memory read/write/copy");
  // Several times L2 so every pass streams from device memory; both buffers within a third of
  // free memory.
  std::size_t bytes = ctx.quick() ? 512 * MiB : 2 * GiB;
  bytes = std::max<std::size_t>(bytes, 8 * ctx.l2_bytes);
  bytes = std::min<std::size_t>(bytes, ctx.free_bytes / 3) / MiB * MiB;
  if (bytes < 64 * MiB) {
    ctx.report->skips.push_back({ctx.tag + ".device", "not enough free device memory"});
    return;
  }
  const std::size_t words = bytes / 4;
  device_buffer a(bytes), b(bytes), sum(sizeof(std::uint32_t));
  owned_cuda_stream stream;
  stream_blocker blocker;
  const cudaStream_t s = stream.get();
  const std::uint32_t seed_a = 0x1234567u, seed_b = 0x89ABCDEu;
  const launch_config def = ctx.default_launch();
  VRAMKIT_CUDA_TRY(launch_fill(a.words(), words, seed_a, def, s));
  VRAMKIT_CUDA_TRY(launch_fill(b.words(), words, seed_b, def, s));
  const int samples = ctx.quick() ? 10 : 20;
  const int loops = ctx.quick() ? 5 : 10;
  const int warmup = 2;
  auto* sum_p = static_cast<std::uint32_t*>(sum.get());

  // Read: the kernel sums every word; the sum must match the pattern's closed form.
  auto read_sum = [&] {
    std::uint32_t v = 0;
    VRAMKIT_CUDA_TRY(cudaMemcpyAsync(&v, sum_p, sizeof v, cudaMemcpyDeviceToHost, s));
    VRAMKIT_CUDA_TRY(cudaStreamSynchronize(s));
    return v;
  };
  const tune_result rt = tune(
      ctx, s, words / 4, true, 0,
      [&] { VRAMKIT_CUDA_TRY(cudaMemsetAsync(sum_p, 0, sizeof(std::uint32_t), s)); },
      [&](const launch_config& c) { VRAMKIT_CUDA_TRY(launch_read(a.words(), words, sum_p, c, s)); },
      [&](int runs) {
        return read_sum() == pattern_sum(words, seed_a) * static_cast<std::uint32_t>(runs);
      });
  const launch_config& rc = rt.best;
  VRAMKIT_CUDA_TRY(cudaMemsetAsync(sum_p, 0, sizeof(std::uint32_t), s));
  auto secs = time_blocked(blocker, s, samples, loops, warmup,
                           [&] { VRAMKIT_CUDA_TRY(launch_read(a.words(), words, sum_p, rc, s)); });
  std::uint32_t got = 0;
  VRAMKIT_CUDA_TRY(cudaMemcpy(&got, sum_p, sizeof got, cudaMemcpyDeviceToHost));
  const auto launches = static_cast<std::uint32_t>(samples * (loops + warmup));
  const std::uint32_t want = pattern_sum(words, seed_a) * launches;
  {
    auto m = bandwidth_measurement(ctx, ctx.tag + ".device.read", "device",
                                   "device memory read (kernel, 16-byte loads)",
                                   byte_convention::read, bytes, double(bytes), secs);
    m.peak = ctx.hbm_peak_gbps;
    m.peak_basis = ctx.hbm_peak_basis;
    m.note = "sum of all words checked against the pattern; " + cfg_note(rc) +
             " (fastest of a short trial of launch shapes)";
    put_cfg(m, rc);
    put_trial(m, rt, double(bytes));
    m.extra["ops_per_sample"] = loops;
    add_verified(ctx, std::move(m), got == want,
                 "read sum " + std::to_string(got) + " != " + std::to_string(want));
  }

  // Write: the kernel writes pattern seed_a + 1 over b (which held seed_b).
  const std::uint32_t seed_w = seed_a + 1;
  auto clear_b = [&] { VRAMKIT_CUDA_TRY(cudaMemsetAsync(b.get(), 0, bytes, s)); };
  const tune_result wt = tune(
      ctx, s, words / 4, false, 1, clear_b,
      [&](const launch_config& c) {
        VRAMKIT_CUDA_TRY(launch_fill(b.words(), words, seed_w, c, s));
      },
      [&](int) { return device_mismatches(b.words(), words, seed_w, s) == 0; });
  const launch_config& wc = wt.best;
  VRAMKIT_CUDA_TRY(launch_fill(b.words(), words, seed_b, def, s));
  secs = time_blocked(blocker, s, samples, loops, warmup,
                      [&] { VRAMKIT_CUDA_TRY(launch_fill(b.words(), words, seed_w, wc, s)); });
  std::uint64_t bad = device_mismatches(b.words(), words, seed_w, s);
  {
    auto m = bandwidth_measurement(ctx, ctx.tag + ".device.write", "device",
                                   "device memory write (kernel, 16-byte stores)",
                                   byte_convention::written, bytes, double(bytes), secs);
    m.peak = ctx.hbm_peak_gbps;
    m.peak_basis = ctx.hbm_peak_basis;
    m.note = "every word checked against the pattern; " + cfg_note(wc);
    put_cfg(m, wc);
    put_trial(m, wt, double(bytes));
    m.extra["ops_per_sample"] = loops;
    add_verified(ctx, std::move(m), bad == 0, mismatch_text(bad, words));
  }

  // Copy kernel a -> b (b holds seed_w, a holds seed_a).
  const tune_result ct = tune(
      ctx, s, words / 4, true, 2, clear_b,
      [&](const launch_config& c) {
        VRAMKIT_CUDA_TRY(launch_copy(b.words(), a.words(), words, c, s));
      },
      [&](int) { return device_mismatches(b.words(), words, seed_a, s) == 0; });
  const launch_config& cc = ct.best;
  VRAMKIT_CUDA_TRY(launch_fill(b.words(), words, seed_b, def, s));
  secs = time_blocked(blocker, s, samples, loops, warmup,
                      [&] { VRAMKIT_CUDA_TRY(launch_copy(b.words(), a.words(), words, cc, s)); });
  bad = device_mismatches(b.words(), words, seed_a, s);
  {
    auto m = bandwidth_measurement(ctx, ctx.tag + ".device.copy", "device",
                                   "device memory copy (kernel, 16-byte accesses)",
                                   byte_convention::read_plus_written, bytes, 2.0 * bytes, secs);
    m.peak = ctx.hbm_peak_gbps;
    m.peak_basis = ctx.hbm_peak_basis;
    m.extra["copied_once_gbps"] = m.stats.median / 2;
    m.note =
        "read + written (copied once = half, in extra copied_once_gbps, comparable with "
        "cudaMemcpy); destination checked word by word; " +
        cfg_note(cc);
    put_cfg(m, cc);
    put_trial(m, ct, 2.0 * double(bytes));
    m.extra["ops_per_sample"] = loops;
    add_verified(ctx, std::move(m), bad == 0, mismatch_text(bad, words));
  }

  // cudaMemcpy device-to-device a -> b.
  VRAMKIT_CUDA_TRY(launch_fill(b.words(), words, seed_b, def, s));
  secs = time_blocked(blocker, s, samples, loops, warmup, [&] {
    VRAMKIT_CUDA_TRY(cudaMemcpyAsync(b.get(), a.get(), bytes, cudaMemcpyDeviceToDevice, s));
  });
  bad = device_mismatches(b.words(), words, seed_a, s);
  {
    auto m = bandwidth_measurement(ctx, ctx.tag + ".device.memcpy", "device",
                                   "cudaMemcpy device-to-device", byte_convention::copied_once,
                                   bytes, double(bytes), secs);
    if (ctx.hbm_peak_gbps) {
      m.peak = *ctx.hbm_peak_gbps / 2;
      m.peak_basis =
          "half of the device memory peak (each byte is read and written): " + ctx.hbm_peak_basis;
    }
    m.extra["read_plus_written_gbps"] = m.stats.median * 2;
    m.note = "copied once (read + written = twice, in extra); destination checked word by word";
    m.extra["ops_per_sample"] = loops;
    add_verified(ctx, std::move(m), bad == 0, mismatch_text(bad, words));
  }
}

// --- host <-> device ----------------------------------------------------------------------------

namespace {

struct host_side {
  std::uint32_t* src = nullptr;  // pattern source for H2D
  std::uint32_t* dst = nullptr;  // destination for D2H
};

enum class direction { h2d, d2h, bidir };

const char* dir_name(direction d) {
  return d == direction::h2d ? "h2d" : d == direction::d2h ? "d2h" : "bidir";
}

double wall_seconds(std::chrono::steady_clock::time_point a,
                    std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

}  // namespace

void run_h2d_section(gpu_context& ctx) {
  ctx.progress("host<->device copies (pinned and pageable sweep)");
  std::vector<std::size_t> sizes;
  const std::size_t max_size =
      std::min<std::size_t>(ctx.quick() ? 256 * MiB : GiB, ctx.free_bytes / 4);
  for (std::size_t sz = 4096; sz <= max_size; sz *= (ctx.quick() ? 16 : 4)) sizes.push_back(sz);
  if (sizes.empty()) throw logic_error("not enough free device memory for the transfer sweep");
  const std::size_t top = sizes.back();

  device_buffer d_dst(top), d_src(top);
  pinned_buffer p_src(top, pinned_buffer::mapping::unmapped),
      p_dst(top, pinned_buffer::mapping::unmapped);
  // Pageable buffers: malloc'd and touched so their pages exist before timing.
  std::unique_ptr<std::uint32_t[]> g_src(new std::uint32_t[top / 4]),
      g_dst(new std::uint32_t[top / 4]);
  const std::uint32_t host_seed = 0x5EED0001u;
  parallel_fill(p_src.words(), top / 4, host_seed);
  parallel_fill(g_src.get(), top / 4, host_seed);
  parallel_fill(p_dst.words(), top / 4, 7);
  parallel_fill(g_dst.get(), top / 4, 7);

  owned_cuda_stream s1, s2;
  stream_blocker blocker;
  owned_cuda_event e_go, e_start, e_end1, e_end2;
  const launch_config def = ctx.default_launch();

  for (bool pinned : {true, false}) {
    const host_side host =
        pinned ? host_side{p_src.words(), p_dst.words()} : host_side{g_src.get(), g_dst.get()};
    const char* kind = pinned ? "pinned" : "pageable";
    for (direction dir : {direction::h2d, direction::d2h, direction::bidir}) {
      curve c;
      c.key = ctx.tag + "." + dir_name(dir) + "." + kind + ".sweep";
      c.section = "h2d";
      c.title = std::string(dir == direction::h2d   ? "host to device"
                            : dir == direction::d2h ? "device to host"
                                                    : "bidirectional (both summed)") +
                ", " + kind + ", " + ctx.tag;
      c.x_label = "bytes";
      c.y_unit = "GB/s";
      std::vector<double> top_secs;
      bool all_ok = true;
      std::string failure;
      for (std::size_t k = 0; k < sizes.size(); ++k) {
        const std::size_t size = sizes[k];
        const std::size_t words = size / 4;
        const bool big = size >= 256 * MiB;
        const int samples = ctx.quick() ? (big ? 3 : 5) : (big ? 5 : 10);
        const int loops =
            static_cast<int>(std::clamp<std::size_t>((pinned ? 64 : 16) * MiB / size, 1, 100));
        const std::uint32_t dev_seed = 0xD0000000u + static_cast<std::uint32_t>(k) * 17 +
                                       (pinned ? 0 : 5) + static_cast<std::uint32_t>(dir);
        // Fresh data in the source, stale data in the destination, so a copy that does nothing
        // fails.
        VRAMKIT_CUDA_TRY(cudaMemsetAsync(d_dst.get(), 0, size, s1.get()));
        VRAMKIT_CUDA_TRY(launch_fill(d_src.words(), words, dev_seed, def, s1.get()));
        VRAMKIT_CUDA_TRY(cudaStreamSynchronize(s1.get()));
        auto h2d = [&](cudaStream_t st) {
          VRAMKIT_CUDA_TRY(
              cudaMemcpyAsync(d_dst.get(), host.src, size, cudaMemcpyHostToDevice, st));
        };
        auto d2h = [&](cudaStream_t st) {
          VRAMKIT_CUDA_TRY(
              cudaMemcpyAsync(host.dst, d_src.get(), size, cudaMemcpyDeviceToHost, st));
        };
        auto one = [&](bool to_device, cudaStream_t st) {
          if (to_device)
            h2d(st);
          else
            d2h(st);
        };
        std::vector<double> secs;
        double bytes_per_op = dir == direction::bidir ? 2.0 * size : double(size);
        if (pinned && dir != direction::bidir) {
          auto op = dir == direction::h2d ? std::function<void()>([&] { h2d(s1.get()); })
                                          : std::function<void()>([&] { d2h(s1.get()); });
          secs = time_blocked(blocker, s1.get(), samples, loops, 1, op);
        } else if (pinned) {
          // Both directions at once: s2 starts when s1 is released; the interval ends when both
          // end.
          for (int smp = 0; smp < samples; ++smp) {
            blocker.block(s1.get());
            VRAMKIT_CUDA_TRY(cudaEventRecord(e_go.get(), s1.get()));
            VRAMKIT_CUDA_TRY(cudaStreamWaitEvent(s2.get(), e_go.get(), 0));
            h2d(s1.get());
            d2h(s2.get());
            VRAMKIT_CUDA_TRY(cudaEventRecord(e_end2.get(), s2.get()));
            VRAMKIT_CUDA_TRY(cudaStreamWaitEvent(s1.get(), e_end2.get(), 0));
            VRAMKIT_CUDA_TRY(cudaEventRecord(e_start.get(), s1.get()));
            VRAMKIT_CUDA_TRY(cudaStreamWaitEvent(s2.get(), e_start.get(), 0));
            for (int i = 0; i < loops; ++i) {
              h2d(s1.get());
              d2h(s2.get());
            }
            VRAMKIT_CUDA_TRY(cudaEventRecord(e_end1.get(), s1.get()));
            VRAMKIT_CUDA_TRY(cudaEventRecord(e_end2.get(), s2.get()));
            VRAMKIT_CUDA_TRY(cudaStreamWaitEvent(s1.get(), e_end2.get(), 0));
            VRAMKIT_CUDA_TRY(cudaEventRecord(e_go.get(), s1.get()));
            blocker.release();
            VRAMKIT_CUDA_TRY(cudaStreamSynchronize(s1.get()));
            VRAMKIT_CUDA_TRY(cudaStreamSynchronize(s2.get()));
            blocker.check();
            secs.push_back(elapsed_ms(e_start.get(), e_go.get()) / 1e3 / loops);
          }
        } else if (dir != direction::bidir) {
          // Pageable copies go through the driver's staging buffers and block the host, so they
          // are timed by the host clock around synchronised copies (as bandwidthTest does).
          for (int smp = 0; smp < samples; ++smp) {
            one(dir == direction::h2d, s1.get());
            VRAMKIT_CUDA_TRY(cudaStreamSynchronize(s1.get()));
            const auto t0 = std::chrono::steady_clock::now();
            for (int i = 0; i < loops; ++i) {
              one(dir == direction::h2d, s1.get());
              VRAMKIT_CUDA_TRY(cudaStreamSynchronize(s1.get()));
            }
            secs.push_back(wall_seconds(t0, std::chrono::steady_clock::now()) / loops);
          }
        } else {
          // Pageable, both directions: one host thread per direction, started together.
          for (int smp = 0; smp < samples; ++smp) {
            std::atomic<int> ready{0};
            std::atomic<bool> go{false};
            std::exception_ptr err[2];
            auto worker = [&](int which) {
              try {
                VRAMKIT_CUDA_TRY(cudaSetDevice(ctx.ordinal));
                cudaStream_t st = which == 0 ? s1.get() : s2.get();
                one(which == 0, st);
                VRAMKIT_CUDA_TRY(cudaStreamSynchronize(st));
                ready.fetch_add(1);
                while (!go.load()) std::this_thread::yield();
                for (int i = 0; i < loops; ++i) {
                  one(which == 0, st);
                  VRAMKIT_CUDA_TRY(cudaStreamSynchronize(st));
                }
              } catch (...) {
                err[which] = std::current_exception();
                ready.fetch_add(1);
              }
            };
            std::thread t0(worker, 0), t1(worker, 1);
            while (ready.load() < 2) std::this_thread::yield();
            const auto start = std::chrono::steady_clock::now();
            go.store(true);
            t0.join();
            t1.join();
            const auto stop = std::chrono::steady_clock::now();
            for (auto& e : err)
              if (e) std::rethrow_exception(e);
            secs.push_back(wall_seconds(start, stop) / loops);
          }
        }
        // Verify what the copies delivered.
        std::uint64_t bad = 0;
        if (dir != direction::d2h)
          bad += device_mismatches(d_dst.words(), words, host_seed, s1.get());
        if (dir != direction::h2d) bad += parallel_mismatches(host.dst, words, dev_seed);
        if (bad != 0) {
          all_ok = false;
          failure = mismatch_text(bad, words) + " at " + std::to_string(size) + " bytes";
          continue;
        }
        curve::point pt;
        pt.x = double(size);
        for (double sec : secs) pt.samples.push_back(gbps(bytes_per_op, sec));
        pt.y = sample_stats::of(pt.samples);
        c.points.push_back(std::move(pt));
        if (k + 1 == sizes.size()) top_secs = secs;
      }
      if (!all_ok) {
        ctx.report->skips.push_back(
            {c.key, "verification failed, curve withheld: " + failure, true});
        continue;
      }
      ctx.report->curves.push_back(c);
      const double bytes_per_op = dir == direction::bidir ? 2.0 * top : double(top);
      auto m =
          bandwidth_measurement(ctx, ctx.tag + "." + dir_name(dir) + "." + kind, "h2d", c.title,
                                byte_convention::copied_once, top, bytes_per_op, top_secs);
      if (ctx.pcie_peak_gbps) {
        m.peak = *ctx.pcie_peak_gbps * (dir == direction::bidir ? 2 : 1);
        m.peak_basis =
            ctx.pcie_peak_basis + (dir == direction::bidir ? ", both directions summed" : "");
      }
      if (const int node = host_numa_node(host.src); node >= 0) m.extra["host_numa_node"] = node;
      m.note = std::string(pinned ? "cudaMemcpyAsync, events around the copies on a held stream"
                                  : "synchronised copies timed by the host clock") +
               "; destination checked word by word";
      add_verified(ctx, std::move(m), true, "");
    }
  }
}

// --- zero-copy ----------------------------------------------------------------------------------

void run_zerocopy_section(gpu_context& ctx) {
  if (!ctx.can_map_host) {
    ctx.report->skips.push_back({ctx.tag + ".zerocopy", "the device cannot map host memory"});
    return;
  }
  ctx.progress("zero-copy (kernel on mapped pinned host memory)");
  const std::size_t bytes = ctx.quick() ? 128 * MiB : 512 * MiB;
  const std::size_t words = bytes / 4;
  pinned_buffer host(bytes, pinned_buffer::mapping::mapped);
  auto* dev = static_cast<std::uint32_t*>(host.device_ptr());
  device_buffer sum(sizeof(std::uint32_t));
  auto* sum_p = static_cast<std::uint32_t*>(sum.get());
  owned_cuda_stream stream;
  stream_blocker blocker;
  const cudaStream_t s = stream.get();
  const launch_config cfg = ctx.default_launch();
  const int samples = ctx.quick() ? 3 : 5, loops = 2, warmup = 1;
  const std::uint32_t seed = 0x2E20C0F1u;
  parallel_fill(host.words(), words, seed);

  VRAMKIT_CUDA_TRY(cudaMemsetAsync(sum_p, 0, sizeof(std::uint32_t), s));
  auto secs = time_blocked(blocker, s, samples, loops, warmup,
                           [&] { VRAMKIT_CUDA_TRY(launch_read(dev, words, sum_p, cfg, s)); });
  std::uint32_t got = 0;
  VRAMKIT_CUDA_TRY(cudaMemcpy(&got, sum_p, sizeof got, cudaMemcpyDeviceToHost));
  const std::uint32_t want =
      pattern_sum(words, seed) * static_cast<std::uint32_t>(samples * (loops + warmup));
  {
    auto m = bandwidth_measurement(ctx, ctx.tag + ".zerocopy.read", "zerocopy",
                                   "kernel reading mapped pinned host memory",
                                   byte_convention::read, bytes, double(bytes), secs);
    m.peak = ctx.pcie_peak_gbps;
    m.peak_basis = ctx.pcie_peak_basis;
    m.note = "sum of all words checked against the pattern; " + cfg_note(cfg);
    if (const int node = host_numa_node(host.get()); node >= 0) m.extra["host_numa_node"] = node;
    add_verified(ctx, std::move(m), got == want, "read sum mismatch");
  }
  const std::uint32_t seed_w = seed + 99;
  secs = time_blocked(blocker, s, samples, loops, warmup,
                      [&] { VRAMKIT_CUDA_TRY(launch_fill(dev, words, seed_w, cfg, s)); });
  const std::uint64_t bad = parallel_mismatches(host.words(), words, seed_w);
  auto m = bandwidth_measurement(ctx, ctx.tag + ".zerocopy.write", "zerocopy",
                                 "kernel writing mapped pinned host memory",
                                 byte_convention::written, bytes, double(bytes), secs);
  m.peak = ctx.pcie_peak_gbps;
  m.peak_basis = ctx.pcie_peak_basis;
  m.note = "host buffer checked word by word by the CPU; " + cfg_note(cfg);
  if (const int node = host_numa_node(host.get()); node >= 0) m.extra["host_numa_node"] = node;
  add_verified(ctx, std::move(m), bad == 0, mismatch_text(bad, words));
}

// --- managed memory -----------------------------------------------------------------------------

void run_managed_section(gpu_context& ctx) {
  if (!ctx.concurrent_managed) {
    ctx.report->skips.push_back(
        {ctx.tag + ".managed",
         "the device has no concurrent managed access (concurrentManagedAccess = 0)"});
    return;
  }
  ctx.progress("managed memory (fault-driven, prefetched, advised)");
  std::size_t free_b = 0, total_b = 0;
  VRAMKIT_CUDA_TRY(cudaMemGetInfo(&free_b, &total_b));
  // Never more managed memory than a quarter of what is free: oversubscription can stall a GPU.
  const std::size_t bytes =
      std::min<std::size_t>(ctx.quick() ? 128 * MiB : 512 * MiB, free_b / 4) / MiB * MiB;
  if (bytes < 16 * MiB) {
    ctx.report->skips.push_back({ctx.tag + ".managed", "not enough free device memory"});
    return;
  }
  const std::size_t words = bytes / 4;
  std::uint32_t* p = nullptr;
  VRAMKIT_CUDA_TRY(cudaMallocManaged(reinterpret_cast<void**>(&p), bytes, cudaMemAttachGlobal));
  std::unique_ptr<std::uint32_t, void (*)(std::uint32_t*)> guard(
      p, [](std::uint32_t* q) { VRAMKIT_CUDA_ASSERT(cudaFree(q)); });
  device_buffer sum(sizeof(std::uint32_t));
  auto* sum_p = static_cast<std::uint32_t*>(sum.get());
  owned_cuda_stream stream;
  const cudaStream_t s = stream.get();
  owned_cuda_event a, b, c;
  const launch_config cfg = ctx.default_launch();
  const int samples = 3;
  cudaMemLocation gpu{};
  gpu.type = cudaMemLocationTypeDevice;
  gpu.id = ctx.ordinal;

  struct mode_result {
    std::vector<double> touch, prefetch;
    bool ok = true;
  };
  auto run_mode = [&](int mode) {
    mode_result r;
    for (int smp = 0; smp < samples; ++smp) {
      const std::uint32_t seed = 0x3A000000u + mode * 16 + smp;
      parallel_fill(p, words, seed);  // the CPU writes: pages now live on the host
      if (mode == 2) {
        VRAMKIT_CUDA_TRY(cudaMemAdvise(p, bytes, cudaMemAdviseSetPreferredLocation, gpu));
        VRAMKIT_CUDA_TRY(cudaMemAdvise(p, bytes, cudaMemAdviseSetAccessedBy, gpu));
      }
      VRAMKIT_CUDA_TRY(cudaMemsetAsync(sum_p, 0, sizeof(std::uint32_t), s));
      VRAMKIT_CUDA_TRY(cudaEventRecord(a.get(), s));
      if (mode == 1) VRAMKIT_CUDA_TRY(cudaMemPrefetchAsync(p, bytes, gpu, 0, s));
      VRAMKIT_CUDA_TRY(cudaEventRecord(b.get(), s));
      VRAMKIT_CUDA_TRY(launch_read(p, words, sum_p, cfg, s));
      VRAMKIT_CUDA_TRY(cudaEventRecord(c.get(), s));
      VRAMKIT_CUDA_TRY(cudaStreamSynchronize(s));
      std::uint32_t got = 0;
      VRAMKIT_CUDA_TRY(cudaMemcpy(&got, sum_p, sizeof got, cudaMemcpyDeviceToHost));
      if (got != pattern_sum(words, seed)) r.ok = false;
      r.touch.push_back(elapsed_ms(b.get(), c.get()) / 1e3);
      if (mode == 1) r.prefetch.push_back(elapsed_ms(a.get(), b.get()) / 1e3);
      if (mode == 2) {
        VRAMKIT_CUDA_TRY(cudaMemAdvise(p, bytes, cudaMemAdviseUnsetPreferredLocation, gpu));
        VRAMKIT_CUDA_TRY(cudaMemAdvise(p, bytes, cudaMemAdviseUnsetAccessedBy, gpu));
      }
    }
    return r;
  };
  const char* keys[] = {"first_touch", "prefetched_touch", "advised_touch"};
  const char* titles[] = {
      "managed: GPU first touch after CPU writes (fault-driven migration)",
      "managed: GPU touch after cudaMemPrefetchAsync",
      "managed: GPU touch after cudaMemAdvise preferred location + accessed-by"};
  for (int mode = 0; mode < 3; ++mode) {
    auto r = run_mode(mode);
    auto m = bandwidth_measurement(ctx, ctx.tag + ".managed." + keys[mode], "managed", titles[mode],
                                   byte_convention::read, bytes, double(bytes), r.touch);
    m.note =
        "a read kernel over the buffer the CPU has just written; its sum checked against the "
        "pattern";
    if (mode == 1) {
      auto pf = bandwidth_measurement(
          ctx, ctx.tag + ".managed.prefetch", "managed", "managed: cudaMemPrefetchAsync to the GPU",
          byte_convention::copied_once, bytes, double(bytes), r.prefetch);
      pf.peak = ctx.pcie_peak_gbps;
      pf.peak_basis = ctx.pcie_peak_basis;
      pf.note = "the migration itself; verified by the read that follows";
      add_verified(ctx, std::move(pf), r.ok, "read sum after prefetch mismatch");
    }
    add_verified(ctx, std::move(m), r.ok, "read sum mismatch");
  }
}

// --- peer to peer -------------------------------------------------------------------------------

void run_p2p_section(const probe_options& options, probe_report& report, int device_count) {
  if (device_count < 2) {
    report.skips.push_back({"p2p", "only one GPU: peer-to-peer needs two or more"});
    return;
  }
  const std::size_t bytes = options.quick ? 64 * MiB : 256 * MiB;
  const std::size_t words = bytes / 4;
  const int samples = options.quick ? 3 : 5, loops = options.quick ? 2 : 4;
  for (int a = 0; a < device_count; ++a) {
    for (int bdev = 0; bdev < device_count; ++bdev) {
      if (a == bdev) continue;
      const std::string pair = "gpu" + std::to_string(a) + "->gpu" + std::to_string(bdev);
      int ab = 0, ba = 0;
      VRAMKIT_CUDA_TRY(cudaDeviceCanAccessPeer(&ab, a, bdev));
      VRAMKIT_CUDA_TRY(cudaDeviceCanAccessPeer(&ba, bdev, a));
      if (!ab || !ba) {
        report.skips.push_back(
            {pair + ".p2p", "peer access between the two GPUs is not supported"});
        continue;
      }
      if (options.progress) options.progress(pair + ": peer copies");
      auto enable = [](int from, int to) {
        VRAMKIT_CUDA_TRY(cudaSetDevice(from));
        const cudaError_t st = cudaDeviceEnablePeerAccess(to, 0);
        if (st == cudaErrorPeerAccessAlreadyEnabled)
          (void)cudaGetLastError();
        else
          VRAMKIT_CUDA_TRY(st);
      };
      enable(a, bdev);
      enable(bdev, a);
      gpu_context ca;
      ca.ordinal = a;
      ca.tag = pair;
      ca.options = &options;
      ca.report = &report;
      VRAMKIT_CUDA_TRY(cudaSetDevice(a));
      int sms = 0, tps = 0;
      VRAMKIT_CUDA_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, a));
      VRAMKIT_CUDA_TRY(cudaDeviceGetAttribute(&tps, cudaDevAttrMaxThreadsPerMultiProcessor, a));
      ca.sm_count = sms;
      ca.max_threads_per_sm = tps;
      const launch_config cfg = ca.default_launch();
      // Buffers first, so they outlive every stream, event and the blocker (which releases a held
      // stream when an exception unwinds); an event is recorded on streams of the device that was
      // current at its creation: end_b belongs to device b.
      device_buffer src_a(bytes), dst_a(bytes);
      VRAMKIT_CUDA_TRY(cudaSetDevice(bdev));
      device_buffer src_b(bytes), dst_b(bytes);
      owned_cuda_stream sb;
      owned_cuda_event end_b;
      VRAMKIT_CUDA_TRY(cudaSetDevice(a));
      owned_cuda_stream sa;
      owned_cuda_event go, end_a, start;
      stream_blocker blocker;
      VRAMKIT_CUDA_TRY(cudaSetDevice(bdev));
      const std::uint32_t seed_a = 0xA0A0A0A0u, seed_b = 0x0B0B0B0Bu;
      VRAMKIT_CUDA_TRY(launch_fill(src_b.words(), words, seed_b, cfg, sb.get()));
      VRAMKIT_CUDA_TRY(cudaMemsetAsync(dst_b.get(), 0, bytes, sb.get()));
      VRAMKIT_CUDA_TRY(cudaStreamSynchronize(sb.get()));
      VRAMKIT_CUDA_TRY(cudaSetDevice(a));
      VRAMKIT_CUDA_TRY(launch_fill(src_a.words(), words, seed_a, cfg, sa.get()));
      VRAMKIT_CUDA_TRY(cudaMemsetAsync(dst_a.get(), 0, bytes, sa.get()));
      VRAMKIT_CUDA_TRY(cudaStreamSynchronize(sa.get()));

      for (bool sm : {false, true}) {
        // a -> b on stream sa (device a); for bidir also b -> a on stream sb (device b).
        auto fwd = [&] {
          if (sm)
            VRAMKIT_CUDA_TRY(launch_copy(dst_b.words(), src_a.words(), words, cfg, sa.get()));
          else
            VRAMKIT_CUDA_TRY(
                cudaMemcpyPeerAsync(dst_b.get(), bdev, src_a.get(), a, bytes, sa.get()));
        };
        auto back = [&] {
          if (sm)
            VRAMKIT_CUDA_TRY(launch_copy(dst_a.words(), src_b.words(), words, cfg, sb.get()));
          else
            VRAMKIT_CUDA_TRY(
                cudaMemcpyPeerAsync(dst_a.get(), a, src_b.get(), bdev, bytes, sb.get()));
        };
        VRAMKIT_CUDA_TRY(cudaSetDevice(a));
        auto uni = time_blocked(blocker, sa.get(), samples, loops, 1, fwd);
        std::uint64_t bad = device_mismatches(dst_b.words(), words, seed_a, sa.get());
        const std::string mech = sm ? "sm" : "ce";
        auto m = bandwidth_measurement(
            ca, pair + ".p2p." + mech + ".unidir", "p2p",
            std::string(sm ? "copy kernel on " : "cudaMemcpyPeerAsync ") + pair,
            byte_convention::copied_once, bytes, double(bytes), uni);
        m.note = "destination checked word by word";
        add_verified(ca, std::move(m), bad == 0, mismatch_text(bad, words));

        std::vector<double> bi;
        for (int smp = 0; smp < samples; ++smp) {
          VRAMKIT_CUDA_TRY(cudaSetDevice(a));
          blocker.block(sa.get());
          VRAMKIT_CUDA_TRY(cudaEventRecord(go.get(), sa.get()));
          fwd();
          VRAMKIT_CUDA_TRY(cudaEventRecord(start.get(), sa.get()));
          VRAMKIT_CUDA_TRY(cudaSetDevice(bdev));
          VRAMKIT_CUDA_TRY(cudaStreamWaitEvent(sb.get(), start.get(), 0));
          for (int i = 0; i < loops; ++i) back();
          VRAMKIT_CUDA_TRY(cudaEventRecord(end_b.get(), sb.get()));
          VRAMKIT_CUDA_TRY(cudaSetDevice(a));
          for (int i = 0; i < loops; ++i) fwd();
          VRAMKIT_CUDA_TRY(cudaStreamWaitEvent(sa.get(), end_b.get(), 0));
          VRAMKIT_CUDA_TRY(cudaEventRecord(end_a.get(), sa.get()));
          blocker.release();
          VRAMKIT_CUDA_TRY(cudaStreamSynchronize(sa.get()));
          blocker.check();
          bi.push_back(elapsed_ms(start.get(), end_a.get()) / 1e3 / loops);
        }
        bad = device_mismatches(dst_b.words(), words, seed_a, sa.get());
        VRAMKIT_CUDA_TRY(cudaSetDevice(bdev));
        bad += device_mismatches(dst_a.words(), words, seed_b, sb.get());
        VRAMKIT_CUDA_TRY(cudaSetDevice(a));
        auto mb = bandwidth_measurement(
            ca, pair + ".p2p." + mech + ".bidir", "p2p",
            std::string(sm ? "copy kernels, both ways, " : "cudaMemcpyPeerAsync both ways, ") +
                pair,
            byte_convention::copied_once, bytes, 2.0 * bytes, bi);
        mb.note = "both directions summed; both destinations checked word by word";
        add_verified(ca, std::move(mb), bad == 0, mismatch_text(bad, 2 * words));
        // Fresh destinations for the next mechanism.
        VRAMKIT_CUDA_TRY(cudaMemsetAsync(dst_a.get(), 0, bytes, sa.get()));
        VRAMKIT_CUDA_TRY(cudaStreamSynchronize(sa.get()));
        VRAMKIT_CUDA_TRY(cudaSetDevice(bdev));
        VRAMKIT_CUDA_TRY(cudaMemsetAsync(dst_b.get(), 0, bytes, sb.get()));
        VRAMKIT_CUDA_TRY(cudaStreamSynchronize(sb.get()));
      }
      VRAMKIT_CUDA_TRY(cudaSetDevice(a));
      VRAMKIT_CUDA_ASSERT(cudaDeviceDisablePeerAccess(bdev));
      VRAMKIT_CUDA_TRY(cudaSetDevice(bdev));
      VRAMKIT_CUDA_ASSERT(cudaDeviceDisablePeerAccess(a));
      VRAMKIT_CUDA_TRY(cudaSetDevice(a));
    }
  }
}

}  // namespace vramkit::probe::detail

// The access-pattern section: what the way a kernel walks memory costs. Read bandwidth at unit
// stride (the probe's tuned read kernel), at strides of 2-64 elements of 4, 8 and 16 bytes, with
// every warp misaligned by 1-31 elements, and through an index array (uniform over the buffer, or
// within a window that fits in L2); the same for writes and scatters. Each pattern is reported as
// a ratio to the unit-stride figure, and each is verified (read sums against closed forms or a
// reference computed without loads; written words checked one by one) before its speed counts.
#include <algorithm>
#include <cmath>

#include "common/cuda_check.hpp"
#include "gpu_probe_detail.hpp"
#include "launch_tuning.hpp"
#include "pattern_kernels.hpp"
#include "vramkit/core/error.hpp"

namespace vramkit::probe::detail {
namespace {

constexpr std::size_t MiB = std::size_t{1} << 20;
constexpr std::size_t GiB = std::size_t{1} << 30;
constexpr int strides[] = {1, 2, 4, 8, 16, 32, 64};
constexpr unsigned element_bytes[] = {4, 8, 16};

unsigned floor_log2(std::uint64_t v) {
  unsigned b = 0;
  while (v > 1) {
    v >>= 1;
    ++b;
  }
  return b;
}

// Shared state of one run of the section.
struct pattern_run {
  gpu_context& ctx;
  cudaStream_t s;
  stream_blocker& blocker;
  std::uint32_t* buf;
  std::size_t words;
  std::uint32_t* sum;
  unsigned long long* count;
  int samples, loops;
  static constexpr int warmup = 1;

  [[nodiscard]] int launches() const { return samples * (loops + warmup); }

  std::uint32_t read_sum() const {
    std::uint32_t v = 0;
    VRAMKIT_CUDA_TRY(cudaMemcpyAsync(&v, sum, sizeof v, cudaMemcpyDeviceToHost, s));
    VRAMKIT_CUDA_TRY(cudaStreamSynchronize(s));
    return v;
  }
  unsigned long long read_count() const {
    unsigned long long v = 0;
    VRAMKIT_CUDA_TRY(cudaMemcpyAsync(&v, count, sizeof v, cudaMemcpyDeviceToHost, s));
    VRAMKIT_CUDA_TRY(cudaStreamSynchronize(s));
    return v;
  }
  void zero_sum() const { VRAMKIT_CUDA_TRY(cudaMemsetAsync(sum, 0, sizeof(std::uint32_t), s)); }
  void zero_count() const {
    VRAMKIT_CUDA_TRY(cudaMemsetAsync(count, 0, sizeof(unsigned long long), s));
  }
  // Times `op`, then checks that the launches summed to `want_per_launch` each.
  std::vector<double> timed_read(const std::function<void()>& op, std::uint32_t want_per_launch,
                                 bool& ok) const {
    zero_sum();
    auto secs = time_blocked(blocker, s, samples, loops, warmup, op);
    ok = read_sum() == want_per_launch * static_cast<std::uint32_t>(launches());
    return secs;
  }
};

// A ratio figure: per sample, the useful GB/s of the pattern over the base's median GB/s.
measurement ratio_measurement(const gpu_context& ctx, const std::string& key,
                              const std::string& title, double useful_bytes, std::uint64_t size,
                              const std::vector<double>& secs, double base_gbps) {
  measurement m;
  m.key = key;
  m.title = title;
  m.device = ctx.tag;
  m.unit = "x";
  m.size_bytes = size;
  m.repetitions = static_cast<int>(secs.size());
  std::vector<double> useful;
  for (double t : secs) {
    useful.push_back(gbps(useful_bytes, t));
    m.samples.push_back(useful.back() / base_gbps);
  }
  m.stats = sample_stats::of(m.samples);
  m.extra["useful_gbps"] = sample_stats::of(useful).median;
  m.extra["base_gbps"] = base_gbps;
  return m;
}

curve ratio_curve(const gpu_context& ctx, const std::string& key, const std::string& title,
                  const std::string& x_label, bool log_x) {
  curve c;
  c.key = ctx.key(key);
  c.title = title;
  c.x_label = x_label;
  c.y_unit = "x";
  c.log_x = log_x;
  return c;
}

void add_point(curve& c, double x, const measurement& m) {
  curve::point p;
  p.x = x;
  p.samples = m.samples;
  p.y = m.stats;
  c.points.push_back(std::move(p));
}

std::vector<int> misaligned_offsets(bool quick) {
  if (quick) return {0, 1, 2, 3, 4, 8, 16, 31};
  std::vector<int> v;
  for (int k = 0; k < 32; ++k) v.push_back(k);
  return v;
}

void read_patterns(pattern_run& r, std::uint32_t seed, double base, std::uint32_t* idx,
                   std::size_t n_gather, unsigned bits_uniform, unsigned bits_window) {
  gpu_context& ctx = r.ctx;
  const launch_config def = ctx.default_launch();
  const std::size_t bytes = r.words * 4;
  for (unsigned e : element_bytes) {
    const unsigned run = e / 4;
    curve c = ratio_curve(
        ctx, "pattern.read.stride.e" + std::to_string(e),
        "read, " + std::to_string(e) + "-byte elements: ratio to unit stride, " + ctx.tag,
        "stride (elements)", true);
    for (int st : strides) {
      const element_pattern pat{0, r.words / (st * run), static_cast<std::uint64_t>(st) * run, run};
      bool ok = false;
      const auto secs =
          r.timed_read([&] { VRAMKIT_CUDA_TRY(launch_pattern_read(r.buf, pat, r.sum, def, r.s)); },
                       strided_pattern_sum(pat.first, pat.n_elems, pat.period, pat.run, seed), ok);
      auto m = ratio_measurement(
          ctx, ctx.key("pattern.read.stride" + std::to_string(st) + ".e" + std::to_string(e)),
          "read " + std::to_string(e) + "-byte elements " + std::to_string(st) +
              " apart: ratio to unit stride",
          double(pat.n_elems) * e, bytes, secs, base);
      m.note = "sum of the elements read checked against its closed form; useful bytes only";
      add_point(c, st, m);
      add_verified(ctx, std::move(m), ok, "strided read sum mismatch");
      if (!ok) return;
    }
    add_curve(ctx, std::move(c));
  }
  // Every warp's 128 bytes straddle two lines unless the offset is a multiple of 32 elements.
  const std::size_t mis_words =
      std::min<std::size_t>(r.words - 32, std::max<std::size_t>(256 * MiB, 4 * ctx.l2_bytes) / 4);
  curve c = ratio_curve(ctx, "pattern.read.misaligned",
                        "read, 4-byte elements from an offset: ratio to unit stride, " + ctx.tag,
                        "offset (elements)", false);
  std::optional<measurement> worst;
  for (int k : misaligned_offsets(ctx.quick())) {
    const element_pattern pat{static_cast<std::uint64_t>(k), mis_words, 1, 1};
    bool ok = false;
    const auto secs =
        r.timed_read([&] { VRAMKIT_CUDA_TRY(launch_pattern_read(r.buf, pat, r.sum, def, r.s)); },
                     strided_pattern_sum(pat.first, pat.n_elems, 1, 1, seed), ok);
    auto m = ratio_measurement(ctx, ctx.key("pattern.read.misaligned.worst"),
                               "read 4-byte elements, warps misaligned: worst ratio to unit stride",
                               4.0 * mis_words, 4 * mis_words, secs, base);
    if (!ok) {
      add_verified(ctx, std::move(m), false,
                   "misaligned read sum mismatch at offset " + std::to_string(k));
      return;
    }
    add_point(c, k, m);
    m.extra["offset_elements"] = k;
    m.note = "contiguous 4-byte reads from element " + std::to_string(k) +
             " (the worst offset of 1-31); sum checked against its closed form";
    if (k > 0 && (!worst || m.stats.median < worst->stats.median)) worst = std::move(m);
  }
  add_curve(ctx, std::move(c));
  if (worst) add_verified(ctx, std::move(*worst), true, "");

  const std::size_t window_words = std::size_t{1} << bits_window;
  for (bool uniform : {true, false}) {
    const unsigned bits = uniform ? bits_uniform : bits_window;
    VRAMKIT_CUDA_TRY(launch_build_index(idx, n_gather, bits, 0x6A7E5u, r.s));
    r.zero_sum();
    VRAMKIT_CUDA_TRY(launch_gather_reference(idx, n_gather, seed, r.sum, r.s));
    const std::uint32_t want = r.read_sum();
    bool ok = false;
    const auto secs = r.timed_read(
        [&] { VRAMKIT_CUDA_TRY(launch_gather(r.buf, idx, n_gather, r.sum, def, r.s)); }, want, ok);
    const std::string which = uniform ? "uniform" : "l2_window";
    auto m = ratio_measurement(
        ctx, ctx.key("pattern.read.gather." + which),
        uniform ? "gather 4-byte elements at random over the buffer: ratio to unit stride"
                : "gather 4-byte elements at random within half the L2: ratio to unit stride",
        4.0 * n_gather, uniform ? bytes : window_words * 4, secs, base);
    m.extra["gathers"] = double(n_gather);
    m.extra["index_bytes_read"] = 4.0 * n_gather;
    m.note = std::string("one random 4-byte load per index (a bijective mix, no repeats") +
             (uniform ? "" : " within the window, cycled") +
             "); useful bytes exclude the index array; sum checked against a reference "
             "computed without loads";
    add_verified(ctx, std::move(m), ok, "gather sum mismatch");
  }
}

void write_patterns(pattern_run& r, double base, std::uint32_t* idx, std::size_t n_gather,
                    unsigned bits_uniform, unsigned bits_window) {
  gpu_context& ctx = r.ctx;
  const launch_config def = ctx.default_launch();
  const std::size_t bytes = r.words * 4;
  const std::uint32_t seed_old = 0x01D5EEDu, seed_w = 0x5CA77E2u;
  auto reset = [&] { VRAMKIT_CUDA_TRY(launch_fill(r.buf, r.words, seed_old, def, r.s)); };
  auto mismatches = [&](const element_pattern& pat) {
    r.zero_count();
    VRAMKIT_CUDA_TRY(
        launch_pattern_mismatches(r.buf, r.words, pat, seed_w, seed_old, r.count, r.s));
    return r.read_count();
  };
  for (unsigned e : element_bytes) {
    const unsigned run = e / 4;
    curve c = ratio_curve(
        ctx, "pattern.write.stride.e" + std::to_string(e),
        "write, " + std::to_string(e) + "-byte elements: ratio to unit stride, " + ctx.tag,
        "stride (elements)", true);
    for (int st : strides) {
      const element_pattern pat{0, r.words / (st * run), static_cast<std::uint64_t>(st) * run, run};
      reset();
      const auto secs = time_blocked(r.blocker, r.s, r.samples, r.loops, r.warmup, [&] {
        VRAMKIT_CUDA_TRY(launch_pattern_write(r.buf, pat, seed_w, def, r.s));
      });
      const auto bad = mismatches(pat);
      auto m = ratio_measurement(
          ctx, ctx.key("pattern.write.stride" + std::to_string(st) + ".e" + std::to_string(e)),
          "write " + std::to_string(e) + "-byte elements " + std::to_string(st) +
              " apart: ratio to unit stride",
          double(pat.n_elems) * e, bytes, secs, base);
      m.note = "every word checked: written elements hold the new pattern, the rest the old";
      add_point(c, st, m);
      const bool ok = bad == 0;
      add_verified(ctx, std::move(m), ok, mismatch_text(bad, r.words));
      if (!ok) return;
    }
    add_curve(ctx, std::move(c));
  }
  const std::size_t mis_words =
      std::min<std::size_t>(r.words - 32, std::max<std::size_t>(256 * MiB, 4 * ctx.l2_bytes) / 4);
  curve c = ratio_curve(ctx, "pattern.write.misaligned",
                        "write, 4-byte elements from an offset: ratio to unit stride, " + ctx.tag,
                        "offset (elements)", false);
  std::optional<measurement> worst;
  for (int k : misaligned_offsets(ctx.quick())) {
    const element_pattern pat{static_cast<std::uint64_t>(k), mis_words, 1, 1};
    reset();
    const auto secs = time_blocked(r.blocker, r.s, r.samples, r.loops, r.warmup, [&] {
      VRAMKIT_CUDA_TRY(launch_pattern_write(r.buf, pat, seed_w, def, r.s));
    });
    const auto bad = mismatches(pat);
    auto m =
        ratio_measurement(ctx, ctx.key("pattern.write.misaligned.worst"),
                          "write 4-byte elements, warps misaligned: worst ratio to unit stride",
                          4.0 * mis_words, 4 * mis_words, secs, base);
    if (bad != 0) {
      add_verified(ctx, std::move(m), false, mismatch_text(bad, r.words));
      return;
    }
    add_point(c, k, m);
    m.extra["offset_elements"] = k;
    m.note = "contiguous 4-byte writes from element " + std::to_string(k) +
             " (the worst offset of 1-31); every word checked";
    if (k > 0 && (!worst || m.stats.median < worst->stats.median)) worst = std::move(m);
  }
  add_curve(ctx, std::move(c));
  if (worst) add_verified(ctx, std::move(*worst), true, "");

  const std::size_t window_words = std::size_t{1} << bits_window;
  for (bool uniform : {true, false}) {
    VRAMKIT_CUDA_TRY(
        launch_build_index(idx, n_gather, uniform ? bits_uniform : bits_window, 0x5CA7u, r.s));
    reset();
    const auto secs = time_blocked(r.blocker, r.s, r.samples, r.loops, r.warmup, [&] {
      VRAMKIT_CUDA_TRY(launch_scatter(r.buf, idx, n_gather, seed_w, def, r.s));
    });
    r.zero_count();
    VRAMKIT_CUDA_TRY(launch_scatter_mismatches(r.buf, idx, n_gather, seed_w, r.count, r.s));
    const auto bad = r.read_count();
    const std::string which = uniform ? "uniform" : "l2_window";
    auto m = ratio_measurement(
        ctx, ctx.key("pattern.write.scatter." + which),
        uniform ? "scatter 4-byte elements at random over the buffer: ratio to unit stride"
                : "scatter 4-byte elements at random within half the L2: ratio to unit stride",
        4.0 * n_gather, uniform ? bytes : window_words * 4, secs, base);
    m.extra["scatters"] = double(n_gather);
    m.note = "one random 4-byte store per index; every scattered word read back and checked";
    add_verified(ctx, std::move(m), bad == 0, std::to_string(bad) + " scattered words wrong");
  }
}

}  // namespace

void run_pattern_section(gpu_context& ctx) {
  ctx.progress("access patterns (strides, misaligned warps, gathers, scatters)");
  // The device section's sizing, so the unit-stride read is comparable with device.read.
  std::size_t bytes = ctx.quick() ? 512 * MiB : 2 * GiB;
  bytes = std::max<std::size_t>(bytes, 8 * ctx.l2_bytes);
  const std::size_t n_gather = ctx.quick() ? 16 * MiB : 64 * MiB;
  bytes = std::min<std::size_t>(bytes, ctx.free_bytes / 3) / MiB * MiB;
  if (bytes < 64 * MiB || bytes / 4 < 2 * n_gather || ctx.l2_bytes < 4096) {
    ctx.report->skips.push_back({ctx.tag + ".pattern", "not enough free device memory"});
    return;
  }
  const std::size_t words = bytes / 4;
  device_buffer buf(bytes), idx(n_gather * 4), sum(sizeof(std::uint32_t)),
      count(sizeof(unsigned long long));
  owned_cuda_stream stream;
  stream_blocker blocker;
  pattern_run r{ctx,
                stream.get(),
                blocker,
                buf.words(),
                words,
                static_cast<std::uint32_t*>(sum.get()),
                static_cast<unsigned long long*>(count.get()),
                ctx.quick() ? 3 : 7,
                ctx.quick() ? 3 : 5};
  const std::uint32_t seed = 0x7A77E201u;
  VRAMKIT_CUDA_TRY(launch_fill(buf.words(), words, seed, ctx.default_launch(), r.s));
  const unsigned bits_uniform = std::min(32u, floor_log2(words));
  const unsigned bits_window = floor_log2(ctx.l2_bytes / 2 / 4);

  // The bases: the probe's read and write kernels at the shapes the device section chose.
  const launch_config rc = ctx.tuned_read.value_or(ctx.default_launch());
  const launch_config wc = ctx.tuned_write.value_or(ctx.default_launch());
  bool ok = false;
  // The bases get the device section's samples and loops, so the two reads compare like for like.
  const int base_samples = ctx.quick() ? 10 : 20, base_loops = ctx.quick() ? 5 : 10;
  const int pattern_samples = r.samples, pattern_loops = r.loops;
  r.samples = base_samples;
  r.loops = base_loops;
  auto secs = r.timed_read([&] { VRAMKIT_CUDA_TRY(launch_read(r.buf, words, r.sum, rc, r.s)); },
                           pattern_sum(words, seed), ok);
  auto base = bandwidth_measurement(ctx, ctx.key("pattern.read.unit"), "patterns",
                                    "unit-stride read (16-byte loads): base of the read ratios",
                                    byte_convention::read, bytes, double(bytes), secs);
  base.peak = ctx.hbm_peak_gbps;
  base.peak_basis = ctx.hbm_peak_basis;
  base.note = "the device section's read kernel and launch shape (" + cfg_note(rc) +
              "); sum checked against the pattern";
  put_cfg(base, rc);
  const double read_base = base.stats.median;
  for (const auto& m : ctx.report->results) {
    if (m.key == ctx.tag + ".device.read" && m.stats.median > 0) {
      base.extra["ratio_to_device_read"] = read_base / m.stats.median;
    }
  }
  add_verified(ctx, std::move(base), ok, "unit-stride read sum mismatch");
  if (!ok) return;

  VRAMKIT_CUDA_TRY(launch_fill(buf.words(), words, seed + 1, ctx.default_launch(), r.s));
  secs = time_blocked(blocker, r.s, base_samples, base_loops, r.warmup,
                      [&] { VRAMKIT_CUDA_TRY(launch_fill(r.buf, words, seed, wc, r.s)); });
  r.samples = pattern_samples;
  r.loops = pattern_loops;
  const std::uint64_t bad = device_mismatches(buf.words(), words, seed, r.s);
  auto wbase = bandwidth_measurement(ctx, ctx.key("pattern.write.unit"), "patterns",
                                     "unit-stride write (16-byte stores): base of the write ratios",
                                     byte_convention::written, bytes, double(bytes), secs);
  wbase.peak = ctx.hbm_peak_gbps;
  wbase.peak_basis = ctx.hbm_peak_basis;
  wbase.note = "the device section's write kernel and launch shape; every word checked";
  put_cfg(wbase, wc);
  const double write_base = wbase.stats.median;
  add_verified(ctx, std::move(wbase), bad == 0, mismatch_text(bad, words));
  if (bad != 0) return;

  auto* ip = static_cast<std::uint32_t*>(idx.get());
  read_patterns(r, seed, read_base, ip, n_gather, bits_uniform, bits_window);
  write_patterns(r, write_base, ip, n_gather, bits_uniform, bits_window);
}

}  // namespace vramkit::probe::detail

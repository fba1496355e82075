// Host bandwidth and latency sections of the probe. Bandwidth: a team of pinned threads first
// touches its share of three arrays, then times read/write/copy/triad over them, verifying every
// result against a closed form before it is reported. Latency: one pinned thread chases pointers
// through a random single cycle of cache lines, for working sets from 4 KiB upward.
#include "vramkit/probe/host_probe.hpp"

#include <sys/mman.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <chrono>
#include <ctime>
#include <fstream>
#include <iterator>
#include <memory>
#include <optional>
#include <stdexcept>
#include <thread>

#include <fmt/format.h>

#include "host_kernels.hpp"
#include "host_probe_detail.hpp"
#include "host_topology.hpp"
#include "vramkit/core/units.hpp"
#include "vramkit/core/version.hpp"
#include "vramkit/probe/detail/latency_curve.hpp"
#include "vramkit/probe/memory_budget.hpp"

namespace vramkit::probe {
namespace {

using steady = std::chrono::steady_clock;
using detail::host_topology;

double seconds_since(steady::time_point t0) {
  return std::chrono::duration<double>(steady::now() - t0).count();
}

void say(const probe_options& o, const std::string& line) {
  if (o.progress) o.progress(line);
}

// Sum of i over [lo, hi), wrapping like the kernels do.
std::uint64_t sum_index(std::uint64_t lo, std::uint64_t hi) {
  auto tri = [](std::uint64_t k) -> std::uint64_t {  // 0 + 1 + ... + (k - 1)
    return k % 2 == 0 ? (k / 2) * (k - 1) : k * ((k - 1) / 2);
  };
  return tri(hi) - tri(lo);
}
// The arrays' contents: b[i] = i + 1, c[i] = 3 i + 7 (never zero), a[i] starts at 1.
std::uint64_t b_value(std::uint64_t i) { return i + 1; }
std::uint64_t c_value(std::uint64_t i) { return 3 * i + 7; }
std::uint64_t sum_b(std::uint64_t lo, std::uint64_t hi) { return sum_index(lo, hi) + (hi - lo); }
std::uint64_t sum_c(std::uint64_t lo, std::uint64_t hi) {
  return 3 * sum_index(lo, hi) + 7 * (hi - lo);
}
constexpr std::uint64_t triad_k = 3;
std::uint64_t write_value(int rep) {
  return 0x9E3779B97F4A7C15ull ^ static_cast<std::uint64_t>(rep + 1);
}

enum class bw_kind { read, write, copy, triad };
struct bw_spec {
  bw_kind kind;
  const char* name;
  byte_convention convention;
  int streams;  // arrays of n * 8 bytes counted per pass
  const char* counting;
};
constexpr bw_spec bw_specs[] = {
    {bw_kind::read, "read", byte_convention::read, 1, "bytes read (sum reduction)"},
    {bw_kind::write, "write", byte_convention::written, 1, "bytes written (fill)"},
    {bw_kind::copy, "copy", byte_convention::read_plus_written, 2,
     "bytes read + written, as STREAM counts copy (2 x 8 B per element; write-allocate traffic "
     "not counted)"},
    {bw_kind::triad, "triad", byte_convention::read_plus_written, 3,
     "bytes read + written, as STREAM counts triad (3 x 8 B per element)"},
};

// One set of threads and memory the bandwidth tests run on.
struct placement {
  std::string key_prefix;  // "host.bw", "host.numa0.bw", "host.numa0->numa1.bw"
  std::string device;      // "host", "numa0"
  std::string where;       // human text for titles
  std::vector<int> pus;
  int mem_node = -1;  // -1: first touch by the threads
  bool one_thread = false;
  std::vector<bw_kind> kinds;
};

struct bw_outcome {
  std::vector<measurement> results;
  std::vector<skipped> skips;
};

const bw_spec& spec_of(bw_kind kind) {
  return *std::find_if(std::begin(bw_specs), std::end(bw_specs),
                       [&](const bw_spec& s) { return s.kind == kind; });
}

// The three arrays a placement runs on, on its memory node (or placed by first touch), freed on
// destruction.
class bw_arrays {
 public:
  bw_arrays(const host_topology& topo, std::size_t bytes, int node)
      : topo_(topo), bytes_(bytes), node_(node) {
    for (auto*& p : arr_) {
      p = static_cast<std::uint64_t*>(topo.allocate(bytes, node));
      if (p == nullptr) ok_ = false;
    }
  }
  ~bw_arrays() {
    for (auto* p : arr_) topo_.free_memory(p, bytes_, node_);
  }
  bw_arrays(const bw_arrays&) = delete;
  bw_arrays& operator=(const bw_arrays&) = delete;
  [[nodiscard]] bool ok() const { return ok_; }
  [[nodiscard]] std::uint64_t* a() const { return arr_[0]; }
  [[nodiscard]] std::uint64_t* b() const { return arr_[1]; }
  [[nodiscard]] std::uint64_t* c() const { return arr_[2]; }

 private:
  const host_topology& topo_;
  std::size_t bytes_;
  int node_;
  bool ok_ = true;
  std::uint64_t* arr_[3] = {nullptr, nullptr, nullptr};
};

// First touch of [lo, hi) by the thread that will use it places its pages on that thread's node.
void first_touch(const bw_arrays& arr, std::size_t lo, std::size_t hi) {
  for (std::size_t i = lo; i < hi; ++i) {
    arr.a()[i] = 1;
    arr.b()[i] = b_value(i);
    arr.c()[i] = c_value(i);
  }
}

// One pass of `kind` over [lo, hi) (pass number `rep` sets what a write stores); false when a
// read's sum is wrong.
bool run_kernel(bw_kind kind, const bw_arrays& arr, std::size_t lo, std::size_t hi, int rep) {
  switch (kind) {
    case bw_kind::read:
      return detail::kernel_read(arr.b() + lo, hi - lo) == sum_b(lo, hi);
    case bw_kind::write:
      detail::kernel_write(arr.a() + lo, hi - lo, write_value(rep));
      return true;
    case bw_kind::copy:
      detail::kernel_copy(arr.a() + lo, arr.b() + lo, hi - lo);
      return true;
    case bw_kind::triad:
      detail::kernel_triad(arr.a() + lo, arr.b() + lo, arr.c() + lo, triad_k, hi - lo);
      return true;
  }
  return false;
}

// Untimed: what the passes of `kind` left in [lo, hi), the last being pass `last_rep` — a sum,
// then spot checks that catch a permutation the sum would not.
bool verify_kernel(bw_kind kind, const bw_arrays& arr, std::size_t lo, std::size_t hi,
                   int last_rep) {
  const std::uint64_t* a = arr.a();
  bool ok = true;
  switch (kind) {
    case bw_kind::read:
      return true;  // checked on every pass
    case bw_kind::write:
      return detail::kernel_read(a + lo, hi - lo) == (hi - lo) * write_value(last_rep);
    case bw_kind::copy:
      ok = detail::kernel_read(a + lo, hi - lo) == sum_b(lo, hi);
      break;
    case bw_kind::triad:
      ok = detail::kernel_read(a + lo, hi - lo) == sum_b(lo, hi) + triad_k * sum_c(lo, hi);
      break;
  }
  for (std::size_t i = lo; ok && i < hi; i += std::max<std::size_t>(1, (hi - lo) / 61)) {
    ok = kind == bw_kind::copy ? a[i] == b_value(i) : a[i] == b_value(i) + triad_k * c_value(i);
  }
  return ok;
}

measurement bw_measurement(const placement& pl, const bw_spec& spec, const std::string& key,
                           int used, std::size_t bytes, int reps,
                           const std::vector<double>& seconds) {
  measurement r;
  r.key = key;
  r.section = "host";
  r.title = fmt::format("{} {}, {} thread{}", pl.where, spec.name, used, used == 1 ? "" : "s");
  r.device = pl.device;
  r.unit = "GB/s";
  r.convention = spec.convention;
  r.size_bytes = bytes;
  r.repetitions = reps;
  const double counted = static_cast<double>(spec.streams) * static_cast<double>(bytes);
  for (double s : seconds) r.samples.push_back(counted / s / 1e9);
  r.stats = sample_stats::of(r.samples);
  r.verified = true;
  r.note = fmt::format("{}; {} of each array; verified by checksum", spec.counting,
                       format_bytes(static_cast<double>(bytes)));
  r.extra["threads"] = used;
  r.extra["bytes_counted_per_pass"] = counted;
  if (pl.mem_node >= 0) r.extra["host_numa_node"] = pl.mem_node;
  return r;
}

// A team of pinned threads, one per PU of a placement, timing every kernel of it over the shared
// arrays: one thread alone (`one_thread`) and then all of them, each on its share.
class bw_team {
 public:
  bw_team(const host_topology& topo, const placement& pl, const bw_arrays& arr, std::size_t n,
          int reps, const probe_options& options)
      : topo_(topo),
        pl_(pl),
        arr_(arr),
        n_(n),
        reps_(reps),
        options_(options),
        nthreads_(static_cast<int>(pl.pus.size())),
        bar_(nthreads_),
        bad_(static_cast<std::size_t>(nthreads_)) {}

  bw_outcome run() {
    std::vector<std::thread> team;
    team.reserve(static_cast<std::size_t>(nthreads_));
    for (int t = 0; t < nthreads_; ++t) team.emplace_back([this, t] { body(t); });
    for (auto& t : team) t.join();
    if (pinned_failures_.load() > 0) {
      for (auto& r : out_.results)
        r.note += fmt::format("; {} thread(s) could not be pinned", pinned_failures_.load());
    }
    return std::move(out_);
  }

 private:
  struct mode {
    const char* key;
    bool all;
  };
  static constexpr int warmup = 1;

  // Boundaries on 64-byte multiples so no two threads write one cache line.
  void chunk_of(int tid, std::size_t& lo, std::size_t& hi) const {
    const std::size_t per = (n_ / static_cast<std::size_t>(nthreads_)) / 8 * 8;
    lo = per * static_cast<std::size_t>(tid);
    hi = tid + 1 == nthreads_ ? n_ : lo + per;
  }

  void body(int tid) {
    if (!topo_.pin_current_thread(pl_.pus[static_cast<std::size_t>(tid)])) ++pinned_failures_;
    std::size_t lo = 0, hi = 0;
    chunk_of(tid, lo, hi);
    first_touch(arr_, lo, hi);
    bar_.arrive_and_wait();
    std::vector<mode> modes;
    if (pl_.one_thread) modes.push_back({"one_thread", false});
    modes.push_back({"all_threads", true});
    for (const mode& m : modes) {
      for (bw_kind kind : pl_.kinds) {
        timed_passes(tid, m, kind, lo, hi);
        // Verification, untimed, each thread over its own range whatever the mode was.
        if (!verify_kernel(kind, arr_, lo, hi, warmup + reps_ - 1))
          bad_[static_cast<std::size_t>(tid)].bad = true;
        bar_.arrive_and_wait();
        if (tid == 0) collect(m, kind);
      }
    }
  }

  // warmup + reps passes, all threads starting together; thread 0 keeps the timings.
  void timed_passes(int tid, const mode& m, bw_kind kind, std::size_t lo, std::size_t hi) {
    const bool active = m.all || tid == 0;
    const std::size_t mlo = m.all ? lo : 0;
    const std::size_t mhi = m.all ? hi : n_;
    for (int r = 0; r < warmup + reps_; ++r) {
      bar_.arrive_and_wait();
      if (tid == 0) t0_ = steady::now();
      bar_.arrive_and_wait();
      if (active && !run_kernel(kind, arr_, mlo, mhi, r))
        bad_[static_cast<std::size_t>(tid)].bad = true;
      bar_.arrive_and_wait();
      if (tid == 0 && r >= warmup) seconds_.push_back(seconds_since(t0_));
    }
  }

  // Thread 0, after the others verified: one result, or a failed skip.
  void collect(const mode& m, bw_kind kind) {
    bool all_ok = true;
    for (auto& s : bad_) {
      all_ok = all_ok && !s.bad;
      s.bad = false;
    }
    const bw_spec& spec = spec_of(kind);
    const std::string key = fmt::format("{}.{}.{}", pl_.key_prefix, spec.name, m.key);
    if (!all_ok) {
      out_.skips.push_back(
          {key,
           fmt::format("{} result did not verify (checksum mismatch): not reported", spec.name),
           true});
    } else {
      out_.results.push_back(bw_measurement(pl_, spec, key, m.all ? nthreads_ : 1,
                                            n_ * sizeof(std::uint64_t), reps_, seconds_));
      say(options_, fmt::format("  {:<40} {:>10.2f} GB/s", key, out_.results.back().stats.median));
    }
    seconds_.clear();
  }

  const host_topology& topo_;
  const placement& pl_;
  const bw_arrays& arr_;
  std::size_t n_;
  int reps_;
  const probe_options& options_;
  int nthreads_;
  std::barrier<> bar_;
  struct alignas(64) slot {
    bool bad = false;
  };
  std::vector<slot> bad_;
  std::atomic<int> pinned_failures_{0};
  steady::time_point t0_{};
  std::vector<double> seconds_;
  bw_outcome out_;
};

bw_outcome run_placement(const host_topology& topo, const placement& pl, std::size_t bytes,
                         int reps, const probe_options& options) {
  const std::size_t n = bytes / sizeof(std::uint64_t);
  bytes = n * sizeof(std::uint64_t);
  bw_arrays arr(topo, bytes, pl.mem_node);
  if (!arr.ok()) {
    bw_outcome out;
    out.skips.push_back(
        {pl.key_prefix,
         fmt::format("could not allocate 3 x {} of host memory{}",
                     format_bytes(static_cast<double>(bytes)),
                     pl.mem_node >= 0 ? " on NUMA node " + std::to_string(pl.mem_node) : ""),
         false});
    return out;
  }
  bw_outcome out = bw_team(topo, pl, arr, n, reps, options).run();
  // Memory bound to a node must be there (now touched), or its figures are another node's.
  if (pl.mem_node >= 0) {
    for (const std::uint64_t* p : {arr.a(), arr.b(), arr.c()}) {
      if (const auto found = detail::misplaced_node(p, bytes, pl.mem_node)) {
        out.results.clear();
        out.skips.push_back({pl.key_prefix,
                             fmt::format("memory bound to NUMA node {} was found on node {}: not "
                                         "reported",
                                         pl.mem_node, *found),
                             false});
        break;
      }
    }
  }
  return out;
}

// --- latency -------------------------------------------------------------------------------------

std::string transparent_huge_pages_mode() {
  std::ifstream in("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string s;
  std::getline(in, s);
  const auto l = s.find('['), r = s.find(']');
  if (l == std::string::npos || r == std::string::npos || r < l) return "unavailable";
  return s.substr(l + 1, r - l - 1);
}

// The largest working set of the latency curve: --latency-size, else 256 MiB quick and 1 GiB or
// 4x the last-level cache full, within a quarter of the memory and of what the budget leaves.
std::uint64_t latency_max_bytes(const host_topology& topo, const probe_options& options) {
  std::uint64_t max_bytes = options.max_latency_bytes;
  if (max_bytes == 0) {
    max_bytes = options.quick ? 256 * MiB : GiB;
    while (!options.quick && max_bytes < 4 * topo.last_level_cache_bytes()) max_bytes *= 2;
    std::uint64_t mem = 0;
    for (const auto& nd : topo.numa_nodes()) mem += nd.memory_bytes;
    while (mem > 0 && max_bytes > 64 * MiB && max_bytes > mem / 4) max_bytes /= 2;
    // Half the reserve for the mapping's huge-page rounding and the permutation (4 B a line).
    max_bytes = std::max<std::uint64_t>(
        fit_in_budget(options.host_memory_bytes, max_bytes, 1, 0.25, 0, 2 * MiB), 4 * KiB);
  }
  return std::max<std::uint64_t>(max_bytes / 64 * 64, 4 * KiB);
}

// An anonymous mapping for the chase, aligned to 2 MiB and advised to use transparent huge pages
// where the kernel allows; unmapped on destruction.
class chase_mapping {
 public:
  explicit chase_mapping(std::uint64_t bytes) : map_bytes_(align_up(bytes, huge) + huge) {
    raw_ = mmap(nullptr, map_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw_ == MAP_FAILED) return;
    // Aligned by offsetting the mapping's own pointer (no integer-to-pointer cast).
    const auto addr = reinterpret_cast<std::uintptr_t>(raw_);
    buf_ = static_cast<char*>(raw_) + (align_up(addr, huge) - addr);
    const std::string thp = transparent_huge_pages_mode();
    const bool huge_pages = (thp == "always" || thp == "madvise") &&
                            madvise(buf_, align_up(bytes, huge), MADV_HUGEPAGE) == 0;
    pages_ = huge_pages ? "2 MiB transparent huge pages requested (madvise)"
                        : "4 KiB pages (transparent huge pages: " + thp + ")";
  }
  ~chase_mapping() {
    if (raw_ != MAP_FAILED) munmap(raw_, map_bytes_);
  }
  chase_mapping(const chase_mapping&) = delete;
  chase_mapping& operator=(const chase_mapping&) = delete;
  [[nodiscard]] char* data() const { return buf_; }
  [[nodiscard]] std::size_t mapped_bytes() const { return map_bytes_; }
  [[nodiscard]] const std::string& pages() const { return pages_; }

 private:
  static constexpr std::size_t huge = 2 * MiB;
  std::size_t map_bytes_;
  void* raw_ = MAP_FAILED;
  char* buf_ = nullptr;
  std::string pages_;
};

// One point of the latency curve: links a random single cycle of `size` bytes of 64 B lines,
// calibrates the loads from a warm-up chase, then `reps` timed chases, each checked to stop where
// the permutation says. Empty when a chase stopped at the wrong line.
std::optional<curve::point> chase_point(char* buf, std::uint64_t size, int reps, double target_s,
                                        std::size_t min_loads) {
  const std::size_t lines = size / 64;
  const auto next = detail::make_cyclic_permutation(lines, 0x5eed ^ size);
  for (std::size_t i = 0; i < lines; ++i)
    *reinterpret_cast<char**>(buf + i * 64) = buf + static_cast<std::size_t>(next[i]) * 64;
  std::size_t loads = std::size_t{1} << 18;
  auto t0 = steady::now();
  (void)detail::kernel_chase(buf, loads);
  const double est_ns = seconds_since(t0) * 1e9 / static_cast<double>(loads);
  loads = std::max<std::size_t>(min_loads,
                                static_cast<std::size_t>(target_s * 1e9 / std::max(est_ns, 0.1)));
  loads = std::min<std::size_t>(loads, 200'000'000);
  // Expected stop: back at the start after whole cycles, else walk the permutation.
  const char* expected = buf;
  if (lines <= loads) {
    loads = (loads + lines - 1) / lines * lines;
  } else {
    std::uint32_t idx = 0;
    for (std::size_t k = 0; k < loads; ++k) idx = next[idx];
    expected = buf + static_cast<std::size_t>(idx) * 64;
  }
  curve::point p;
  p.x = static_cast<double>(size);
  for (int r = 0; r < reps; ++r) {
    t0 = steady::now();
    const void* end = detail::kernel_chase(buf, loads);
    if (end != expected) return std::nullopt;
    p.samples.push_back(seconds_since(t0) * 1e9 / static_cast<double>(loads));
  }
  p.y = sample_stats::of(p.samples);
  return p;
}

// The measurement of each level read off the latency curve: the curve point nearest its plateau.
void add_latency_levels(const host_topology& topo, const curve& cv, const std::string& pages,
                        probe_report& report) {
  std::vector<detail::reported_cache> caches;
  for (const auto& c : topo.caches()) caches.push_back({c.name, c.size_bytes});
  auto levels = detail::find_levels(cv.points, caches, "host");
  for (const auto& l : levels) {
    const curve::point* best = nullptr;
    for (const auto& p : cv.points) {
      if (l.reported_size_bytes && p.x > static_cast<double>(*l.reported_size_bytes)) break;
      if (!best || std::abs(p.y.median - l.latency_ns) < std::abs(best->y.median - l.latency_ns)) {
        best = &p;
      }
    }
    if (!best) continue;
    std::string lname = l.name;
    std::transform(lname.begin(), lname.end(), lname.begin(),
                   [](unsigned char ch) { return std::tolower(ch); });
    measurement m;
    m.key = "host.latency." + lname;
    m.section = "latency";
    m.title = l.name == "DRAM"
                  ? "DRAM load latency"
                  : fmt::format("{} load latency (hwloc: {})", l.name,
                                l.reported_size_bytes
                                    ? format_bytes(static_cast<double>(*l.reported_size_bytes))
                                    : std::string("unknown"));
    m.device = "host";
    m.unit = "ns";
    m.convention = byte_convention::none;
    m.size_bytes = static_cast<std::uint64_t>(best->x);
    m.repetitions = static_cast<int>(best->samples.size());
    m.samples = best->samples;
    m.stats = best->y;
    m.verified = true;
    m.note = fmt::format(
        "dependent loads over a random single cycle of 64 B lines; {}; end of chase "
        "checked against the permutation",
        pages);
    if (l.measured_size_bytes > 0) {
      m.note += fmt::format("; curve steps past this level after {}",
                            format_bytes(static_cast<double>(l.measured_size_bytes)));
      m.extra["measured_size_bytes"] = static_cast<double>(l.measured_size_bytes);
    }
    if (l.reported_size_bytes)
      m.extra["reported_size_bytes"] = static_cast<double>(*l.reported_size_bytes);
    report.results.push_back(std::move(m));
  }
  report.levels.insert(report.levels.end(), levels.begin(), levels.end());
}

void run_latency(const host_topology& topo, const probe_options& options, probe_report& report) {
  const std::uint64_t max_bytes = latency_max_bytes(topo, options);
  const auto sizes = detail::latency_sizes(4 * KiB, max_bytes, !options.quick);
  const int reps = options.host_repetitions > 0 ? options.host_repetitions : 3;
  const double target_s = options.quick ? 0.010 : 0.020;
  const std::size_t min_loads = options.quick ? 100'000 : 1'000'000;

  chase_mapping map(max_bytes);
  if (map.data() == nullptr) {
    report.skips.push_back({"host.latency",
                            fmt::format("could not map {} for the pointer chase",
                                        format_bytes(static_cast<double>(map.mapped_bytes()))),
                            false});
    return;
  }
  report.header["host.latency.pages"] = map.pages();
  curve cv = make_curve("host.latency", "latency",
                        "host load latency vs working set (one thread, random single-cycle chase)",
                        "bytes", "ns", true);
  std::string failure;
  std::thread worker([&] {
    topo.pin_current_thread(topo.spread(topo.pus(), 1).front());
    for (std::uint64_t size : sizes) {
      auto p = chase_point(map.data(), size, reps, target_s, min_loads);
      if (!p) {
        failure = fmt::format("pointer chase at {} stopped at the wrong line",
                              format_bytes(static_cast<double>(size)));
        return;
      }
      say(options, fmt::format("  latency {:>12} {:>8.2f} ns",
                               format_bytes(static_cast<double>(size)), p->y.median));
      cv.points.push_back(std::move(*p));
    }
  });
  worker.join();
  if (!failure.empty()) {
    report.skips.push_back({"host.latency", failure + ": not reported", true});
    return;
  }
  add_latency_levels(topo, cv, map.pages(), report);
  report.curves.push_back(std::move(cv));
}

// --- latency per NUMA node and under load ------------------------------------------------------

// Dependent loads through a random single cycle of the `lines` 64-byte lines at `buf` (linked by
// the caller's thread): `reps` timed runs of `loads` loads from the start, each checked to stop
// where the permutation says.
struct chase_outcome {
  std::vector<double> ns;
  bool ok = true;
};

class dram_chase {
 public:
  dram_chase(char* buf, std::size_t lines, std::uint64_t seed)
      : buf_(buf), next_(detail::make_cyclic_permutation(lines, seed)) {
    for (std::size_t i = 0; i < lines; ++i)
      *reinterpret_cast<char**>(buf + i * 64) = buf + static_cast<std::size_t>(next_[i]) * 64;
  }
  // Loads for a run of about `seconds`, from a first untimed run.
  std::size_t calibrate(double seconds) {
    const std::size_t probe_loads = std::min<std::size_t>(next_.size(), 1 << 16);
    const auto t0 = steady::now();
    (void)detail::kernel_chase(buf_, probe_loads);
    const double ns = seconds_since(t0) * 1e9 / static_cast<double>(probe_loads);
    std::size_t loads = static_cast<std::size_t>(seconds * 1e9 / std::max(ns, 1.0));
    loads = std::clamp<std::size_t>(loads, 10'000, next_.size() / 2);
    expected_ = buf_;
    std::uint32_t idx = 0;
    for (std::size_t k = 0; k < loads; ++k) idx = next_[idx];
    expected_ = buf_ + static_cast<std::size_t>(idx) * 64;
    loads_ = loads;
    return loads;
  }
  [[nodiscard]] chase_outcome run(int reps) const {
    chase_outcome out;
    for (int r = 0; r < reps; ++r) {
      const auto t0 = steady::now();
      const void* end = detail::kernel_chase(buf_, loads_);
      out.ns.push_back(seconds_since(t0) * 1e9 / static_cast<double>(loads_));
      if (end != expected_) out.ok = false;
    }
    return out;
  }
  [[nodiscard]] std::size_t loads() const { return loads_; }

 private:
  char* buf_;
  std::vector<std::uint32_t> next_;
  const char* expected_ = nullptr;
  std::size_t loads_ = 0;
};

// A working set that lives in DRAM: 4x the last-level cache, at least 256 MiB (quick 128 MiB).
// (Within an eighth of the memory and a quarter of what the budget leaves; at least 2 MiB.)
std::size_t dram_working_set(const host_topology& topo, const probe_options& options) {
  std::size_t ws = std::max<std::size_t>(4 * topo.last_level_cache_bytes(),
                                         options.quick ? 128 * MiB : 256 * MiB);
  std::uint64_t mem = 0;
  for (const auto& nd : topo.numa_nodes()) mem += nd.memory_bytes;
  while (mem > 0 && ws > 16 * MiB && ws > mem / 8) ws /= 2;
  ws = fit_in_budget(options.host_memory_bytes, ws, 1, 0.25, 0, 2 * MiB);
  return std::max<std::size_t>(ws / (2 * MiB) * (2 * MiB), 2 * MiB);
}

measurement latency_measurement(std::string key, std::string section, std::string title,
                                std::string device, std::size_t ws, std::vector<double> ns) {
  auto m = make_measurement(std::move(key), std::move(section), std::move(title), std::move(device),
                            "ns", std::move(ns));
  m.size_bytes = ws;
  m.verified = true;
  return m;
}

void run_node_latency(const host_topology& topo, const probe_options& options,
                      probe_report& report) {
  const std::size_t ws = dram_working_set(topo, options);
  for (const auto& nd : topo.numa_nodes()) {
    const std::string name = fmt::format("numa{}", nd.os_index);
    const std::string key = "host." + name + ".latency.dram";
    const auto* near = detail::nearest_cpu_node(topo.numa_nodes(), nd.os_index);
    if (near == nullptr || nd.memory_bytes < 4 * ws) {
      report.skips.push_back({key, "no CPUs to run from, or too little memory on the node"});
      continue;
    }
    char* buf = static_cast<char*>(topo.allocate(ws, nd.os_index));
    if (buf == nullptr) {
      report.skips.push_back(
          {key, "could not allocate memory bound to NUMA node " + std::to_string(nd.os_index)});
      continue;
    }
    chase_outcome out;
    std::size_t loads = 0;
    std::thread worker([&] {
      topo.pin_current_thread(near->pus.front());
      dram_chase chase(buf, ws / 64, 0x0DE5 + static_cast<std::uint64_t>(nd.os_index));
      loads = chase.calibrate(options.quick ? 0.01 : 0.02);
      out = chase.run(options.host_repetitions > 0 ? options.host_repetitions : 3);
    });
    worker.join();
    const auto misplaced = detail::misplaced_node(buf, ws, nd.os_index);
    topo.free_memory(buf, ws, nd.os_index);
    if (misplaced) {
      report.skips.push_back({key, fmt::format("memory bound to the node was found on node {}: "
                                               "not reported",
                                               *misplaced)});
      continue;
    }
    if (!out.ok) {
      report.skips.push_back({key, "pointer chase stopped at the wrong line: not reported", true});
      continue;
    }
    auto m = latency_measurement(
        key, "latency",
        fmt::format("DRAM load latency, memory on NUMA node {} ({}), thread on node {}",
                    nd.os_index, detail::to_string(detail::classify(nd)), near->os_index),
        name, ws, out.ns);
    m.note = fmt::format(
        "{} dependent loads per sample over a random single cycle of 64 B lines in {} bound "
        "to the node; end of chase checked",
        loads, format_bytes(static_cast<double>(ws)));
    m.extra["host_numa_node"] = nd.os_index;
    m.extra["thread_numa_node"] = near->os_index;
    m.extra["memory_only_node"] = nd.pus.empty() ? 1 : 0;
    report.results.push_back(std::move(m));
  }
}

// Threads that stream reads of their own buffers, pausing `delay` ns after each 64 KiB chunk, until
// stopped; every chunk read is checked against its sum. UINT64_MAX starts none.
class streaming_load {
 public:
  static constexpr std::size_t chunk_words = 64 * KiB / 8;

  streaming_load(const host_topology& topo, const std::vector<int>& pus,
                 std::vector<std::unique_ptr<std::uint64_t[]>>& bufs, std::size_t per_words,
                 std::uint64_t delay)
      : bytes_(bufs.size()) {
    if (delay == UINT64_MAX) return;
    for (std::size_t t = 0; t < bufs.size(); ++t) {
      team_.emplace_back([&, t, per_words, delay] {
        topo.pin_current_thread(pus[t + 1]);
        std::uint64_t* b = bufs[t].get();
        for (std::size_t i = 0; i < per_words; ++i) b[i] = b_value(i);  // first touch
        started_.fetch_add(1);
        for (std::size_t c = 0; !stop_.load(std::memory_order_relaxed);
             c = (c + chunk_words) % per_words) {
          if (detail::kernel_read(b + c, chunk_words) != sum_b(c, c + chunk_words))
            bad_.fetch_add(1);
          bytes_[t].fetch_add(chunk_words * 8, std::memory_order_relaxed);
          if (delay > 0) {
            const auto until = steady::now() + std::chrono::nanoseconds(delay);
            while (steady::now() < until) {
            }
          }
        }
      });
    }
    while (started_.load() < team_.size()) std::this_thread::yield();
  }
  ~streaming_load() { stop(); }
  streaming_load(const streaming_load&) = delete;
  streaming_load& operator=(const streaming_load&) = delete;

  [[nodiscard]] std::uint64_t bytes_streamed() const {
    std::uint64_t s = 0;
    for (const auto& b : bytes_) s += b.load();
    return s;
  }
  // Stops and joins the threads; true when every chunk they read summed right.
  bool stop() {
    stop_.store(true);
    for (auto& th : team_) th.join();
    team_.clear();
    return bad_.load() == 0;
  }

 private:
  std::atomic<bool> stop_{false};
  std::atomic<std::size_t> started_{0}, bad_{0};
  std::vector<std::atomic<std::uint64_t>> bytes_;
  std::vector<std::thread> team_;
};

// The figures of the loaded-latency curve: idle, full load, and where the latency doubles.
void add_loaded_results(const curve& cv, const std::string& how, std::size_t ws,
                        std::size_t streamers, const std::vector<double>& max_ns, double max_gbps,
                        probe_report& report) {
  auto idle = latency_measurement("host.latency.loaded.idle", "loaded-latency",
                                  "DRAM load latency, no other thread streaming", "host", ws,
                                  cv.points.front().samples);
  idle.note = how;
  report.results.push_back(std::move(idle));
  auto full = latency_measurement(
      "host.latency.loaded.max", "loaded-latency",
      fmt::format("DRAM load latency, {} threads streaming at full speed", streamers), "host", ws,
      max_ns);
  full.extra["streamed_gbps"] = max_gbps;
  full.note = how;
  report.results.push_back(std::move(full));
  if (const auto at = detail::bandwidth_at_latency(cv.points, 2.0)) {
    auto m = make_measurement("host.latency.loaded.double_at", "loaded-latency",
                              "streamed bandwidth at which the DRAM load latency doubles", "host",
                              "GB/s", {*at});
    m.convention = byte_convention::read;
    m.verified = true;
    m.note =
        "read off the loaded-latency curve, interpolated between its two points around "
        "twice the idle latency";
    report.results.push_back(std::move(m));
  } else {
    report.skips.push_back(
        {"host.latency.loaded.double_at",
         fmt::format("the latency never doubled, up to {:.1f} GB/s streamed", max_gbps)});
  }
}

// Loaded latency (Intel MLC's idea): one thread chases pointers through DRAM while every other
// thread streams reads of its own buffer, pausing `delay` ns after each 64 KiB; from no streaming
// through lighter loads to full speed. Every chunk a streamer reads is checked against its sum.
void run_loaded_latency(const host_topology& topo, const probe_options& options,
                        probe_report& report) {
  const auto pus = topo.spread(topo.pus(), 0);
  if (pus.size() < 2) {
    report.skips.push_back({"host.latency.loaded", "one CPU: nothing to load the memory with"});
    return;
  }
  const std::size_t ws = dram_working_set(topo, options);
  const std::size_t streamers = pus.size() - 1;
  constexpr std::size_t chunk_words = streaming_load::chunk_words;
  // Each streamer's buffer: together twice the last-level cache (at least 16 MiB each), within a
  // quarter of what the budget leaves.
  std::size_t per_words =
      std::max<std::size_t>(16 * MiB, 2 * topo.last_level_cache_bytes() / streamers) / 8;
  per_words = fit_in_budget(options.host_memory_bytes, per_words * 8, static_cast<int>(streamers),
                            0.25, 0, chunk_words * 8) /
              8;
  if (per_words == 0) {
    report.skips.push_back(
        {"host.latency.loaded", "too little host memory available for the streaming threads"});
    return;
  }
  per_words = per_words / chunk_words * chunk_words;
  std::vector<std::unique_ptr<std::uint64_t[]>> bufs(streamers);
  for (auto& b : bufs) b.reset(new std::uint64_t[per_words]);
  char* chase_buf = static_cast<char*>(topo.allocate(ws, -1));
  if (chase_buf == nullptr) {
    report.skips.push_back({"host.latency.loaded", "could not map the chase buffer"});
    return;
  }
  curve cv = make_curve("host.latency.loaded", "loaded-latency",
                        "host DRAM load latency while other threads stream (x: their GB/s)", "GB/s",
                        "ns", false);
  std::string failure;
  std::vector<double> max_ns;
  double max_gbps = 0;
  std::size_t loads = 0;
  const int reps = options.host_repetitions > 0 ? options.host_repetitions : 3;
  std::vector<std::uint64_t> delays = {UINT64_MAX};  // UINT64_MAX: no streaming at all
  for (auto d : detail::loaded_latency_delays(options.quick)) delays.push_back(d);

  std::thread chaser([&] {
    topo.pin_current_thread(pus.front());
    dram_chase chase(chase_buf, ws / 64, 0x10AD);
    loads = chase.calibrate(options.quick ? 0.01 : 0.02);
    for (const std::uint64_t delay : delays) {
      streaming_load load(topo, pus, bufs, per_words, delay);
      const std::uint64_t b0 = load.bytes_streamed();
      const auto t0 = steady::now();
      const chase_outcome out = chase.run(reps);
      const double sec = seconds_since(t0);
      const std::uint64_t b1 = load.bytes_streamed();
      const bool sums_ok = load.stop();
      if (!out.ok || !sums_ok) {
        failure = !out.ok ? "the pointer chase stopped at the wrong line"
                          : "a streaming thread read a wrong sum";
        return;
      }
      curve::point p;
      p.x = static_cast<double>(b1 - b0) / sec / 1e9;
      p.samples = out.ns;
      p.y = sample_stats::of(p.samples);
      say(options, fmt::format("  loaded latency {:>8.2f} ns at {:>8.2f} GB/s", p.y.median, p.x));
      if (delay == 0) {
        max_ns = out.ns;
        max_gbps = p.x;
      }
      cv.points.push_back(std::move(p));
    }
  });
  chaser.join();
  topo.free_memory(chase_buf, ws, -1);
  if (!failure.empty()) {
    report.skips.push_back({"host.latency.loaded", failure + ": not reported", true});
    return;
  }
  const std::string how = fmt::format(
      "{} dependent loads per sample over a random cycle of 64 B lines in {}; {} streaming "
      "threads reading {} each, pausing after every 64 KiB; chase ends and every streamed chunk "
      "checked",
      loads, format_bytes(static_cast<double>(ws)), streamers,
      format_bytes(static_cast<double>(per_words * 8)));
  add_loaded_results(cv, how, ws, streamers, max_ns, max_gbps, report);
  report.curves.push_back(std::move(cv));
}

// --- bandwidth section ---------------------------------------------------------------------

// Bytes of each of the three arrays: --size, else STREAM's rule (at least 4x the last-level cache;
// a full run also >= 256 MiB; quick at most 1 GiB), three arrays in at most half the memory and
// half of what the budget leaves. 0 when not even 64 KiB arrays fit. Writes the header keys.
std::uint64_t bandwidth_array_bytes(const host_topology& topo, const probe_options& options,
                                    probe_report& report) {
  const std::uint64_t llc = topo.last_level_cache_bytes();
  std::uint64_t bytes = options.host_buffer_bytes;
  std::string sizing = "set by --size";
  if (bytes == 0) {
    const std::uint64_t floor = options.quick ? 64 * MiB : 256 * MiB;
    bytes = std::max(floor, 4 * llc);
    if (options.quick) bytes = std::min<std::uint64_t>(bytes, GiB);
    std::uint64_t mem = 0;
    for (const auto& nd : topo.numa_nodes()) mem += nd.memory_bytes;
    while (mem > 0 && bytes > 16 * MiB && 3 * bytes > mem / 2) bytes /= 2;
    sizing = llc > 0 ? fmt::format("auto: >= 4 x last-level cache ({})",
                                   format_bytes(static_cast<double>(llc)))
                     : "auto: last-level cache unknown";
    const std::uint64_t fits = fit_in_budget(options.host_memory_bytes, bytes, 3, 0.5, 0, MiB);
    if (fits < bytes) {
      bytes = fits;
      sizing += fmt::format("; limited to half of the {} available to this process",
                            format_bytes(static_cast<double>(*options.host_memory_bytes)));
    }
    if (bytes < 64 * KiB) return 0;
  }
  bytes = std::max<std::uint64_t>(bytes / 64 * 64, 64 * KiB);
  report.header["host.bw.array_bytes"] =
      format_bytes(static_cast<double>(bytes)) + " (" + sizing + ")";
  if (llc > 0 && bytes < 4 * llc) {
    report.header["host.bw.warning"] =
        "arrays smaller than 4x the last-level cache: figures may include cache hits";
  }
  return bytes;
}

// The kernels to time: all four, or those of options.host_kernels (invalid_argument for others).
std::vector<bw_kind> bandwidth_kinds(const probe_options& options) {
  for (const auto& name : options.host_kernels) {
    if (std::none_of(std::begin(bw_specs), std::end(bw_specs),
                     [&](const bw_spec& sp) { return name == sp.name; }))
      throw std::invalid_argument("unknown host bandwidth kernel '" + name +
                                  "' (read, write, copy, triad)");
  }
  std::vector<bw_kind> kinds;
  for (const auto& spec : bw_specs) {
    if (options.host_kernels.empty() || options.host_kernels.count(spec.name))
      kinds.push_back(spec.kind);
  }
  return kinds;
}

// Per NUMA node (several nodes only): its threads on its memory, a memory-only node from the
// nearest node with CPUs, and the far-memory copies (threads on one node, memory on another). A
// quick run times the copy only there, when the copy is wanted at all.
void add_node_placements(const host_topology& topo, const probe_options& options,
                         const std::vector<bw_kind>& all_kinds, std::vector<placement>& out) {
  const auto& nodes = topo.numa_nodes();
  const bool copy_asked =
      std::find(all_kinds.begin(), all_kinds.end(), bw_kind::copy) != all_kinds.end();
  if (nodes.size() < 2 || (options.quick && !copy_asked)) return;
  const auto kinds = options.quick ? std::vector<bw_kind>{bw_kind::copy} : all_kinds;
  for (const auto& nd : nodes) {
    const std::string name = fmt::format("numa{}", nd.os_index);
    if (nd.pus.empty()) {
      const auto* near = detail::nearest_cpu_node(nodes, nd.os_index);
      if (near == nullptr || nd.memory_bytes == 0) continue;
      out.push_back({"host." + name + ".bw", name,
                     fmt::format("NUMA node {} (memory-only; threads on node {})", nd.os_index,
                                 near->os_index),
                     topo.spread(near->pus, 0), nd.os_index, false, kinds});
      continue;
    }
    out.push_back({"host." + name + ".bw", name, "NUMA node " + std::to_string(nd.os_index),
                   topo.spread(nd.pus, 0), nd.os_index, false, kinds});
    for (const auto& far : nodes) {
      if (!copy_asked) break;
      if (far.os_index == nd.os_index || far.memory_bytes == 0) continue;
      out.push_back(
          {fmt::format("host.{}->numa{}.bw", name, far.os_index),
           name,
           fmt::format("threads on NUMA {}, memory on NUMA {}", nd.os_index, far.os_index),
           topo.spread(nd.pus, 0),
           far.os_index,
           false,
           {bw_kind::copy}});
    }
  }
}

void run_bandwidth(const host_topology& topo, const probe_options& options, probe_report& report) {
  const int reps = options.host_repetitions > 0 ? options.host_repetitions : options.quick ? 3 : 10;
  const auto all_kinds = bandwidth_kinds(options);
  const std::uint64_t bytes = bandwidth_array_bytes(topo, options, report);
  if (bytes == 0) {
    report.skips.push_back(
        {"host.bw", fmt::format("only {} of host memory available: too little for three 64 KiB "
                                "arrays",
                                format_bytes(static_cast<double>(*options.host_memory_bytes)))});
    return;
  }
  const int threads =
      options.host_threads > 0 ? std::min(options.host_threads, topo.pu_count()) : topo.pu_count();
  std::vector<placement> placements;
  placements.push_back({"host.bw", "host", "host", topo.spread(topo.pus(), threads), -1,
                        options.host_one_thread, all_kinds});
  add_node_placements(topo, options, all_kinds, placements);
  for (const auto& pl : placements) {
    say(options, fmt::format("host bandwidth: {} ({} threads, 3 x {})", pl.where, pl.pus.size(),
                             format_bytes(static_cast<double>(bytes))));
    auto out = run_placement(topo, pl, bytes, reps, options);
    for (auto& m : out.results) report.results.push_back(std::move(m));
    for (auto& sk : out.skips) report.skips.push_back(std::move(sk));
  }
}

}  // namespace

std::vector<std::string> host_probe_sections() { return {"host", "latency", "loaded-latency"}; }

std::vector<std::pair<std::string, std::string>> host_probe_keys() {
  std::vector<std::pair<std::string, std::string>> keys;
  for (const auto& s : bw_specs) {
    for (const char* mode : {"one_thread", "all_threads"}) {
      keys.emplace_back(
          fmt::format("host.bw.{}.{}", s.name, mode),
          fmt::format("host memory {} bandwidth, {} ({}), GB/s", s.name,
                      std::string(mode) == "one_thread" ? "one thread" : "all threads",
                      to_string(s.convention)));
    }
  }
  for (const auto& s : bw_specs) {
    keys.emplace_back(fmt::format("host.numa{{N}}.bw.{}.all_threads", s.name),
                      fmt::format("{} bandwidth with threads and memory on NUMA node N (several "
                                  "nodes only), GB/s",
                                  s.name));
  }
  keys.emplace_back(
      "host.numa{A}->numa{B}.bw.copy.all_threads",
      "copy bandwidth with threads on NUMA node A and memory on node B (far memory), GB/s");
  keys.emplace_back("host.latency",
                    "curve: load latency vs working set, 4 KiB to >= 1 GiB (quick: 256 MiB), ns");
  keys.emplace_back("host.latency.{level}",
                    "load latency of a level read off the curve: l1d, l2, l3, dram, ns");
  keys.emplace_back("host.numa{N}.latency.dram",
                    "DRAM load latency with the memory on NUMA node N, memory-only nodes included "
                    "(several nodes only), ns");
  keys.emplace_back("host.latency.loaded",
                    "curve: DRAM load latency while other threads stream at increasing rates "
                    "(x: their GB/s), ns");
  keys.emplace_back("host.latency.loaded.idle",
                    "DRAM load latency with no other thread streaming, ns");
  keys.emplace_back("host.latency.loaded.max",
                    "DRAM load latency with every other thread streaming at full speed, ns");
  keys.emplace_back("host.latency.loaded.double_at",
                    "streamed bandwidth at which the load latency is twice the idle one, GB/s");
  return keys;
}

void fill_host_header(const probe_options& options, probe_report& report) {
  host_topology topo;
  auto& h = report.header;
  h["vramkit.version"] = version();
  h["vramkit.build"] = build_summary();
  if (!options.command_line.empty()) {
    h["command_line"] = options.command_line;
  } else {
    // The process's own arguments, NUL-separated in /proc/self/cmdline.
    std::ifstream in("/proc/self/cmdline", std::ios::binary);
    std::string arg, line;
    while (std::getline(in, arg, '\0')) line += (line.empty() ? "" : " ") + arg;
    if (!line.empty()) h["command_line"] = line;
  }
  {
    std::time_t now = std::time(nullptr);
    std::tm tm{};
    gmtime_r(&now, &tm);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
    h["date"] = buf;
  }
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) == 0) h["hostname"] = host;
  utsname u{};
  if (uname(&u) == 0)
    h["host.os.kernel"] = fmt::format("{} {} {}", u.sysname, u.release, u.machine);
  h["host.cpu.model"] = topo.cpu_model();
  h["host.cpu.cores"] = std::to_string(topo.core_count());
  h["host.cpu.threads"] = std::to_string(topo.pu_count());
  h["host.topology"] = topo.backend();
  h["host.numa.nodes"] = std::to_string(topo.numa_nodes().size());
  for (const auto& nd : topo.numa_nodes()) {
    h[fmt::format("host.numa.{}.memory", nd.os_index)] =
        format_bytes(static_cast<double>(nd.memory_bytes));
    h[fmt::format("host.numa.{}.threads", nd.os_index)] = std::to_string(nd.pus.size());
    h[fmt::format("host.numa.{}.kind", nd.os_index)] = detail::to_string(detail::classify(nd));
  }
  for (const auto& c : topo.caches()) {
    h["host.cache." + c.name] =
        fmt::format("{} x {}", format_bytes(static_cast<double>(c.size_bytes)), c.instances);
  }
}

void run_host_probe(const probe_options& options, probe_report& report) {
  if (!options.wants("host") && !options.wants("latency") && !options.wants("loaded-latency"))
    return;
  const host_topology topo;
  detail::run_host_sections(topo, options, report);
}

void detail::run_host_sections(const host_topology& topo, const probe_options& options,
                               probe_report& report) {
  if (options.wants("host")) run_bandwidth(topo, options, report);
  if (options.wants("latency")) {
    say(options, "host latency: pointer chase");
    run_latency(topo, options, report);
    if (topo.numa_nodes().size() > 1) run_node_latency(topo, options, report);
  }
  if (options.wants("loaded-latency")) {
    say(options, "host loaded latency: pointer chase while other threads stream");
    run_loaded_latency(topo, options, report);
  }
}

}  // namespace vramkit::probe

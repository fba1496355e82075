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
#include <stdexcept>
#include <thread>

#include <fmt/format.h>

#include "host_kernels.hpp"
#include "host_topology.hpp"
#include "vramkit/core/units.hpp"
#include "vramkit/core/version.hpp"
#include "vramkit/probe/detail/latency_curve.hpp"

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

bw_outcome run_placement(const host_topology& topo, const placement& pl, std::size_t bytes,
                         int reps, const probe_options& options) {
  bw_outcome out;
  const std::size_t n = bytes / sizeof(std::uint64_t);
  bytes = n * sizeof(std::uint64_t);
  std::uint64_t* arr[3] = {nullptr, nullptr, nullptr};
  for (auto& p : arr) {
    p = static_cast<std::uint64_t*>(topo.allocate(bytes, pl.mem_node));
    if (!p) {
      for (auto* q : arr) topo.free_memory(q, bytes, pl.mem_node);
      out.skips.push_back(
          {pl.key_prefix,
           fmt::format("could not allocate 3 x {} of host memory{}",
                       format_bytes(static_cast<double>(bytes)),
                       pl.mem_node >= 0 ? " on NUMA node " + std::to_string(pl.mem_node) : ""),
           false});
      return out;
    }
  }
  std::uint64_t* a = arr[0];
  std::uint64_t* b = arr[1];
  std::uint64_t* c = arr[2];

  const int nthreads = static_cast<int>(pl.pus.size());
  std::barrier<> bar(nthreads);
  const int warmup = 1;
  struct alignas(64) slot {
    bool bad = false;
  };
  std::vector<slot> bad(static_cast<std::size_t>(nthreads));
  std::atomic<int> pinned_failures{0};
  steady::time_point t0{};
  std::vector<double> seconds;

  struct mode {
    const char* key;
    bool all;
  };
  std::vector<mode> modes;
  if (pl.one_thread) modes.push_back({"one_thread", false});
  modes.push_back({"all_threads", true});

  auto chunk_of = [&](int tid, std::size_t& lo, std::size_t& hi) {
    // Boundaries on 64-byte multiples so no two threads write one cache line.
    const std::size_t per = (n / static_cast<std::size_t>(nthreads)) / 8 * 8;
    lo = per * static_cast<std::size_t>(tid);
    hi = tid + 1 == nthreads ? n : lo + per;
  };

  auto body = [&](int tid) {
    if (!topo.pin_current_thread(pl.pus[static_cast<std::size_t>(tid)])) ++pinned_failures;
    std::size_t lo = 0, hi = 0;
    chunk_of(tid, lo, hi);
    // First touch by the thread that will use the range places its pages on that thread's node.
    for (std::size_t i = lo; i < hi; ++i) {
      a[i] = 1;
      b[i] = b_value(i);
      c[i] = c_value(i);
    }
    bar.arrive_and_wait();
    for (const mode& m : modes) {
      const bool active = m.all || tid == 0;
      const std::size_t mlo = m.all ? lo : 0;
      const std::size_t mhi = m.all ? hi : n;
      for (bw_kind kind : pl.kinds) {
        for (int r = 0; r < warmup + reps; ++r) {
          bar.arrive_and_wait();
          if (tid == 0) t0 = steady::now();
          bar.arrive_and_wait();
          if (active) {
            switch (kind) {
              case bw_kind::read:
                if (detail::kernel_read(b + mlo, mhi - mlo) != sum_b(mlo, mhi)) {
                  bad[static_cast<std::size_t>(tid)].bad = true;
                }
                break;
              case bw_kind::write:
                detail::kernel_write(a + mlo, mhi - mlo, write_value(r));
                break;
              case bw_kind::copy:
                detail::kernel_copy(a + mlo, b + mlo, mhi - mlo);
                break;
              case bw_kind::triad:
                detail::kernel_triad(a + mlo, b + mlo, c + mlo, triad_k, mhi - mlo);
                break;
            }
          }
          bar.arrive_and_wait();
          if (tid == 0 && r >= warmup) seconds.push_back(seconds_since(t0));
        }
        // Verification, untimed, each thread over its own range whatever the mode was.
        bool ok = true;
        switch (kind) {
          case bw_kind::read:
            break;
          case bw_kind::write:
            ok = detail::kernel_read(a + lo, hi - lo) == (hi - lo) * write_value(warmup + reps - 1);
            break;
          case bw_kind::copy:
            ok = detail::kernel_read(a + lo, hi - lo) == sum_b(lo, hi);
            break;
          case bw_kind::triad:
            ok = detail::kernel_read(a + lo, hi - lo) == sum_b(lo, hi) + triad_k * sum_c(lo, hi);
            break;
        }
        // Spot checks catch a permutation that a sum would not.
        for (std::size_t i = lo; ok && i < hi; i += std::max<std::size_t>(1, (hi - lo) / 61)) {
          if (kind == bw_kind::copy) ok = a[i] == b_value(i);
          if (kind == bw_kind::triad) ok = a[i] == b_value(i) + triad_k * c_value(i);
        }
        if (!ok) bad[static_cast<std::size_t>(tid)].bad = true;
        bar.arrive_and_wait();
        if (tid == 0) {
          bool all_ok = true;
          for (auto& s : bad) {
            all_ok = all_ok && !s.bad;
            s.bad = false;
          }
          const bw_spec& spec = *std::find_if(std::begin(bw_specs), std::end(bw_specs),
                                              [&](const bw_spec& s) { return s.kind == kind; });
          const std::string key = fmt::format("{}.{}.{}", pl.key_prefix, spec.name, m.key);
          const int used = m.all ? nthreads : 1;
          if (!all_ok) {
            out.skips.push_back({key,
                                 fmt::format("{} result did not verify (checksum mismatch): "
                                             "not reported",
                                             spec.name),
                                 true});
          } else {
            measurement r;
            r.key = key;
            r.section = "host";
            r.title =
                fmt::format("{} {}, {} thread{}", pl.where, spec.name, used, used == 1 ? "" : "s");
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
            out.results.push_back(std::move(r));
            say(options,
                fmt::format("  {:<40} {:>10.2f} GB/s", key, out.results.back().stats.median));
          }
          seconds.clear();
        }
      }
    }
  };

  std::vector<std::thread> team;
  team.reserve(static_cast<std::size_t>(nthreads));
  for (int t = 0; t < nthreads; ++t) team.emplace_back(body, t);
  for (auto& t : team) t.join();
  for (auto* p : arr) topo.free_memory(p, bytes, pl.mem_node);
  if (pinned_failures.load() > 0) {
    for (auto& r : out.results)
      r.note += fmt::format("; {} thread(s) could not be pinned", pinned_failures.load());
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

void run_latency(const host_topology& topo, const probe_options& options, probe_report& report) {
  const std::uint64_t llc = topo.last_level_cache_bytes();
  std::uint64_t max_bytes = options.max_latency_bytes;
  if (max_bytes == 0) {
    max_bytes = options.quick ? 256 * MiB : GiB;
    // A full run reaches well past the last-level cache, as far as a quarter of the memory allows.
    while (!options.quick && max_bytes < 4 * llc) max_bytes *= 2;
    std::uint64_t mem = 0;
    for (const auto& nd : topo.numa_nodes()) mem += nd.memory_bytes;
    while (mem > 0 && max_bytes > 64 * MiB && max_bytes > mem / 4) max_bytes /= 2;
  }
  max_bytes = std::max<std::uint64_t>(max_bytes / 64 * 64, 4 * KiB);
  const auto sizes = detail::latency_sizes(4 * KiB, max_bytes, !options.quick);
  const int reps = options.host_repetitions > 0 ? options.host_repetitions : 3;
  const double target_s = options.quick ? 0.010 : 0.020;
  const std::size_t min_loads = options.quick ? 100'000 : 1'000'000;

  const std::size_t huge = 2 * MiB;
  const std::size_t map_bytes = align_up(max_bytes, huge) + huge;
  void* raw = mmap(nullptr, map_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) {
    report.skips.push_back({"host.latency",
                            fmt::format("could not map {} for the pointer chase",
                                        format_bytes(static_cast<double>(map_bytes))),
                            false});
    return;
  }
  char* buf = reinterpret_cast<char*>(align_up(reinterpret_cast<std::uintptr_t>(raw), huge));
  const std::string thp = transparent_huge_pages_mode();
  bool huge_pages = false;
  if (thp == "always" || thp == "madvise")
    huge_pages = madvise(buf, align_up(max_bytes, huge), MADV_HUGEPAGE) == 0;
  const std::string pages = huge_pages ? "2 MiB transparent huge pages requested (madvise)"
                                       : "4 KiB pages (transparent huge pages: " + thp + ")";
  report.header["host.latency.pages"] = pages;

  curve cv;
  cv.key = "host.latency";
  cv.section = "latency";
  cv.title = "host load latency vs working set (one thread, random single-cycle chase)";
  cv.x_label = "bytes";
  cv.y_unit = "ns";
  cv.log_x = true;
  std::vector<std::vector<double>> raw_samples;
  std::string failure;

  std::thread worker([&] {
    const int pu = topo.spread(topo.pus(), 1).front();
    topo.pin_current_thread(pu);
    for (std::uint64_t size : sizes) {
      const std::size_t lines = size / 64;
      const auto next = detail::make_cyclic_permutation(lines, 0x5eed ^ size);
      for (std::size_t i = 0; i < lines; ++i) {
        *reinterpret_cast<char**>(buf + i * 64) = buf + static_cast<std::size_t>(next[i]) * 64;
      }
      // Calibrate the number of loads from a first (warm-up) chase.
      std::size_t loads = std::size_t{1} << 18;
      auto t0 = steady::now();
      const void* end = detail::kernel_chase(buf, loads);
      const double est_ns = seconds_since(t0) * 1e9 / static_cast<double>(loads);
      loads = std::max<std::size_t>(
          min_loads, static_cast<std::size_t>(target_s * 1e9 / std::max(est_ns, 0.1)));
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
        end = detail::kernel_chase(buf, loads);
        const double ns = seconds_since(t0) * 1e9 / static_cast<double>(loads);
        if (end != expected) {
          failure = fmt::format("pointer chase at {} stopped at the wrong line",
                                format_bytes(static_cast<double>(size)));
          return;
        }
        p.samples.push_back(ns);
      }
      p.y = sample_stats::of(p.samples);
      say(options, fmt::format("  latency {:>12} {:>8.2f} ns",
                               format_bytes(static_cast<double>(size)), p.y.median));
      cv.points.push_back(std::move(p));
    }
  });
  worker.join();
  munmap(raw, map_bytes);
  if (!failure.empty()) {
    report.skips.push_back({"host.latency", failure + ": not reported", true});
    return;
  }

  std::vector<detail::reported_cache> caches;
  for (const auto& c : topo.caches()) caches.push_back({c.name, c.size_bytes});
  auto levels = detail::find_levels(cv.points, caches, "host");
  for (const auto& l : levels) {
    // The measurement of a level is the curve point nearest its plateau latency.
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
  chase_outcome run(int reps) const {
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
std::size_t dram_working_set(const host_topology& topo, const probe_options& options) {
  std::size_t ws = std::max<std::size_t>(4 * topo.last_level_cache_bytes(),
                                         options.quick ? 128 * MiB : 256 * MiB);
  std::uint64_t mem = 0;
  for (const auto& nd : topo.numa_nodes()) mem += nd.memory_bytes;
  while (mem > 0 && ws > 16 * MiB && ws > mem / 8) ws /= 2;
  return ws / (2 * MiB) * (2 * MiB);
}

measurement latency_measurement(std::string key, std::string section, std::string title,
                                std::string device, std::size_t ws, std::vector<double> ns) {
  measurement m;
  m.key = std::move(key);
  m.section = std::move(section);
  m.title = std::move(title);
  m.device = std::move(device);
  m.unit = "ns";
  m.size_bytes = ws;
  m.repetitions = static_cast<int>(ns.size());
  m.samples = std::move(ns);
  m.stats = sample_stats::of(m.samples);
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
    topo.free_memory(buf, ws, nd.os_index);
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
  constexpr std::size_t chunk_words = 64 * KiB / 8;
  const std::size_t per_words =
      std::max<std::size_t>(16 * MiB, 2 * topo.last_level_cache_bytes() / streamers) / 8 /
      chunk_words * chunk_words;
  std::vector<std::unique_ptr<std::uint64_t[]>> bufs(streamers);
  for (auto& b : bufs) b.reset(new std::uint64_t[per_words]);
  char* chase_buf = static_cast<char*>(topo.allocate(ws, -1));
  if (chase_buf == nullptr) {
    report.skips.push_back({"host.latency.loaded", "could not map the chase buffer"});
    return;
  }
  curve cv;
  cv.key = "host.latency.loaded";
  cv.section = "loaded-latency";
  cv.title = "host DRAM load latency while other threads stream (x: their GB/s)";
  cv.x_label = "GB/s";
  cv.y_unit = "ns";
  cv.log_x = false;
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
      std::atomic<bool> stop{false};
      std::atomic<std::size_t> started{0}, bad{0};
      std::vector<std::atomic<std::uint64_t>> bytes(streamers);
      std::vector<std::thread> team;
      if (delay != UINT64_MAX) {
        for (std::size_t t = 0; t < streamers; ++t) {
          team.emplace_back([&, t] {
            topo.pin_current_thread(pus[t + 1]);
            std::uint64_t* b = bufs[t].get();
            for (std::size_t i = 0; i < per_words; ++i) b[i] = b_value(i);  // first touch
            started.fetch_add(1);
            for (std::size_t c = 0; !stop.load(std::memory_order_relaxed);
                 c = (c + chunk_words) % per_words) {
              if (detail::kernel_read(b + c, chunk_words) != sum_b(c, c + chunk_words))
                bad.fetch_add(1);
              bytes[t].fetch_add(chunk_words * 8, std::memory_order_relaxed);
              if (delay > 0) {
                const auto until = steady::now() + std::chrono::nanoseconds(delay);
                while (steady::now() < until) {
                }
              }
            }
          });
        }
        while (started.load() < streamers) std::this_thread::yield();
      }
      auto total = [&] {
        std::uint64_t s = 0;
        for (auto& b : bytes) s += b.load();
        return s;
      };
      const std::uint64_t b0 = total();
      const auto t0 = steady::now();
      const chase_outcome out = chase.run(reps);
      const double sec = seconds_since(t0);
      const std::uint64_t b1 = total();
      stop.store(true);
      for (auto& th : team) th.join();
      if (!out.ok || bad.load() != 0) {
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
    measurement m;
    m.key = "host.latency.loaded.double_at";
    m.section = "loaded-latency";
    m.title = "streamed bandwidth at which the DRAM load latency doubles";
    m.device = "host";
    m.unit = "GB/s";
    m.convention = byte_convention::read;
    m.samples = {*at};
    m.repetitions = 1;
    m.stats = sample_stats::of(m.samples);
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
  report.curves.push_back(std::move(cv));
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
  host_topology topo;
  if (options.wants("host")) {
    const int reps = options.host_repetitions > 0 ? options.host_repetitions
                     : options.quick              ? 3
                                                  : 10;
    const std::uint64_t llc = topo.last_level_cache_bytes();
    std::uint64_t bytes = options.host_buffer_bytes;
    std::string sizing = "set by --size";
    if (bytes == 0) {
      // STREAM's rule: each array at least 4x the last-level cache; a full run also >= 256 MiB.
      const std::uint64_t floor = options.quick ? 64 * MiB : 256 * MiB;
      bytes = std::max(floor, 4 * llc);
      if (options.quick) bytes = std::min<std::uint64_t>(bytes, GiB);
      std::uint64_t mem = 0;
      for (const auto& nd : topo.numa_nodes()) mem += nd.memory_bytes;
      // Three arrays in at most half the memory.
      while (mem > 0 && bytes > 16 * MiB && 3 * bytes > mem / 2) bytes /= 2;
      sizing = llc > 0 ? fmt::format("auto: >= 4 x last-level cache ({})",
                                     format_bytes(static_cast<double>(llc)))
                       : "auto: last-level cache unknown";
    }
    bytes = std::max<std::uint64_t>(bytes / 64 * 64, 64 * KiB);
    report.header["host.bw.array_bytes"] =
        format_bytes(static_cast<double>(bytes)) + " (" + sizing + ")";
    if (llc > 0 && bytes < 4 * llc) {
      report.header["host.bw.warning"] =
          "arrays smaller than 4x the last-level cache: figures may include cache hits";
    }
    const int threads = options.host_threads > 0 ? std::min(options.host_threads, topo.pu_count())
                                                 : topo.pu_count();
    std::vector<bw_kind> all_kinds;
    for (const auto& spec : bw_specs) {
      if (options.host_kernels.empty() || options.host_kernels.count(spec.name))
        all_kinds.push_back(spec.kind);
    }
    for (const auto& name : options.host_kernels) {
      if (std::none_of(std::begin(bw_specs), std::end(bw_specs),
                       [&](const bw_spec& sp) { return name == sp.name; }))
        throw std::invalid_argument("unknown host bandwidth kernel '" + name +
                                    "' (read, write, copy, triad)");
    }

    std::vector<placement> placements;
    placements.push_back({"host.bw", "host", "host", topo.spread(topo.pus(), threads), -1,
                          options.host_one_thread, all_kinds});
    const auto& nodes = topo.numa_nodes();
    // Per node, a quick run and the far-memory comparison time the copy only, when it is wanted.
    const bool copy_asked =
        std::find(all_kinds.begin(), all_kinds.end(), bw_kind::copy) != all_kinds.end();
    if (nodes.size() > 1) {
      for (const auto& nd : nodes) {
        const std::string name = fmt::format("numa{}", nd.os_index);
        if (nd.pus.empty()) {
          // A memory-only node is measured from the nearest node with CPUs.
          const auto* near = detail::nearest_cpu_node(nodes, nd.os_index);
          if (near == nullptr || nd.memory_bytes == 0) continue;
          if (!options.quick || copy_asked) {
            placements.push_back({"host." + name + ".bw", name,
                                  fmt::format("NUMA node {} (memory-only; threads on node {})",
                                              nd.os_index, near->os_index),
                                  topo.spread(near->pus, 0), nd.os_index, false,
                                  options.quick ? std::vector<bw_kind>{bw_kind::copy} : all_kinds});
          }
          continue;
        }
        if (!options.quick || copy_asked) {
          placements.push_back({"host." + name + ".bw", name,
                                "NUMA node " + std::to_string(nd.os_index), topo.spread(nd.pus, 0),
                                nd.os_index, false,
                                options.quick ? std::vector<bw_kind>{bw_kind::copy} : all_kinds});
        }
        for (const auto& far : nodes) {
          if (!copy_asked) break;
          if (far.os_index == nd.os_index || far.memory_bytes == 0) continue;
          placements.push_back(
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
    for (const auto& pl : placements) {
      say(options, fmt::format("host bandwidth: {} ({} threads, 3 x {})", pl.where, pl.pus.size(),
                               format_bytes(static_cast<double>(bytes))));
      auto out = run_placement(topo, pl, bytes, reps, options);
      for (auto& m : out.results) report.results.push_back(std::move(m));
      for (auto& s : out.skips) report.skips.push_back(std::move(s));
    }
  }
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

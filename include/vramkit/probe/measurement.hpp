// The probe's result model: one `measurement` per figure (with its unit, byte convention, size,
// repetitions, raw samples and spread), `curve`s for size sweeps, and the `probe_report` that holds
// them with the machine header. Plain values; not synchronised.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "vramkit/core/sample_stats.hpp"

namespace vramkit::probe {

/// Version of the JSON schema written by to_json (docs/probe-schema.md). Bump on any change.
inline constexpr int schema_version = 1;

/// How bytes were counted for a bandwidth figure.
enum class byte_convention {
  none,               ///< not a bandwidth (latency, time per operation, ratio)
  copied_once,        ///< bytes moved from source to destination, counted once (cudaMemcpy style)
  read_plus_written,  ///< bytes read plus bytes written (STREAM style)
  read,               ///< bytes read
  written,            ///< bytes written
};
const char* to_string(byte_convention c) noexcept;

/// min / median / max of a set of samples: core's definition (vramkit/core/sample_stats.hpp).
using vramkit::sample_stats;

/// Verdict of one figure against the reference table.
enum class verdict_kind { normal, low, high, unknown };
const char* to_string(verdict_kind v) noexcept;  ///< "normal", "low", "high", "unknown"

/// One measured figure. `key` is stable across versions (see `vramkit probe --list`).
struct measurement {
  std::string key;      ///< e.g. "gpu0.h2d.pinned", "host.bw.copy.all_threads"
  std::string section;  ///< the --only section it belongs to: host, latency, gpu, h2d, ...
  std::string title;    ///< human label
  std::string device;   ///< "host", "numa0", "gpu0", "gpu0->gpu1"
  std::string unit;     ///< "GB/s", "ns", "us", "%"
  byte_convention convention = byte_convention::none;
  std::uint64_t size_bytes = 0;  ///< buffer, transfer or working-set size
  int repetitions = 0;
  std::vector<double> samples;  ///< raw samples in `unit`
  sample_stats stats;           ///< of `samples`
  std::optional<double> peak;   ///< theoretical peak in `unit` where one exists
  std::string peak_basis;       ///< how the peak was computed
  bool verified = false;        ///< result checked (checksum or reference) before reporting
  std::string note;             ///< e.g. the verification, or why a figure looks as it does
  verdict_kind verdict = verdict_kind::unknown;
  std::string verdict_reason;           ///< likely cause when not normal
  std::map<std::string, double> extra;  ///< further numbers (e.g. overlap ratio parts)

  [[nodiscard]] std::optional<double> percent_of_peak() const {
    if (!peak || *peak <= 0) return std::nullopt;
    return 100.0 * stats.median / *peak;
  }
};

/// A curve: y measured over x (bandwidth vs transfer size, latency vs working set).
struct curve {
  std::string key;  ///< e.g. "gpu0.h2d.pinned.sweep", "host.latency"
  std::string section;
  std::string title;
  std::string x_label;  ///< "bytes"
  std::string y_unit;   ///< "GB/s" or "ns"
  struct point {
    double x = 0;
    sample_stats y;
    std::vector<double> samples;
  };
  std::vector<point> points;
  bool log_x = true;
};

/// A measurement of `samples` in `unit`, with its repetitions (one per sample) and stats; the
/// rest (convention, size, peak, verification, verdict) is the caller's to set.
measurement make_measurement(std::string key, std::string section, std::string title,
                             std::string device, std::string unit, std::vector<double> samples);

/// A curve of y in `y_unit` over x in `x_label`, without points yet.
curve make_curve(std::string key, std::string section, std::string title, std::string x_label,
                 std::string y_unit, bool log_x);

/// A section or test that did not run, with the reason people see. `failed` marks a test that ran
/// but whose result did not verify (its speed is not reported); the CLI then exits 1.
struct skipped {
  std::string key;
  std::string reason;
  bool failed = false;
};

/// A cache or memory level read off a latency curve, and what hwloc says.
struct memory_level {
  std::string name;    ///< "L1", "L2", "L3", "DRAM", "HBM", "TLB reach"
  std::string device;  ///< "host", "gpu0"
  double latency_ns = 0;
  std::uint64_t measured_size_bytes = 0;  ///< where the curve steps past this level (0 = last)
  std::optional<std::uint64_t> reported_size_bytes;  ///< hwloc / device attribute
};

/// Everything a probe run produced.
///
/// Header keys read by apply_verdicts (verdict.hpp), filled by the GPU side where known:
///   gpu.N.name                                    device name, matched against the reference table
///   gpu.N.pcie.gen.current / gpu.N.pcie.gen.max   PCIe link generation, trained and maximum
///   gpu.N.pcie.width.current / gpu.N.pcie.width.max  PCIe link width (lanes)
///   gpu.N.numa_node                               NUMA node nearest the device
///   gpu.N.clock.sm.current / gpu.N.clock.sm.max   SM clock in MHz (optional)
///   gpu.N.clock.memory.current / gpu.N.clock.memory.max  memory clock in MHz (optional)
/// and per measurement `extra["host_numa_node"]`: the NUMA node of the host buffer it used.
struct probe_report {
  int schema = schema_version;
  std::map<std::string, std::string> header;  ///< vramkit version, command line, CPU, devices...
  std::vector<measurement> results;
  std::vector<curve> curves;
  std::vector<memory_level> levels;
  std::vector<skipped> skips;
};

/// Options of a probe run.
struct probe_options {
  bool quick = false;                   ///< shorter run (<= 15 s on one H200)
  std::set<std::string> only;           ///< sections to run; empty = all
  int host_threads = 0;                 ///< 0 = all hardware threads
  std::uint64_t host_buffer_bytes = 0;  ///< 0 = auto (well past the last-level cache)
  std::uint64_t max_latency_bytes = 0;  ///< 0 = auto (>= 1 GiB full, smaller quick)
  int host_repetitions = 0;  ///< timed samples per host figure; 0 = auto (full 10, quick 3)
  /// Host bandwidth kernels to time ("read", "write", "copy", "triad"); empty = all four.
  std::set<std::string> host_kernels;
  bool host_one_thread = true;  ///< also time each host kernel on a single thread
  /// Host memory the probe may use for its buffers; empty = what this process may still take
  /// (run_probe reads MemAvailable, cgroup limits and RLIMIT_AS: see memory_budget.hpp). Sizes
  /// chosen automatically fit in it; a requested size that does not is refused (invalid_input).
  std::optional<std::uint64_t> host_memory_bytes;
  std::string command_line;  ///< recorded in the report header
  /// Progress lines for stderr; may be empty.
  std::function<void(const std::string&)> progress;

  [[nodiscard]] bool wants(const std::string& section) const {
    return only.empty() || only.count(section) > 0;
  }
};

}  // namespace vramkit::probe

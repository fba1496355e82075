// sampler: takes one `sample` (every GPU through an nvml_api, plus the host) per call. It keeps the
// previous NVLink and PCIe counters to turn them into rates. Not thread-safe: one thread samples
// (the exporter's background thread or the terminal view's loop) and hands copies to others.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "vramkit/core/nvml_api.hpp"
#include "vramkit/core/result.hpp"
#include "vramkit/monitor/sample.hpp"

namespace vramkit::monitor {

struct sampler_options {
  std::filesystem::path host_root = "/";  ///< where /proc and /sys are read
  std::vector<unsigned> devices;          ///< device indices to report; empty = all
  bool read_host = true;                  ///< false: GPU only (benchmarks of the NVML side)
  /// Milliseconds since the epoch; tests inject a stepped clock.
  std::function<std::int64_t()> clock_ms;
  /// The owner (pod, container, Slurm job, plan) of a GPU process, for gpu_process::owner and
  /// its workload name; unset = none. Called once per process per sample on the sampling thread.
  std::function<process_owner(std::uint32_t pid)> workload_of;
};

class sampler {
 public:
  /// `gpus` is the GPU source, or unavailable (the reason is recorded in every sample and the
  /// host is still read).
  sampler(result<std::shared_ptr<nvml_api>> gpus, sampler_options options = {});

  /// Reads everything once. Never throws for platform failures: a device that fails is marked
  /// (state lost/error) and the others are still read.
  sample take();

  /// Throws invalid_input when a requested device index does not exist, naming it and the valid
  /// range. Call once at start (the CLI does) — later disappearance is a state, not an error.
  void validate_devices();

  [[nodiscard]] bool has_gpus() const noexcept { return gpus_ != nullptr; }
  [[nodiscard]] const std::string& unavailable_reason() const noexcept { return reason_; }

 private:
  gpu_sample read_gpu(unsigned index, std::int64_t now_ms);

  std::shared_ptr<nvml_api> gpus_;
  std::string reason_;
  sampler_options options_;
  // Previous cumulative counters by uuid, so renumbering cannot mix devices.
  struct counter_prev {
    std::int64_t at_ms = 0;
    std::uint64_t rx = 0, tx = 0;
  };
  std::map<std::string, counter_prev> nvlink_prev_;
  std::map<std::string, counter_prev> pcie_prev_;
  std::map<unsigned, std::pair<std::string, std::string>> known_;  // index -> last uuid, name
};

/// Current wall-clock time in milliseconds since the epoch.
std::int64_t now_ms();

/// Parses a sampling interval with parse_duration (core/units.hpp): "1s", "500ms", "0.5s", "2m",
/// "1h", or a bare number of seconds. Throws invalid_input naming the text when it is not a
/// duration or is outside 10 ms .. 1 h.
std::chrono::milliseconds parse_interval(const std::string& text);

}  // namespace vramkit::monitor

// The monitor's data model: one `sample` is a timestamp plus what was read from every GPU and from
// the host at that moment. Fields that a device or kernel does not provide stay empty
// (std::optional), so "unsupported" is a value. Plain values; not synchronised.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "vramkit/monitor/process_owner.hpp"

namespace vramkit::monitor {

/// Version of the JSON written by to_json (docs/monitor.md). Bump on any change.
inline constexpr int sample_schema_version = 1;

/// State of one device in one sample.
enum class device_state {
  ok,     ///< all required queries answered
  lost,   ///< the device fell off the bus or disappeared since the last sample
  error,  ///< a required query (memory) failed; see state_reason
};
const char* to_string(device_state s) noexcept;
device_state device_state_from_string(const std::string& text);  ///< throws invalid_input

/// A process using a GPU, joined with what the host knows about it.
struct gpu_process {
  std::uint32_t pid = 0;
  std::optional<std::uint64_t> used_bytes;      ///< device memory; empty when the driver hides it
  std::string kind;                             ///< "compute", "graphics" or "compute+graphics"
  std::string command;                          ///< command line from /proc, else the driver's name
  std::string user;                             ///< owner from /proc status Uid; empty when unknown
  std::optional<std::uint64_t> host_rss_bytes;  ///< VmRSS; empty when the pid is not visible
  /// The workload the process runs in (workload_name of `owner`: "pod ns/name", "pod <uid>",
  /// "slurm job 42"), filled by whoever knows (cluster attribution); empty when none or unknown.
  std::string workload;
  /// Its pod, container, Slurm job and planned bytes, from the same attribution.
  process_owner owner;
};

struct mig_instance {
  unsigned gpu_instance_id = 0;
  unsigned compute_instance_id = 0;
  std::string uuid;
  std::optional<std::uint64_t> memory_total_bytes;
  std::optional<std::uint64_t> memory_used_bytes;
};

/// One GPU at one moment. Rates are per second; utilization in percent (0-100).
struct gpu_sample {
  unsigned index = 0;
  std::string uuid;
  std::string name;
  device_state state = device_state::ok;
  std::string state_reason;
  std::optional<std::uint64_t> memory_total_bytes;
  std::optional<std::uint64_t> memory_used_bytes;
  std::optional<std::uint64_t> memory_free_bytes;
  std::optional<std::uint64_t> memory_reserved_bytes;  ///< v2 query only; not part of used
  std::optional<double> utilization_gpu_percent;
  std::optional<double> utilization_memory_percent;
  std::optional<double> pcie_rx_bytes_per_second;
  std::optional<double> pcie_tx_bytes_per_second;
  std::optional<double> nvlink_rx_bytes_per_second;
  std::optional<double> nvlink_tx_bytes_per_second;
  std::optional<unsigned> sm_clock_mhz;
  std::optional<unsigned> memory_clock_mhz;
  std::optional<double> temperature_celsius;
  std::optional<double> power_watts;
  std::optional<std::uint64_t> ecc_corrected_errors;
  std::optional<std::uint64_t> ecc_uncorrected_errors;
  std::optional<std::uint64_t> retired_pages;
  std::vector<mig_instance> mig;
  std::vector<gpu_process> processes;
  /// Queries that gave no value, with why ("pcie": "not_supported"): shown, never fatal.
  std::map<std::string, std::string> unavailable;
};

struct numa_node_memory {
  unsigned node = 0;
  std::uint64_t total_bytes = 0;
  std::uint64_t free_bytes = 0;
  std::optional<std::uint64_t> used_bytes;
};

/// /proc/meminfo figures in bytes (the kernel reports kB = KiB).
struct host_memory {
  std::uint64_t total_bytes = 0;
  std::optional<std::uint64_t> available_bytes;
  std::optional<std::uint64_t> free_bytes;
  std::optional<std::uint64_t> cached_bytes;
  std::optional<std::uint64_t> buffers_bytes;
  std::optional<std::uint64_t> swap_total_bytes;
  std::optional<std::uint64_t> swap_free_bytes;
  std::optional<std::uint64_t> hugepages_total;
  std::optional<std::uint64_t> hugepages_free;
  std::optional<std::uint64_t> hugepage_size_bytes;
  std::optional<std::uint64_t> mlocked_bytes;
  std::optional<std::uint64_t> unevictable_bytes;
};

/// The memory controller of this process's cgroup. No limit set -> limit_bytes empty.
struct cgroup_memory {
  int version = 2;   ///< 1 or 2
  std::string path;  ///< the cgroup path from /proc/self/cgroup
  std::optional<std::uint64_t> limit_bytes;
  std::optional<std::uint64_t> usage_bytes;
};

/// Resident memory of one process (the GPU processes).
struct host_process {
  std::uint32_t pid = 0;
  std::string command;
  std::string user;
  std::optional<std::uint64_t> rss_bytes;
  std::optional<std::uint64_t> locked_bytes;  ///< VmLck
  std::optional<std::uint64_t> pinned_bytes;  ///< VmPin
};

struct host_sample {
  std::optional<host_memory> memory;  ///< empty when /proc/meminfo cannot be read
  std::vector<numa_node_memory> numa;
  std::optional<cgroup_memory> cgroup;
  std::vector<host_process> processes;
};

/// Everything read at one moment.
struct sample {
  std::int64_t timestamp_ms = 0;       ///< milliseconds since the Unix epoch (UTC)
  double sample_duration_seconds = 0;  ///< how long taking this sample took
  std::string gpu_source;              ///< "nvml", "fake", or "" when no GPU source
  std::string gpu_unavailable_reason;  ///< why there are no GPUs, when there are none
  std::string driver_version;
  std::vector<gpu_sample> gpus;
  host_sample host;
};

}  // namespace vramkit::monitor

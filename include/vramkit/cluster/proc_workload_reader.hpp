// proc_workload_reader: the workload label of a process from its /proc/<pid>/cgroup, as the
// sampler's workload_of wants it (watch shows it, serve exports it). Thread-safe.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>

namespace vramkit::cluster {

/// "pod <uid>" or "slurm job <id>" for a process, read from `host_root`/proc/<pid>/cgroup with
/// workload_of_proc_cgroup (a pod wins over a job); empty when the file is unreadable or names
/// neither.
[[nodiscard]] std::string workload_label(const std::filesystem::path& host_root, std::uint32_t pid);

/// workload_label bound to `host_root`, for sampler_options::workload_of.
[[nodiscard]] std::function<std::string(std::uint32_t pid)> proc_workload_reader(
    std::filesystem::path host_root);

}  // namespace vramkit::cluster

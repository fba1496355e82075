// Host memory readers: /proc/meminfo, per-NUMA-node meminfo, per-process status and command line,
// and the cgroup memory limit of this process (v2 memory.max/memory.current, v1 fallback). Each
// takes the file-system root to read under ("/" on a live system, a fixture tree in tests). Pure
// functions over files; thread-safe. Missing files are expected and give empty values.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "vramkit/monitor/sample.hpp"

namespace vramkit::monitor {

/// Parses meminfo text ("MemTotal:  1024 kB" lines); nullopt when MemTotal is absent.
std::optional<host_memory> parse_meminfo(const std::string& text);
/// Reads <root>/proc/meminfo.
std::optional<host_memory> read_host_memory(const std::filesystem::path& root);

/// Reads <root>/sys/devices/system/node/node*/meminfo, sorted by node; empty without NUMA sysfs.
std::vector<numa_node_memory> read_numa_memory(const std::filesystem::path& root);

/// Reads <root>/proc/<pid>/status and cmdline; nullopt when the process is not visible.
std::optional<host_process> read_host_process(const std::filesystem::path& root, std::uint32_t pid);

/// Parses a cgroup v2 memory.max / v1 memory.limit_in_bytes value: "max" or a value at or above
/// 2^62 (v1's "unlimited") -> nullopt, a number -> that many bytes. Throws nothing; garbage ->
/// nullopt.
std::optional<std::uint64_t> parse_cgroup_limit(const std::string& text);

/// Reads the memory cgroup of <root>/proc/self/cgroup: v2 (line "0::/path") from
/// <root>/sys/fs/cgroup/<path>/memory.{max,current}, falling back to the mount root when the path
/// is not visible (inside a container's namespace); v1 (line "N:memory:/path" or
/// "N:...,memory,...:/path") from <root>/sys/fs/cgroup/memory/... . nullopt when neither is found.
std::optional<cgroup_memory> read_cgroup_memory(const std::filesystem::path& root);

}  // namespace vramkit::monitor

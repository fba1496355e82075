// How much host memory the probe may use: the least of MemAvailable, what the memory cgroups of the
// process (and every ancestor, v1 or v2) still allow, and the address-space limit (RLIMIT_AS). The
// probe sizes its host buffers from it, so a limit it did not know about never kills it. Readers
// take a file-system root so tests run against fixture trees. Pure functions apart from the
// readers; thread-safe.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace vramkit::probe {

/// One limit on the memory the process may still take.
struct memory_limit {
  std::string source;             ///< "MemAvailable", "cgroup v2 /a/b", "RLIMIT_AS"
  std::uint64_t limit_bytes = 0;  ///< the limit itself (MemAvailable: the amount available)
  std::uint64_t used_bytes = 0;   ///< charged against it now (0 for MemAvailable)
  [[nodiscard]] std::uint64_t left() const {
    return limit_bytes > used_bytes ? limit_bytes - used_bytes : 0;
  }
};

/// What the probe may use, with every limit that was found.
struct memory_budget {
  std::vector<memory_limit> limits;
  /// The least that any limit leaves; empty when none could be read (then nothing is capped).
  [[nodiscard]] std::optional<std::uint64_t> available_bytes() const;
  /// The limit that leaves the least, or nullptr.
  [[nodiscard]] const memory_limit* tightest() const;
  /// One line: "3.20 GiB available (cgroup v1 /job: limit 4.00 GiB, 0.80 GiB in use)".
  [[nodiscard]] std::string describe() const;
  /// Every limit on one line: "MemAvailable 20.00 GiB; RLIMIT_AS limit 8.00 GiB, 512.00 MiB in
  /// use"; "none" when there is none.
  [[nodiscard]] std::string describe_all() const;
};

/// Reads MemAvailable (`root`/proc/meminfo), the memory cgroups of the process and their
/// ancestors (mount points from `root`/proc/self/mountinfo, else /sys/fs/cgroup[/memory]), and
/// the address space in use (VmSize in `root`/proc/self/status) against `address_space_limit`
/// (RLIMIT_AS; empty = unlimited), less `address_space_reserve` for thread stacks and allocator
/// arenas the probe will still map. Missing files are skipped; nothing throws.
memory_budget read_memory_budget(const std::filesystem::path& root,
                                 std::optional<std::uint64_t> address_space_limit,
                                 std::uint64_t address_space_reserve = 0);

/// read_memory_budget for this process: `/`, its RLIMIT_AS, and (when the address space is
/// limited) a reserve for the threads the probe starts: an 8 MiB stack per hardware thread and
/// 256 MiB for the few malloc arenas of the threads that allocate.
memory_budget current_memory_budget();

/// The largest `bytes` up to `wanted` (a multiple of `granule`) of which `count` take at most
/// `fraction` of `available` bytes; `wanted` when `available` is unknown, 0 when that is below
/// `floor`.
std::uint64_t fit_in_budget(std::optional<std::uint64_t> available, std::uint64_t wanted, int count,
                            double fraction, std::uint64_t floor, std::uint64_t granule = 64);

}  // namespace vramkit::probe

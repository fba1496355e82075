// residency_stats: the counters of a residency_manager (hits, misses, bytes moved each way,
// evictions, time the callers' streams waited for copies, residency). A plain value snapshot.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>

namespace vramkit::tier {

/// A snapshot of a residency_manager's counters; every count is cumulative since creation or the
/// last reset_counters(), residency figures are current except the peak.
struct residency_stats {
  std::uint64_t acquires = 0;
  std::uint64_t hits = 0;                ///< acquires that found the buffer resident
  std::uint64_t misses = 0;              ///< acquires that had to allocate (and maybe copy in)
  std::uint64_t prefetches = 0;          ///< prefetch calls that started a copy
  std::uint64_t prefetch_hits = 0;       ///< hits on a buffer brought in by a prefetch
  std::uint64_t prefetches_dropped = 0;  ///< prefetches that could not fit in the budget
  std::uint64_t evictions = 0;
  std::uint64_t copies_in = 0;   ///< host -> device copies (acquire misses and prefetches)
  std::uint64_t copies_out = 0;  ///< device -> host copies (dirty evictions, host access)
  std::uint64_t bytes_h2d = 0;
  std::uint64_t bytes_d2h = 0;
  /// Time callers' streams spent blocked waiting for a copy in (or the evictions before it),
  /// measured by host functions on the stream around the wait; only while measuring is enabled.
  std::chrono::nanoseconds stream_wait{0};
  std::uint64_t stream_waits = 0;  ///< acquires whose stream had to wait for a copy

  std::size_t budget_bytes = 0;
  std::size_t resident_bytes = 0;  ///< device bytes held (aligned sizes)
  std::size_t peak_resident_bytes = 0;
  std::size_t acquired_bytes = 0;  ///< resident bytes currently acquired
  std::size_t pinned_bytes = 0;    ///< resident bytes of pinned-in-place buffers
  std::size_t buffers = 0;         ///< live buffers
  std::size_t resident_buffers = 0;
};

}  // namespace vramkit::tier

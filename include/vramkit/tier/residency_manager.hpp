// residency_manager: tiered buffers with a home in pinned host memory and, while acquired or
// cached, a copy in device memory, under a device byte budget with LRU eviction and prefetch.
// Thread-safe: every member function may be called from any thread; one mutex guards the state and
// is never held across a blocking device call (synchronize, pinned allocation or free).
#pragma once

#include <chrono>
#include <cstddef>
#include <iosfwd>
#include <memory>
#include <string>

#include "vramkit/core/device_api.hpp"
#include "vramkit/mr/memory_resource.hpp"
#include "vramkit/tier/residency_stats.hpp"
#include "vramkit/tier/tiered_buffer.hpp"

namespace vramkit::tier {

/// Settings of a residency_manager.
struct residency_options {
  /// Device bytes the manager may hold at once (buffer sizes rounded up to 256 bytes).
  std::size_t device_budget_bytes = std::size_t{1} << 30;
  /// Measure how long callers' streams wait for copies (two host functions on the caller's stream
  /// per waiting acquire).
  bool measure_stream_wait = true;
  /// Record a trace of the moves (copy in/out, evictions, prefetches); at most trace_capacity
  /// events are kept, the rest counted as dropped.
  bool record_trace = true;
  std::size_t trace_capacity = 1 << 16;
};

/// Keeps tiered buffers resident on the device within a byte budget.
///
/// Ordering: copies run on the manager's copy stream; `acquire` makes the caller's stream wait on
/// an event recorded after the copy (no host blocking) and `release` records a use event on the
/// caller's stream, which any later eviction or copy back waits on. Example:
///   vramkit::tier::residency_manager m(api, {.device_budget_bytes = 4 << 30});
///   auto b = m.create(64 << 20);
///   std::memcpy(m.host_data(b, access_mode::write), src, 64 << 20);
///   float* d = static_cast<float*>(m.acquire(b, s, access_mode::read_write));
///   launch_my_kernel(d, s);
///   m.release(b, s);
class residency_manager {
 public:
  /// A manager whose device memory comes from `device_memory` (allocated and freed in stream order
  /// on the copy stream) and whose pinned homes come from `pinned_memory`. Both must outlive it.
  residency_manager(device_api& api, mr::memory_resource& device_memory,
                    mr::memory_resource& pinned_memory, residency_options options = {});
  /// A manager with default resources over `api` (stream-ordered device memory, pinned host).
  explicit residency_manager(device_api& api, residency_options options = {});
  /// Waits for outstanding copies, then frees every buffer. Buffers still acquired are freed too.
  ~residency_manager();
  residency_manager(const residency_manager&) = delete;
  residency_manager& operator=(const residency_manager&) = delete;

  /// A new buffer of `bytes` (> 0) with a zero-filled pinned home; not resident until acquired or
  /// prefetched.
  tiered_buffer create(std::size_t bytes, buffer_flags flags = buffer_flags::none);
  /// Frees the buffer (waiting for copies that still read its home). logic_error when it is
  /// acquired or the handle is stale.
  void destroy(tiered_buffer buffer);

  /// Makes `buffer` resident and returns its device pointer, valid for work on `stream` until
  /// release(buffer, stream). Evicts least recently used unacquired buffers when the budget needs
  /// room. Throws out_of_memory (with summary()) when the buffer cannot fit next to the acquired
  /// and pinned-in-place ones, logic_error for a stale handle or a write to a read_only buffer;
  /// on a throw no state changes except evictions already made.
  void* acquire(tiered_buffer buffer, stream_view stream, access_mode access);
  /// Ends one acquire of `buffer` on `stream`: records a use event on `stream`. logic_error when
  /// there is no matching acquire (state unchanged).
  void release(tiered_buffer buffer, stream_view stream);
  /// Starts copying `buffer` in now (on the copy stream) so that a later acquire on `stream` hits.
  /// A hint: dropped (and counted) when it cannot fit without evicting acquired or pinned buffers.
  void prefetch(tiered_buffer buffer, stream_view stream);

  /// The up-to-date host copy of a buffer that is not acquired (blocks while a dirty device copy
  /// is copied back). With `write` or `read_write` the device copy is dropped, so host writes are
  /// seen by the next acquire. Valid until the buffer is next acquired or destroyed.
  void* host_data(tiered_buffer buffer, access_mode access = access_mode::read);

  [[nodiscard]] std::size_t size(tiered_buffer buffer) const;
  [[nodiscard]] bool is_resident(tiered_buffer buffer) const;
  [[nodiscard]] residency_stats stats() const;
  /// Zeroes cumulative counters and sets the peak to the current residency.
  void reset_counters();
  /// One block of text: budget, resident, acquired, pinned, peak, buffers, hits/misses, bytes.
  [[nodiscard]] std::string summary() const;
  /// Waits until every copy issued so far has completed (blocks the calling thread).
  void synchronize();

  /// Writes the trace of moves as Chrome trace-event JSON (open in Perfetto or chrome://tracing).
  void write_trace(std::ostream& out) const;
  /// Number of trace events recorded and dropped past the capacity.
  [[nodiscard]] std::size_t trace_size() const;
  [[nodiscard]] std::size_t trace_dropped() const;

  /// The stream on which the manager copies and allocates.
  [[nodiscard]] stream_view copy_stream() const noexcept;

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace vramkit::tier

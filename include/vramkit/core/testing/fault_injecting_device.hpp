// fault_injecting_device: a device_api_wrapper for tests that fails the n-th allocation, copy or
// event operation from now and delays chosen streams, as leveldb's fault-injection Env does.
// Everything else is forwarded to the target. Thread-safe.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>

#include "vramkit/core/device_api_wrapper.hpp"

namespace vramkit::testing {

/// The operations a fault can be armed on.
enum class fault_kind {
  allocation,  ///< allocate_device, allocate_device_async, allocate_pinned_host, allocate_managed,
               ///< create_physical
  copy,        ///< copy_async, fill_async
  event,       ///< create_event, record_event, stream_wait_event
};

/// How many operations of each kind were attempted, and how many were failed on purpose.
struct fault_counters {
  std::uint64_t allocations = 0;
  std::uint64_t copies = 0;
  std::uint64_t events = 0;
  std::uint64_t injected_failures = 0;
  bool operator==(const fault_counters&) const = default;
};

/// Example:
///   auto dev = std::make_shared<fault_injecting_device>(std::make_shared<host_sim_device>());
///   dev->fail_nth(fault_kind::allocation, 2);   // the second allocation from now throws
///   dev->delay_stream(s, std::chrono::milliseconds(5));  // work on s starts 5 ms late, each time
class fault_injecting_device final : public device_api_wrapper {
 public:
  using device_api_wrapper::device_api_wrapper;

  /// Makes the n-th operation of `kind` from now (1 = the next one) fail once: allocations throw
  /// out_of_memory, copies and events throw cuda_error; the target is not called for it. 0 disarms.
  void fail_nth(fault_kind kind, std::size_t n);
  /// Disarms every kind: no planned failure remains (delays stay).
  void disarm();
  /// Makes every copy, fill, event record and host function later submitted to `stream` wait
  /// `delay` on the stream first (the host does not wait); a zero delay removes it.
  void delay_stream(stream_view stream, std::chrono::microseconds delay);
  [[nodiscard]] fault_counters counters() const;

  void* allocate_device(std::size_t bytes) override;
  void* allocate_device_async(std::size_t bytes, stream_view stream) override;
  void* allocate_pinned_host(std::size_t bytes) override;
  void* allocate_managed(std::size_t bytes) override;
  physical_handle create_physical(std::size_t bytes) override;
  void copy_async(void* dst, const void* src, std::size_t bytes, copy_kind kind,
                  stream_view stream) override;
  void fill_async(void* dst, int byte_value, std::size_t bytes, stream_view stream) override;
  event_view create_event() override;
  void record_event(event_view event, stream_view stream) override;
  void stream_wait_event(stream_view stream, event_view event) override;
  void launch_host_func(stream_view stream, std::function<void()> fn) override;

 private:
  /// Counts one operation of `kind`; true when it is the one armed to fail.
  bool should_fail(fault_kind kind);
  void apply_delay(stream_view stream);
  void check_allocation(std::size_t bytes);

  mutable std::mutex m_;
  std::size_t countdown_[3] = {0, 0, 0};
  fault_counters counters_;
  std::map<void*, std::chrono::microseconds> delays_;
};

}  // namespace vramkit::testing

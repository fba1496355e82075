// fault_injecting_device: countdowns per operation kind and per-stream delays queued as host
// functions ahead of each operation.
#include "vramkit/core/testing/fault_injecting_device.hpp"

#include <thread>

namespace vramkit::testing {
namespace {

const char* to_string(fault_kind kind) {
  switch (kind) {
    case fault_kind::allocation:
      return "allocation";
    case fault_kind::copy:
      return "copy";
    case fault_kind::event:
      return "event";
  }
  return "operation";
}

}  // namespace

void fault_injecting_device::fail_nth(fault_kind kind, std::size_t n) {
  std::lock_guard lock(m_);
  countdown_[static_cast<int>(kind)] = n;
}

void fault_injecting_device::disarm() {
  for (auto k : {fault_kind::allocation, fault_kind::copy, fault_kind::event}) fail_nth(k, 0);
}

void fault_injecting_device::delay_stream(stream_view stream, std::chrono::microseconds delay) {
  std::lock_guard lock(m_);
  if (delay.count() <= 0) {
    delays_.erase(stream.handle);
  } else {
    delays_[stream.handle] = delay;
  }
}

fault_counters fault_injecting_device::counters() const {
  std::lock_guard lock(m_);
  return counters_;
}

bool fault_injecting_device::should_fail(fault_kind kind) {
  std::lock_guard lock(m_);
  switch (kind) {
    case fault_kind::allocation:
      ++counters_.allocations;
      break;
    case fault_kind::copy:
      ++counters_.copies;
      break;
    case fault_kind::event:
      ++counters_.events;
      break;
  }
  std::size_t& left = countdown_[static_cast<int>(kind)];
  if (left == 0 || --left != 0) return false;
  ++counters_.injected_failures;
  return true;
}

void fault_injecting_device::apply_delay(stream_view stream) {
  std::chrono::microseconds delay{0};
  {
    std::lock_guard lock(m_);
    auto it = delays_.find(stream.handle);
    if (it == delays_.end()) return;
    delay = it->second;
  }
  // The sleep runs on the stream, not the host: later work on the stream starts late.
  target().launch_host_func(stream, [delay] { std::this_thread::sleep_for(delay); });
}

void fault_injecting_device::check_allocation(std::size_t bytes) {
  if (should_fail(fault_kind::allocation)) {
    throw out_of_memory(bytes, "fault_injecting_device(" + name() + ")",
                        "injected allocation failure");
  }
}

void* fault_injecting_device::allocate_device(std::size_t bytes) {
  check_allocation(bytes);
  return target().allocate_device(bytes);
}

void* fault_injecting_device::allocate_device_async(std::size_t bytes, stream_view stream) {
  check_allocation(bytes);
  return target().allocate_device_async(bytes, stream);
}

void* fault_injecting_device::allocate_pinned_host(std::size_t bytes) {
  check_allocation(bytes);
  return target().allocate_pinned_host(bytes);
}

void* fault_injecting_device::allocate_managed(std::size_t bytes) {
  check_allocation(bytes);
  return target().allocate_managed(bytes);
}

physical_handle fault_injecting_device::create_physical(std::size_t bytes) {
  check_allocation(bytes);
  return target().create_physical(bytes);
}

void fault_injecting_device::copy_async(void* dst, const void* src, std::size_t bytes,
                                        copy_kind kind, stream_view stream) {
  if (should_fail(fault_kind::copy)) {
    throw cuda_error(1, std::string("fault_injecting_device: injected ") +
                            to_string(fault_kind::copy) + " failure");
  }
  apply_delay(stream);
  target().copy_async(dst, src, bytes, kind, stream);
}

void fault_injecting_device::fill_async(void* dst, int byte_value, std::size_t bytes,
                                        stream_view stream) {
  if (should_fail(fault_kind::copy)) {
    throw cuda_error(1, "fault_injecting_device: injected copy failure (fill)");
  }
  apply_delay(stream);
  target().fill_async(dst, byte_value, bytes, stream);
}

event_view fault_injecting_device::create_event() {
  if (should_fail(fault_kind::event)) {
    throw cuda_error(1, std::string("fault_injecting_device: injected ") +
                            to_string(fault_kind::event) + " failure (create)");
  }
  return target().create_event();
}

void fault_injecting_device::record_event(event_view event, stream_view stream) {
  if (should_fail(fault_kind::event)) {
    throw cuda_error(1, "fault_injecting_device: injected event failure (record)");
  }
  apply_delay(stream);
  target().record_event(event, stream);
}

void fault_injecting_device::stream_wait_event(stream_view stream, event_view event) {
  if (should_fail(fault_kind::event)) {
    throw cuda_error(1, "fault_injecting_device: injected event failure (wait)");
  }
  target().stream_wait_event(stream, event);
}

void fault_injecting_device::launch_host_func(stream_view stream, std::function<void()> fn) {
  apply_delay(stream);
  target().launch_host_func(stream, std::move(fn));
}

}  // namespace vramkit::testing

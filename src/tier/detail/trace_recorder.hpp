// trace_recorder: a bounded log of the moves of the tier module (copies with their device-side
// start and end, instant decisions such as evictions), written as Chrome trace-event JSON.
// Thread-safe: copies are stamped by host functions on the copy stream, decisions by callers.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <ostream>
#include <string>
#include <vector>

#include "vramkit/core/device_api.hpp"

namespace vramkit::tier::detail {

/// Nanoseconds of the steady clock.
inline std::int64_t now_ns() noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

class trace_recorder : public std::enable_shared_from_this<trace_recorder> {
 public:
  struct event {
    const char* name;  // static string
    std::uint32_t buffer;
    std::size_t bytes;
    std::int64_t begin_ns;  // relative to the recorder's origin
    std::int64_t end_ns;    // == begin_ns for instant events
    bool instant;
  };

  explicit trace_recorder(std::size_t capacity) : capacity_(capacity), origin_(now_ns()) {}

  [[nodiscard]] bool enabled() const noexcept { return capacity_ > 0; }

  /// Records a copy just enqueued on `stream` (a serial stream: the copy stream): a host function
  /// after it stamps its end; its start is the later of the enqueue time and the previous end.
  void copy_enqueued(device_api& api, stream_view stream, const char* name, std::uint32_t buffer,
                     std::size_t bytes) {
    if (!enabled()) return;
    const std::int64_t enqueued = now_ns() - origin_;
    api.launch_host_func(stream, [self = shared_from_this(), name, buffer, bytes, enqueued] {
      const std::int64_t end = now_ns() - self->origin_;
      std::lock_guard lock(self->mutex_);
      const std::int64_t begin = std::max(enqueued, self->last_copy_end_);
      self->last_copy_end_ = end;
      self->push_locked({name, buffer, bytes, begin, end, false});
    });
  }

  /// Records a decision taken now by the caller.
  void instant(const char* name, std::uint32_t buffer, std::size_t bytes) {
    if (!enabled()) return;
    const std::int64_t t = now_ns() - origin_;
    std::lock_guard lock(mutex_);
    push_locked({name, buffer, bytes, t, t, true});
  }

  [[nodiscard]] std::size_t size() const {
    std::lock_guard lock(mutex_);
    return events_.size();
  }
  [[nodiscard]] std::size_t dropped() const {
    std::lock_guard lock(mutex_);
    return dropped_;
  }

  /// {"traceEvents": [...]}: copies as complete events ("X") on a host->device and a
  /// device->host track, decisions as instant events ("i"); times in microseconds.
  void write_json(std::ostream& out) const {
    std::lock_guard lock(mutex_);
    out << "{\"displayTimeUnit\":\"ms\",\"otherData\":{\"producer\":\"vramkit tier\",\"dropped\":"
        << dropped_ << "},\"traceEvents\":[\n";
    out << R"({"name":"thread_name","ph":"M","pid":1,"tid":1,"args":{"name":"copy host->device"}},)"
        << "\n"
        << R"({"name":"thread_name","ph":"M","pid":1,"tid":2,"args":{"name":"copy device->host"}},)"
        << "\n"
        << R"({"name":"thread_name","ph":"M","pid":1,"tid":3,"args":{"name":"decisions"}})";
    for (const event& e : events_) {
      const std::string name = e.name;
      const int tid = e.instant ? 3 : (name == "copy_out" ? 2 : 1);
      out << ",\n{\"name\":\"" << name << "\",\"cat\":\"tier\",\"ph\":\"" << (e.instant ? "i" : "X")
          << "\",\"pid\":1,\"tid\":" << tid << ",\"ts\":" << static_cast<double>(e.begin_ns) / 1e3;
      if (e.instant) {
        out << ",\"s\":\"t\"";
      } else {
        out << ",\"dur\":" << static_cast<double>(e.end_ns - e.begin_ns) / 1e3;
      }
      out << ",\"args\":{\"buffer\":" << e.buffer << ",\"bytes\":" << e.bytes << "}}";
    }
    out << "\n]}\n";
  }

 private:
  void push_locked(const event& e) {
    if (events_.size() < capacity_) {
      events_.push_back(e);
    } else {
      ++dropped_;
    }
  }

  std::size_t capacity_;
  std::int64_t origin_;
  mutable std::mutex mutex_;
  std::vector<event> events_;
  std::size_t dropped_ = 0;
  std::int64_t last_copy_end_ = 0;
};

}  // namespace vramkit::tier::detail

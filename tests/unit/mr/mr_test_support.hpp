// Helpers for the mr tests: a device_api decorator that records event and wait calls, a gate
// that a stream's host function blocks on until the test opens it, and the stress tests' scale.
#pragma once

#include <condition_variable>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "vramkit/core/device_api.hpp"
#include "vramkit/core/device_api_wrapper.hpp"
#include "vramkit/core/host_sim_device.hpp"

namespace vramkit::testing {

/// How many times longer the randomized stress tests run: VRAMKIT_STRESS_SCALE (1 to 1000, default
/// 1; scripts/mr-sanitize raises it under the sanitizers).
inline int stress_scale() {
  const char* v = std::getenv("VRAMKIT_STRESS_SCALE");
  const int n = v != nullptr ? std::atoi(v) : 1;
  return n < 1 ? 1 : (n > 1000 ? 1000 : n);
}

/// Forwards everything to a host_sim_device and logs record_event and stream_wait_event.
class recording_device_api final : public device_api_wrapper {
 public:
  explicit recording_device_api(host_sim_options o = {}) : recording_device_api(make_sim(o)) {}

  struct recorded {
    enum class what { record, wait } kind;
    void* event;
    void* stream;
  };
  std::vector<recorded> log() {
    std::lock_guard lock(m_);
    return log_;
  }
  void clear_log() {
    std::lock_guard lock(m_);
    log_.clear();
  }

  std::shared_ptr<host_sim_device> sim;

  void record_event(event_view e, stream_view s) override {
    {
      std::lock_guard lock(m_);
      log_.push_back({recorded::what::record, e.handle, s.handle});
    }
    sim->record_event(e, s);
  }
  void stream_wait_event(stream_view s, event_view e) override {
    {
      std::lock_guard lock(m_);
      log_.push_back({recorded::what::wait, e.handle, s.handle});
    }
    sim->stream_wait_event(s, e);
  }

 private:
  explicit recording_device_api(std::shared_ptr<host_sim_device> s)
      : device_api_wrapper(s), sim(std::move(s)) {}
  static std::shared_ptr<host_sim_device> make_sim(const host_sim_options& o) {
    return std::make_shared<host_sim_device>(o);
  }

  std::mutex m_;
  std::vector<recorded> log_;
};

/// A gate: wait() blocks until open() (used inside a stream's host function to hold the stream).
class gate {
 public:
  void wait() {
    std::unique_lock lock(m_);
    cv_.wait(lock, [this] { return open_; });
  }
  void open() {
    {
      std::lock_guard lock(m_);
      open_ = true;
    }
    cv_.notify_all();
  }

 private:
  std::mutex m_;
  std::condition_variable cv_;
  bool open_ = false;
};

}  // namespace vramkit::testing

// Helpers for the mr tests: a device_api decorator that records event and wait calls, and a gate
// that a stream's host function blocks on until the test opens it.
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "vramkit/core/device_api.hpp"
#include "vramkit/core/host_sim_device.hpp"

namespace vramkit::testing {

/// Forwards everything to a host_sim_device and logs record_event and stream_wait_event.
class recording_device_api final : public device_api {
 public:
  explicit recording_device_api(host_sim_options o = {})
      : sim(std::make_shared<host_sim_device>(o)) {}

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

  std::string name() const override { return sim->name(); }
  int device_count() override { return sim->device_count(); }
  void set_device(int o) override { sim->set_device(o); }
  int current_device() override { return sim->current_device(); }
  device_properties properties(int o) override { return sim->properties(o); }
  device_memory_info memory_info() override { return sim->memory_info(); }
  void* allocate_device(std::size_t b) override { return sim->allocate_device(b); }
  void free_device(void* p) noexcept override { sim->free_device(p); }
  void* allocate_device_async(std::size_t b, stream_view s) override {
    return sim->allocate_device_async(b, s);
  }
  void free_device_async(void* p, stream_view s) noexcept override { sim->free_device_async(p, s); }
  void* allocate_pinned_host(std::size_t b) override { return sim->allocate_pinned_host(b); }
  void free_pinned_host(void* p) noexcept override { sim->free_pinned_host(p); }
  void* allocate_managed(std::size_t b) override { return sim->allocate_managed(b); }
  void free_managed(void* p) noexcept override { sim->free_managed(p); }
  void advise_managed(const void* p, std::size_t b, managed_advice a, memory_location w) override {
    sim->advise_managed(p, b, a, w);
  }
  void prefetch_managed(const void* p, std::size_t b, memory_location w, stream_view s) override {
    sim->prefetch_managed(p, b, w, s);
  }
  void register_host(void* p, std::size_t b) override { sim->register_host(p, b); }
  void unregister_host(void* p) noexcept override { sim->unregister_host(p); }
  void copy_async(void* d, const void* s, std::size_t b, copy_kind k, stream_view st) override {
    sim->copy_async(d, s, b, k, st);
  }
  void fill_async(void* d, int v, std::size_t b, stream_view s) override {
    sim->fill_async(d, v, b, s);
  }
  stream_view create_stream() override { return sim->create_stream(); }
  void destroy_stream(stream_view s) noexcept override { sim->destroy_stream(s); }
  void synchronize(stream_view s) override { sim->synchronize(s); }
  void synchronize_device() override { sim->synchronize_device(); }
  event_view create_event() override { return sim->create_event(); }
  void destroy_event(event_view e) noexcept override { sim->destroy_event(e); }
  void record_event(event_view e, stream_view s) override {
    {
      std::lock_guard lock(m_);
      log_.push_back({recorded::what::record, e.handle, s.handle});
    }
    sim->record_event(e, s);
  }
  bool event_done(event_view e) override { return sim->event_done(e); }
  void synchronize_event(event_view e) override { sim->synchronize_event(e); }
  void stream_wait_event(stream_view s, event_view e) override {
    {
      std::lock_guard lock(m_);
      log_.push_back({recorded::what::wait, e.handle, s.handle});
    }
    sim->stream_wait_event(s, e);
  }
  void launch_host_func(stream_view s, std::function<void()> fn) override {
    sim->launch_host_func(s, std::move(fn));
  }

 private:
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

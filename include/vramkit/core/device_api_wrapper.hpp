// device_api_wrapper: a device_api that forwards every call to a target device (leveldb's
// EnvWrapper). Derive from it and override only the calls a decorator changes (fault injection,
// call recording, latency). Thread-safe when the target is.
#pragma once

#include <memory>
#include <string>
#include <utility>

#include "vramkit/core/device_api.hpp"
#include "vramkit/core/error.hpp"

namespace vramkit {

/// Forwards each virtual of device_api to `target()` unchanged. Example:
///   class counting_device : public vramkit::device_api_wrapper {
///     using device_api_wrapper::device_api_wrapper;
///     void* allocate_device(std::size_t n) override { ++count; return target().allocate_device(n);
///     }
///   };
class device_api_wrapper : public device_api {
 public:
  /// Shares ownership of `target` (the ownership convention of device_api.hpp); throws logic_error
  /// when it is null.
  explicit device_api_wrapper(std::shared_ptr<device_api> target) : target_(std::move(target)) {
    if (!target_) throw logic_error("device_api_wrapper: target is null");
  }

  /// The device every call is forwarded to.
  [[nodiscard]] device_api& target() const noexcept { return *target_; }
  [[nodiscard]] const std::shared_ptr<device_api>& target_ptr() const noexcept { return target_; }

  [[nodiscard]] std::string name() const override { return target_->name(); }
  [[nodiscard]] int device_count() override { return target_->device_count(); }
  void set_device(int ordinal) override { target_->set_device(ordinal); }
  [[nodiscard]] int current_device() override { return target_->current_device(); }
  [[nodiscard]] device_properties properties(int ordinal) override {
    return target_->properties(ordinal);
  }
  [[nodiscard]] device_memory_info memory_info() override { return target_->memory_info(); }

  void* allocate_device(std::size_t bytes) override { return target_->allocate_device(bytes); }
  void free_device(void* ptr) noexcept override { target_->free_device(ptr); }
  void* allocate_device_async(std::size_t bytes, stream_view stream) override {
    return target_->allocate_device_async(bytes, stream);
  }
  void free_device_async(void* ptr, stream_view stream) noexcept override {
    target_->free_device_async(ptr, stream);
  }
  void* allocate_pinned_host(std::size_t bytes) override {
    return target_->allocate_pinned_host(bytes);
  }
  void free_pinned_host(void* ptr) noexcept override { target_->free_pinned_host(ptr); }
  void* allocate_managed(std::size_t bytes) override { return target_->allocate_managed(bytes); }
  void free_managed(void* ptr) noexcept override { target_->free_managed(ptr); }
  void advise_managed(const void* ptr, std::size_t bytes, managed_advice advice,
                      memory_location where) override {
    target_->advise_managed(ptr, bytes, advice, where);
  }
  void prefetch_managed(const void* ptr, std::size_t bytes, memory_location where,
                        stream_view stream) override {
    target_->prefetch_managed(ptr, bytes, where, stream);
  }
  void register_host(void* ptr, std::size_t bytes) override { target_->register_host(ptr, bytes); }
  void unregister_host(void* ptr) noexcept override { target_->unregister_host(ptr); }

  void copy_async(void* dst, const void* src, std::size_t bytes, copy_kind kind,
                  stream_view stream) override {
    target_->copy_async(dst, src, bytes, kind, stream);
  }
  void fill_async(void* dst, int byte_value, std::size_t bytes, stream_view stream) override {
    target_->fill_async(dst, byte_value, bytes, stream);
  }

  [[nodiscard]] std::size_t vmm_granularity() override { return target_->vmm_granularity(); }
  void* reserve_address_range(std::size_t bytes) override {
    return target_->reserve_address_range(bytes);
  }
  void free_address_range(void* base, std::size_t bytes) noexcept override {
    target_->free_address_range(base, bytes);
  }
  physical_handle create_physical(std::size_t bytes) override {
    return target_->create_physical(bytes);
  }
  void release_physical(physical_handle handle) noexcept override {
    target_->release_physical(handle);
  }
  void map_physical(void* addr, std::size_t bytes, physical_handle handle) override {
    target_->map_physical(addr, bytes, handle);
  }
  void set_access(void* addr, std::size_t bytes) override { target_->set_access(addr, bytes); }
  void unmap(void* addr, std::size_t bytes) override { target_->unmap(addr, bytes); }

  stream_view create_stream() override { return target_->create_stream(); }
  void destroy_stream(stream_view stream) noexcept override { target_->destroy_stream(stream); }
  void synchronize(stream_view stream) override { target_->synchronize(stream); }
  void synchronize_device() override { target_->synchronize_device(); }
  event_view create_event() override { return target_->create_event(); }
  void destroy_event(event_view event) noexcept override { target_->destroy_event(event); }
  void record_event(event_view event, stream_view stream) override {
    target_->record_event(event, stream);
  }
  [[nodiscard]] bool event_done(event_view event) override { return target_->event_done(event); }
  void synchronize_event(event_view event) override { target_->synchronize_event(event); }
  void stream_wait_event(stream_view stream, event_view event) override {
    target_->stream_wait_event(stream, event);
  }
  void launch_host_func(stream_view stream, std::function<void()> fn) override {
    target_->launch_host_func(stream, std::move(fn));
  }

 private:
  std::shared_ptr<device_api> target_;
};

}  // namespace vramkit

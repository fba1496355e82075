// Minimal memory resources over a device_api, private to the tier module: stream-ordered device
// memory and pinned host memory, used by the convenience constructors of residency_manager and
// stream_pipeline. Thread-safe as the device_api is.
#pragma once

#include <string>

#include "vramkit/core/device_api.hpp"
#include "vramkit/core/error.hpp"
#include "vramkit/mr/memory_resource.hpp"

namespace vramkit::tier::detail {

/// Device memory from the device's stream-ordered allocator (cudaMallocAsync / freeAsync).
class api_device_resource final : public mr::memory_resource {
 public:
  explicit api_device_resource(device_api& api) : api_(&api) {}
  [[nodiscard]] mr::memory_kind kind() const noexcept override { return mr::memory_kind::device; }
  [[nodiscard]] std::string name() const override { return "tier_device(" + api_->name() + ")"; }

 private:
  void* do_allocate(std::size_t bytes, std::size_t alignment, stream_view stream) override {
    if (alignment > mr::default_alignment) {
      throw logic_error("tier_device resource: alignment " + std::to_string(alignment) +
                        " above 256 is not supported");
    }
    return api_->allocate_device_async(bytes, stream);
  }
  void do_deallocate(void* ptr, std::size_t, std::size_t, stream_view stream) noexcept override {
    api_->free_device_async(ptr, stream);
  }
  device_api* api_;
};

/// Page-locked host memory (cudaMallocHost); freeing synchronizes with the device.
class api_pinned_resource final : public mr::memory_resource {
 public:
  explicit api_pinned_resource(device_api& api) : api_(&api) {}
  [[nodiscard]] mr::memory_kind kind() const noexcept override {
    return mr::memory_kind::pinned_host;
  }
  [[nodiscard]] std::string name() const override { return "tier_pinned(" + api_->name() + ")"; }

 private:
  void* do_allocate(std::size_t bytes, std::size_t alignment, stream_view) override {
    if (alignment > mr::default_alignment) {
      throw logic_error("tier_pinned resource: alignment " + std::to_string(alignment) +
                        " above 256 is not supported");
    }
    return api_->allocate_pinned_host(bytes);
  }
  void do_deallocate(void* ptr, std::size_t, std::size_t, stream_view) noexcept override {
    api_->free_pinned_host(ptr);
  }
  device_api* api_;
};

}  // namespace vramkit::tier::detail

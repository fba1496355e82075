// The upstream resources that take memory straight from a device API or the host allocator.
#include <new>

#include "vramkit/core/cuda_device_api.hpp"
#include "vramkit/core/error.hpp"
#include "vramkit/mr/cuda_device_resource.hpp"
#include "vramkit/mr/device_api_resource.hpp"
#include "vramkit/mr/host_resource.hpp"
#include "vramkit/mr/managed_resource.hpp"
#include "vramkit/mr/pinned_host_resource.hpp"

namespace vramkit::mr {
namespace {

std::shared_ptr<device_api> require_cuda(const char* who) {
  auto api = cuda_device_api();
  if (!api) throw error(std::string(who) + ": " + api.error().reason);
  return *api;
}

std::string default_name(const device_api& api, memory_kind kind, allocation_mode mode) {
  const std::string base = api.name();
  switch (kind) {
    case memory_kind::device:
      return mode == allocation_mode::stream_ordered ? base + "_async" : base;
    case memory_kind::pinned_host:
      return base + "_pinned_host";
    case memory_kind::managed:
      return base + "_managed";
    case memory_kind::host:
      break;
  }
  return base;
}

}  // namespace

device_api_resource::device_api_resource(std::shared_ptr<device_api> api, memory_kind kind,
                                         allocation_mode mode)
    : device_api_resource(api, kind, mode, api ? default_name(*api, kind, mode) : std::string{}) {}

device_api_resource::device_api_resource(std::shared_ptr<device_api> api, memory_kind kind,
                                         allocation_mode mode, std::string name)
    : api_(std::move(api)), kind_(kind), mode_(mode), name_(std::move(name)) {
  if (!api_) throw logic_error("device_api_resource: device API is null");
  if (kind_ == memory_kind::host) {
    throw logic_error("device_api_resource: pageable host memory comes from host_resource");
  }
}

std::string device_api_resource::name() const { return name_; }

void* device_api_resource::do_allocate(std::size_t bytes, std::size_t alignment,
                                       stream_view stream) {
  if (bytes == 0) return nullptr;
  if (!is_power_of_two(alignment) || alignment > default_alignment) {
    throw logic_error(name_ + ": alignment " + std::to_string(alignment) +
                      " not supported (power of two up to 256)");
  }
  try {
    switch (kind_) {
      case memory_kind::device:
        return mode_ == allocation_mode::stream_ordered ? api_->allocate_device_async(bytes, stream)
                                                        : api_->allocate_device(bytes);
      case memory_kind::pinned_host:
        return api_->allocate_pinned_host(bytes);
      case memory_kind::managed:
        return api_->allocate_managed(bytes);
      case memory_kind::host:
        break;
    }
  } catch (const out_of_memory& e) {
    throw out_of_memory(bytes, name_, e.what());
  }
  throw logic_error(name_ + ": unsupported memory kind");
}

void device_api_resource::do_deallocate(void* ptr, std::size_t, std::size_t,
                                        stream_view stream) noexcept {
  if (ptr == nullptr) return;
  switch (kind_) {
    case memory_kind::device:
      if (mode_ == allocation_mode::stream_ordered) {
        api_->free_device_async(ptr, stream);
      } else {
        api_->free_device(ptr);
      }
      return;
    case memory_kind::pinned_host:
      api_->free_pinned_host(ptr);
      return;
    case memory_kind::managed:
      api_->free_managed(ptr);
      return;
    case memory_kind::host:
      return;
  }
}

bool device_api_resource::do_is_equal(const memory_resource& other) const noexcept {
  const auto* o = dynamic_cast<const device_api_resource*>(&other);
  return o != nullptr && o->api_ == api_ && o->kind_ == kind_ && o->mode_ == mode_;
}

cuda_device_resource::cuda_device_resource()
    : device_api_resource(require_cuda("cuda_device_resource"), memory_kind::device,
                          allocation_mode::synchronous, "cuda") {}

pinned_host_resource::pinned_host_resource()
    : device_api_resource(require_cuda("pinned_host_resource"), memory_kind::pinned_host,
                          allocation_mode::synchronous, "cuda_pinned_host") {}

managed_resource::managed_resource()
    : device_api_resource(require_cuda("managed_resource"), memory_kind::managed,
                          allocation_mode::synchronous, "cuda_managed") {}

managed_resource::managed_resource(std::shared_ptr<device_api> api)
    : device_api_resource(std::move(api), memory_kind::managed) {}

void managed_resource::advise(const void* ptr, std::size_t bytes, managed_advice advice,
                              memory_location where) {
  api().advise_managed(ptr, bytes, advice, where);
}

void managed_resource::prefetch(const void* ptr, std::size_t bytes, memory_location where,
                                stream_view stream) {
  api().prefetch_managed(ptr, bytes, where, stream);
}

void* host_resource::do_allocate(std::size_t bytes, std::size_t alignment, stream_view) {
  if (bytes == 0) return nullptr;
  if (!is_power_of_two(alignment)) {
    throw logic_error("host: alignment " + std::to_string(alignment) + " is not a power of two");
  }
  void* p = ::operator new (bytes, std::align_val_t{alignment}, std::nothrow);
  if (p == nullptr) throw out_of_memory(bytes, "host", "operator new failed");
  return p;
}

void host_resource::do_deallocate(void* ptr, std::size_t, std::size_t alignment,
                                  stream_view) noexcept {
  if (ptr != nullptr) ::operator delete (ptr, std::align_val_t{alignment});
}

bool host_resource::do_is_equal(const memory_resource& other) const noexcept {
  return dynamic_cast<const host_resource*>(&other) != nullptr;
}

}  // namespace vramkit::mr

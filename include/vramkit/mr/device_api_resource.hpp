// device_api_resource: an upstream resource over a vramkit::device_api: device memory (synchronous
// or stream-ordered), pinned host memory or managed memory, each straight from the device API. Over
// host_sim_device it is the upstream of every CPU test; over cuda_device_api() it is cudaMalloc,
// cudaMallocAsync (device default pool), cudaHostAlloc or cudaMallocManaged. Thread-safe.
#pragma once

#include <memory>
#include <string>

#include "vramkit/core/units.hpp"
#include "vramkit/mr/memory_resource.hpp"

namespace vramkit::mr {

/// How device memory is taken from the device API.
enum class allocation_mode {
  synchronous,     ///< allocate_device / free_device (cudaMalloc / cudaFree)
  stream_ordered,  ///< allocate_device_async / free_device_async (cudaMallocAsync / cudaFreeAsync)
};

/// Memory straight from a device API; no caching. Alignment up to 256 bytes is honoured (the
/// device API's guarantee); a larger alignment throws vramkit::logic_error. Example:
///   auto dev = std::make_shared<vramkit::host_sim_device>();
///   vramkit::mr::device_api_resource upstream(dev);   // simulated device memory
class device_api_resource : public memory_resource {
 public:
  /// `kind` must be device, pinned_host or managed (logic_error otherwise); `mode` only matters
  /// for device memory.
  explicit device_api_resource(std::shared_ptr<device_api> api,
                               memory_kind kind = memory_kind::device,
                               allocation_mode mode = allocation_mode::synchronous);

  [[nodiscard]] memory_kind kind() const noexcept override { return kind_; }
  [[nodiscard]] std::string name() const override;
  [[nodiscard]] device_api& api() const noexcept { return *api_; }
  [[nodiscard]] const std::shared_ptr<device_api>& api_ptr() const noexcept { return api_; }
  [[nodiscard]] allocation_mode mode() const noexcept { return mode_; }

 protected:
  /// For derived resources that name themselves ("cuda", "cuda_pinned_host", ...).
  device_api_resource(std::shared_ptr<device_api> api, memory_kind kind, allocation_mode mode,
                      std::string name);

 private:
  void* do_allocate(std::size_t bytes, std::size_t alignment, stream_view stream) override;
  void do_deallocate(void* ptr, std::size_t bytes, std::size_t alignment,
                     stream_view stream) noexcept override;
  [[nodiscard]] bool do_is_equal(const memory_resource& other) const noexcept override;

  std::shared_ptr<device_api> api_;
  memory_kind kind_;
  allocation_mode mode_;
  std::string name_;
};

}  // namespace vramkit::mr

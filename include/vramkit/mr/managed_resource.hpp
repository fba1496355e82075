// managed_resource: unified (managed) memory from cudaMallocManaged through cuda_device_api(),
// with advise and prefetch helpers. Never allocate more managed memory than the device has free if
// oversubscription is not intended. In a build without CUDA or without a GPU the constructor throws
// vramkit::error. Thread-safe.
#pragma once

#include <memory>

#include "vramkit/mr/device_api_resource.hpp"

namespace vramkit::mr {

/// cudaMallocManaged(cudaMemAttachGlobal) / cudaFree.
class managed_resource final : public device_api_resource {
 public:
  /// Over the CUDA runtime; throws vramkit::error naming the reason when there is no usable GPU.
  managed_resource();
  /// Over any device API (the simulated device treats advice and prefetch as no-ops).
  explicit managed_resource(std::shared_ptr<device_api> api);

  /// cudaMemAdvise on [ptr, ptr + bytes).
  void advise(const void* ptr, std::size_t bytes, managed_advice advice, memory_location where);
  /// cudaMemPrefetchAsync of [ptr, ptr + bytes) to `where`, ordered on `stream`.
  void prefetch(const void* ptr, std::size_t bytes, memory_location where, stream_view stream);
};

}  // namespace vramkit::mr

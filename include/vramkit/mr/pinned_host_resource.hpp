// pinned_host_resource: page-locked host memory from cudaHostAlloc (portable, mapped) through
// cuda_device_api(). Each call pins fresh pages (milliseconds per MiB): put a pinned_host_pool in
// front of it. In a build without CUDA or without a GPU the constructor throws vramkit::error.
// Thread-safe.
#pragma once

#include "vramkit/mr/device_api_resource.hpp"

namespace vramkit::mr {

/// cudaHostAlloc / cudaFreeHost; streams are ignored (the memory is not stream ordered).
class pinned_host_resource final : public device_api_resource {
 public:
  /// Throws vramkit::error naming the reason when there is no usable GPU.
  pinned_host_resource();
};

}  // namespace vramkit::mr

// cuda_device_resource: device memory from cudaMalloc / cudaFree through cuda_device_api().
// Always declared; in a build without CUDA, or on a machine without a usable GPU, the constructor
// throws vramkit::error with the reason. Thread-safe.
#pragma once

#include "vramkit/mr/device_api_resource.hpp"

namespace vramkit::mr {

/// cudaMalloc / cudaFree on the current device. cudaFree synchronizes the device, so this is a
/// baseline and an upstream of last resort, not something to call per tensor.
class cuda_device_resource final : public device_api_resource {
 public:
  /// Throws vramkit::error ("cuda_device_resource: no CUDA device found", ...) without a GPU.
  cuda_device_resource();
};

}  // namespace vramkit::mr

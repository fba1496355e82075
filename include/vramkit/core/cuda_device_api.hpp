// Access to the CUDA runtime through the device_api seam, and the question "is there a GPU here?".
// A build without CUDA, a machine without a driver, and a machine without a device are expected
// outcomes reported as values, never thrown. Thread-safe.
#pragma once

#include <memory>
#include <string>

#include "vramkit/core/device_api.hpp"
#include "vramkit/core/result.hpp"

namespace vramkit {

/// What the CUDA runtime says about this machine.
struct cuda_runtime_info {
  int device_count = 0;
  int driver_version = 0;   ///< e.g. 13000 for CUDA 13.0, as cudaDriverGetVersion reports
  int runtime_version = 0;  ///< the version of the runtime vramkit was linked with
};

/// True when this build of vramkit contains CUDA code.
bool built_with_cuda() noexcept;

/// Devices, driver and runtime; unavailable (not_built, no_driver, no_device) when there is no
/// usable GPU. Never throws.
result<cuda_runtime_info> cuda_runtime_status();

/// The process-wide CUDA device API, or unavailable when there is no usable GPU.
result<std::shared_ptr<device_api>> cuda_device_api();

/// "13.0" from 13000.
std::string format_cuda_version(int version);

}  // namespace vramkit

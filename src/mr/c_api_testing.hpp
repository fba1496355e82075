// Internal: lets CPU tests run the C API over another device API (the simulated device).
#pragma once

#include <memory>

#include "vramkit/core/device_api.hpp"

namespace vramkit::mr::detail {

/// Drops every per-device pool (their memory must be freed already) and makes later pools use
/// `api` with synchronous device allocation; null restores the CUDA runtime. Not thread-safe
/// against concurrent C API calls.
void set_c_api_device_api(std::shared_ptr<device_api> api);

}  // namespace vramkit::mr::detail

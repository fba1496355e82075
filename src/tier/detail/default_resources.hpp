// The memory resources the tier module uses when the caller passes none: stream-ordered device
// memory and pinned host memory straight from the device API (mr::device_api_resource).
#pragma once

#include <memory>

#include "vramkit/core/device_api.hpp"
#include "vramkit/mr/device_api_resource.hpp"

namespace vramkit::tier::detail {

// The resources keep a non-owning pointer to `api`: the manager or pipeline that owns them never
// outlives the device API it was given.
inline std::shared_ptr<device_api> non_owning(device_api& api) {
  return std::shared_ptr<device_api>(std::shared_ptr<device_api>{}, &api);
}

/// Device memory from the device's stream-ordered allocator (cudaMallocAsync / cudaFreeAsync).
inline std::unique_ptr<mr::memory_resource> make_device_resource(device_api& api) {
  return std::make_unique<mr::device_api_resource>(non_owning(api), mr::memory_kind::device,
                                                   mr::allocation_mode::stream_ordered);
}

/// Page-locked host memory (cudaHostAlloc).
inline std::unique_ptr<mr::memory_resource> make_pinned_resource(device_api& api) {
  return std::make_unique<mr::device_api_resource>(non_owning(api), mr::memory_kind::pinned_host);
}

}  // namespace vramkit::tier::detail

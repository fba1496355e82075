// The CUDA entry points of a build without CUDA: every query says "not built".
#include "vramkit/core/cuda_device_api.hpp"

namespace vramkit {

bool built_with_cuda() noexcept { return false; }

result<cuda_runtime_info> cuda_runtime_status() {
  return unavailable{unavailable_kind::not_built, "this vramkit was built without CUDA"};
}

result<std::shared_ptr<device_api>> cuda_device_api() {
  return unavailable{unavailable_kind::not_built, "this vramkit was built without CUDA"};
}

}  // namespace vramkit

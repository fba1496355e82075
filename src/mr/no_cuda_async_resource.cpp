// cuda_async_resource in a build without CUDA: the constructor says so.
#include "vramkit/core/error.hpp"
#include "vramkit/mr/cuda_async_resource.hpp"

namespace vramkit::mr {

struct pimpl::cuda_async_state {};

cuda_async_resource::cuda_async_resource(cuda_async_options) {
  throw error("cuda_async_resource: this vramkit was built without CUDA");
}
cuda_async_resource::~cuda_async_resource() = default;
void* cuda_async_resource::pool_handle() const noexcept { return nullptr; }
void cuda_async_resource::trim_to(std::size_t) {}
std::size_t cuda_async_resource::reserved_bytes() const { return 0; }
void* cuda_async_resource::do_allocate(std::size_t, std::size_t, stream_view) { return nullptr; }
void cuda_async_resource::do_deallocate(void*, std::size_t, std::size_t, stream_view) noexcept {}
void cuda_async_resource::describe(summary_builder&) const {}
void cuda_async_resource::reset_peak() const noexcept {}

}  // namespace vramkit::mr

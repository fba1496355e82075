// memory_resource: the one interface every vramkit allocator implements (after RMM's). The size
// (and alignment) come back on free, so a resource keeps no per-pointer map unless it wants one.
// Thread-safety is per resource and stated in each resource's header.
#pragma once

#include <cstddef>
#include <string>

#include "vramkit/core/device_api.hpp"

namespace vramkit::mr {

/// Which memory a resource serves.
enum class memory_kind { device, pinned_host, managed, host };

/// "device", "pinned_host", "managed", "host".
const char* to_string(memory_kind kind) noexcept;

/// Default alignment of device allocations, as cudaMalloc guarantees.
inline constexpr std::size_t default_alignment = 256;

/// Stream contract (as RMM's): `allocate(bytes, alignment, s)` returns memory valid for work
/// ordered on stream `s`; using it on another stream needs an event or a synchronize first.
/// `deallocate(p, bytes, alignment, s)` names the stream on which the memory may be reused at
/// once (normally the last stream that used it). A zero-byte request returns nullptr and freeing
/// nullptr is a no-op. Failure to allocate throws vramkit::out_of_memory.
class memory_resource {
 public:
  virtual ~memory_resource() = default;

  void* allocate(std::size_t bytes, std::size_t alignment = default_alignment,
                 stream_view stream = {}) {
    return do_allocate(bytes, alignment, stream);
  }
  void deallocate(void* ptr, std::size_t bytes, std::size_t alignment = default_alignment,
                  stream_view stream = {}) noexcept {
    do_deallocate(ptr, bytes, alignment, stream);
  }

  /// The memory this resource hands out.
  [[nodiscard]] virtual memory_kind kind() const noexcept = 0;
  /// A short name for summaries and errors, e.g. "pool(cuda_async)".
  [[nodiscard]] virtual std::string name() const = 0;

 private:
  virtual void* do_allocate(std::size_t bytes, std::size_t alignment, stream_view stream) = 0;
  virtual void do_deallocate(void* ptr, std::size_t bytes, std::size_t alignment,
                             stream_view stream) noexcept = 0;
};

}  // namespace vramkit::mr

// memory_resource: the one interface every vramkit allocator implements (after RMM's). The size
// (and alignment) come back on free, so a resource keeps no per-pointer map unless it wants one.
// Resources compose: a pool or an adaptor wraps an upstream, and memory_summary() walks the chain
// through upstream() and describe(). Thread-safety is per resource and stated in its header.
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

class summary_builder;  // memory_summary.hpp

/// Stream contract (as RMM's): `allocate(bytes, alignment, s)` returns memory valid for work
/// ordered on stream `s`; using it on another stream needs an event or a synchronize first.
/// `deallocate(p, bytes, alignment, s)` names the stream on which the memory may be reused at
/// once (normally the last stream that used it); a stream passed to deallocate must outlive the
/// resource or be synchronized before it is destroyed. A zero-byte request returns nullptr and
/// freeing nullptr is a no-op. Failure to allocate throws vramkit::out_of_memory.
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

  /// True when memory from `other` may be freed through this resource (identity by default).
  [[nodiscard]] bool is_equal(const memory_resource& other) const noexcept {
    return do_is_equal(other);
  }

  /// The memory this resource hands out.
  [[nodiscard]] virtual memory_kind kind() const noexcept = 0;
  /// A short name for summaries and errors, e.g. "pool(cuda_async)".
  [[nodiscard]] virtual std::string name() const = 0;

  /// The resource this one takes its memory from, or nullptr for an upstream of last resort.
  [[nodiscard]] virtual const memory_resource* upstream() const noexcept { return nullptr; }
  /// Adds this resource's own figures (not its upstream's) to a summary; thread-safe.
  virtual void describe(summary_builder& builder) const {}
  /// Sets this resource's own peak figures to their current values (statistics are observability
  /// state, hence const); thread-safe.
  virtual void reset_peak() const noexcept {}

 private:
  virtual void* do_allocate(std::size_t bytes, std::size_t alignment, stream_view stream) = 0;
  virtual void do_deallocate(void* ptr, std::size_t bytes, std::size_t alignment,
                             stream_view stream) noexcept = 0;
  [[nodiscard]] virtual bool do_is_equal(const memory_resource& other) const noexcept {
    return this == &other;
  }
};

}  // namespace vramkit::mr

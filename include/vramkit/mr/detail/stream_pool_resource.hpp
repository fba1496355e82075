// stream_pool_resource: what the two stream-ordered caching pools (pool_resource over chunks of
// an upstream, vmm_pool_resource over virtual address ranges) implement alike on the core their
// states share (src/mr/stream_pool.hpp): the name, the figures and their peaks, and deallocate
// with its misuse reports. The members are defined beside that core and instantiated in each
// pool's source file.
#pragma once

#include <cstddef>
#include <string>

#include "vramkit/mr/caching_pool.hpp"
#include "vramkit/mr/detail/pimpl_resource.hpp"
#include "vramkit/mr/memory_summary.hpp"

namespace vramkit::mr::detail {

/// A caching pool whose `State` derives from the shared stream-pool core.
template <class State>
class stream_pool_resource : public pimpl_resource<caching_pool, State> {
 public:
  [[nodiscard]] std::string name() const override;
  /// The figures (a consistent snapshot, taken under the pool's lock).
  [[nodiscard]] pool_report report() const override;
  void reset_peak() const noexcept override;

 private:
  /// Back on `stream`'s free list; a pointer the pool did not hand out, or a size that does not
  /// round to the block's, goes to the misuse handler (stderr when none) and changes nothing.
  void do_deallocate(void* ptr, std::size_t bytes, std::size_t alignment,
                     stream_view stream) noexcept override;
};

}  // namespace vramkit::mr::detail

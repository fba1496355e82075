// caching_pool: what vramkit's two device pools (pool_resource, vmm_pool_resource) offer beside
// allocate and deallocate, so that a caller (the C API, `vramkit replay`) drives either through
// one pointer: trim, the figures, the segments, and from the figures describe, reserved_bytes and
// allocated_bytes.
#pragma once

#include <cstddef>
#include <vector>

#include "vramkit/mr/memory_resource.hpp"
#include "vramkit/mr/memory_summary.hpp"
#include "vramkit/mr/pool_layout.hpp"

namespace vramkit::mr {

class caching_pool : public memory_resource {
 public:
  /// Synchronizes the device and gives back the memory that holds no allocated block (what each
  /// pool gives back, and to what, is its own). Returns the bytes released.
  virtual std::size_t trim() = 0;
  /// The pool's figures (a consistent snapshot).
  [[nodiscard]] virtual pool_report report() const = 0;
  /// The segments and their blocks now.
  [[nodiscard]] virtual std::vector<pool_segment_info> layout() const = 0;

  /// The pool's layer name and its figures.
  void describe(summary_builder& builder) const override {
    builder.add_layer(name());
    builder.add(report());
  }
  /// Bytes held (for the vmm pool: physical memory, mapped or cached).
  [[nodiscard]] std::size_t reserved_bytes() const {
    return static_cast<std::size_t>(report().reserved_bytes.all.current);
  }
  /// Bytes of blocks handed out (after rounding).
  [[nodiscard]] std::size_t allocated_bytes() const {
    return static_cast<std::size_t>(report().allocated_bytes.all.current);
  }
};

}  // namespace vramkit::mr

// host_resource: pageable host memory from aligned operator new. Streams are ignored. Thread-safe.
#pragma once

#include "vramkit/mr/memory_resource.hpp"

namespace vramkit::mr {

/// Plain host memory; any power-of-two alignment (logic_error otherwise). Example:
///   vramkit::mr::host_resource host;  void* p = host.allocate(4096, 64);
class host_resource final : public memory_resource {
 public:
  [[nodiscard]] memory_kind kind() const noexcept override { return memory_kind::host; }
  [[nodiscard]] std::string name() const override { return "host"; }

 private:
  void* do_allocate(std::size_t bytes, std::size_t alignment, stream_view stream) override;
  void do_deallocate(void* ptr, std::size_t bytes, std::size_t alignment,
                     stream_view stream) noexcept override;
  [[nodiscard]] bool do_is_equal(const memory_resource& other) const noexcept override;
};

}  // namespace vramkit::mr

// adaptor_resource: the base of a resource layered over another (the statistics, limit and
// tracing adaptors): it holds the upstream, which must not be null, reports the upstream's memory
// kind and names it as its upstream.
#pragma once

#include <memory>
#include <string>

#include "vramkit/core/error.hpp"
#include "vramkit/mr/memory_resource.hpp"

namespace vramkit::mr {

class adaptor_resource : public memory_resource {
 public:
  [[nodiscard]] memory_kind kind() const noexcept override { return upstream_->kind(); }
  [[nodiscard]] const memory_resource* upstream() const noexcept override {
    return upstream_.get();
  }

 protected:
  /// Throws vramkit::logic_error "<who>: upstream is null" when upstream is null.
  adaptor_resource(std::shared_ptr<memory_resource> upstream, const std::string& who)
      : upstream_(std::move(upstream)) {
    if (!upstream_) throw logic_error(who + ": upstream is null");
  }

  std::shared_ptr<memory_resource> upstream_;
};

}  // namespace vramkit::mr

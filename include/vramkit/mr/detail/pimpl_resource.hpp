// pimpl_resource: the base of a resource whose state is a type defined in the resource's source
// file (the pimpl idiom, as in leveldb's DBImpl): it creates and owns that state and makes the
// resource non-copyable, so each resource's header declares only what it offers. Its members are
// instantiated in the resource's source file, where the state is complete.
#pragma once

#include <memory>

namespace vramkit::mr::detail {

/// `Base` (memory_resource or caching_pool) with a `State` made at construction and destroyed
/// with the resource. Derived members name the state `impl` and reach it through `impl_`.
template <class Base, class State>
class pimpl_resource : public Base {
 public:
  pimpl_resource(const pimpl_resource&) = delete;
  pimpl_resource& operator=(const pimpl_resource&) = delete;

 protected:
  using impl = State;

  pimpl_resource() : impl_(std::make_unique<State>()) {}
  ~pimpl_resource() override = default;

  std::unique_ptr<State> impl_;  // never null
};

}  // namespace vramkit::mr::detail

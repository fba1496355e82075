// result<T>: a value or the reason it is missing, for platform queries where "no driver", "not
// supported" or "no permission" are expected outcomes rather than errors. Not thread-safe to
// mutate.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace vramkit {

/// Why a platform query gave no value.
enum class unavailable_kind {
  no_driver,
  no_device,
  not_supported,
  no_permission,
  not_built,
  failed
};

struct unavailable {
  unavailable_kind kind = unavailable_kind::failed;
  std::string reason;  ///< one line, for people
};

/// Holds either a T or an `unavailable`. Example:
///   result<int> r = query();  if (!r) std::puts(r.error().reason.c_str()); else use(*r);
template <typename T>
class result {
 public:
  result(T value) : v_(std::move(value)) {}    // NOLINT(google-explicit-constructor)
  result(unavailable u) : v_(std::move(u)) {}  // NOLINT(google-explicit-constructor)

  [[nodiscard]] bool has_value() const noexcept { return v_.index() == 0; }
  explicit operator bool() const noexcept { return has_value(); }
  T& operator*() & { return std::get<0>(v_); }
  const T& operator*() const& { return std::get<0>(v_); }
  T* operator->() { return &std::get<0>(v_); }
  const T* operator->() const { return &std::get<0>(v_); }
  [[nodiscard]] const unavailable& error() const { return std::get<1>(v_); }
  [[nodiscard]] T value_or(T fallback) const { return has_value() ? std::get<0>(v_) : fallback; }

 private:
  std::variant<T, unavailable> v_;
};

}  // namespace vramkit

// tiered_buffer: the handle of a buffer managed by a residency_manager, its flags and the access
// modes of acquire. A handle is a value (index + generation): copying it is free, and a handle of
// a destroyed buffer is detected, never dereferenced. All types are plain values, thread-safe.
#pragma once

#include <cstdint>

namespace vramkit::tier {

/// How the caller uses a buffer between acquire and release.
/// `read`: contents copied in, never marked dirty. `write`: the caller overwrites the whole buffer,
/// so nothing is copied in and the device copy becomes the only valid one. `read_write`: copied in
/// and marked dirty.
enum class access_mode { read, write, read_write };

/// "read", "write", "read_write".
const char* to_string(access_mode mode) noexcept;

/// Properties fixed at creation. Combine with `|`.
enum class buffer_flags : std::uint32_t {
  none = 0,
  pinned_in_place = 1u << 0,  ///< once resident on the device, never evicted (still counts)
  read_only = 1u << 1,        ///< the device never writes it: never copied back on eviction
};

constexpr buffer_flags operator|(buffer_flags a, buffer_flags b) noexcept {
  return static_cast<buffer_flags>(static_cast<std::uint32_t>(a) | static_cast<std::uint32_t>(b));
}

/// True when `set` contains `flag`.
constexpr bool has_flag(buffer_flags set, buffer_flags flag) noexcept {
  return (static_cast<std::uint32_t>(set) & static_cast<std::uint32_t>(flag)) != 0;
}

/// A handle to a buffer of a residency_manager: an index and a generation that the manager checks
/// on every call, so a handle that outlived its buffer gives a logic_error instead of a stale
/// pointer. A default-constructed handle refers to no buffer.
class tiered_buffer {
 public:
  constexpr tiered_buffer() = default;
  constexpr tiered_buffer(std::uint32_t index, std::uint32_t generation)
      : index_(index), generation_(generation) {}

  [[nodiscard]] constexpr std::uint32_t index() const noexcept { return index_; }
  [[nodiscard]] constexpr std::uint32_t generation() const noexcept { return generation_; }
  [[nodiscard]] constexpr bool valid() const noexcept { return index_ != invalid_index; }
  friend constexpr bool operator==(tiered_buffer, tiered_buffer) = default;

 private:
  static constexpr std::uint32_t invalid_index = 0xffffffffu;
  std::uint32_t index_ = invalid_index;
  std::uint32_t generation_ = 0;
};

}  // namespace vramkit::tier

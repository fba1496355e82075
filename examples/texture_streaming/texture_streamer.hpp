// texture_streamer: texture streaming on the residency manager. Each item has a mip chain (level
// 0 finest, each level a quarter of the one before) stored as read-only tiered buffers; every frame
// the items' priorities (distance to the camera) decide which levels should be resident within a
// device budget, those are prefetched and then used ("rendered"), and the manager's LRU evicts the
// rest. Not thread-safe: one thread drives the frames.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "vramkit/core/device_api.hpp"
#include "vramkit/tier/residency_manager.hpp"

namespace vramkit::examples {

/// A 2-D position in the scene.
struct point {
  double x = 0;
  double y = 0;
};

/// Checks a level's device copy while it is acquired: enqueue on `stream` whatever compares the
/// `bytes` at `device_data` with `expected_checksum` (a kernel, or a host function on the
/// simulated device). Optional.
using level_verifier = std::function<void(const void* device_data, std::size_t bytes,
                                          std::uint64_t expected_checksum, stream_view stream)>;

/// The FNV-1a checksum the streamer records for each level.
std::uint64_t checksum(const void* data, std::size_t bytes) noexcept;

/// What one frame decided and did.
struct frame_report {
  std::vector<int> finest_level;   ///< per item: the finest level resident for this frame
  std::vector<int> wanted_level;   ///< per item: the level its distance asked for
  std::vector<double> priority;    ///< per item: 1 / (1 + distance)
  std::size_t planned_bytes = 0;   ///< bytes of every level chosen for the frame
  std::size_t resident_bytes = 0;  ///< the manager's residency after the frame
};

class texture_streamer {
 public:
  /// Items' levels live in `manager` (which sets the device budget). `near_distance` is the
  /// distance up to which an item wants level 0; each doubling of it asks for one level coarser.
  texture_streamer(device_api& api, tier::residency_manager& manager, double near_distance);
  ~texture_streamer();
  texture_streamer(const texture_streamer&) = delete;
  texture_streamer& operator=(const texture_streamer&) = delete;

  /// Adds an item at `where` with `levels` mip levels, level 0 of `finest_bytes` (a multiple of
  /// 4^(levels-1)); its contents are derived from `seed`. Returns its index.
  std::size_t add_item(point where, std::size_t finest_bytes, int levels, std::uint32_t seed);

  /// One frame seen from `camera`: choose levels by priority within the budget, prefetch them,
  /// then acquire, verify (if `verify`) and release each on `stream`.
  frame_report frame(point camera, stream_view stream, const level_verifier& verify = {});

  /// Bytes of level `level` of item `item`, and the checksum recorded when it was created.
  [[nodiscard]] std::size_t level_bytes(std::size_t item, int level) const;
  [[nodiscard]] std::uint64_t level_checksum(std::size_t item, int level) const;
  /// Recomputes every level's checksum from its up-to-date host copy; returns the mismatches.
  [[nodiscard]] std::size_t verify_host_copies();
  [[nodiscard]] std::size_t item_count() const noexcept { return items_.size(); }

 private:
  struct item {
    point where;
    std::vector<tier::tiered_buffer> levels;
    std::vector<std::uint64_t> checksums;
  };
  device_api& api_;
  tier::residency_manager& manager_;
  double near_distance_;
  std::vector<item> items_;
};

}  // namespace vramkit::examples

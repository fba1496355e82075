// mip_streamer: the texture residency manager. Textures come from DDS files; their mip tails are
// resident from add_texture on; each frame's requests (LOD, screen coverage) go to a
// mip_residency_policy, and its actions run asynchronously: a reader thread reads a level from the
// file into pinned staging (vramkit::mr::pinned_host_pool), then the copy stream builds the new
// chain (shared levels device-to-device on one stream, the new level from staging on one of the
// upload streams, in turn) and an event marks it done. Texture arrays and cube maps stream whole
// levels: every layer (face) of the level at once. update() never blocks on a copy or a read: a
// frame samples the chain that is resident (its first level is the min-LOD clamp) and a finer one
// appears in a later frame. Old chains are freed once the render work submitted before the swap has
// completed. Not thread-safe: one thread calls it.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <vector>

#include "vramkit/core/device_api.hpp"
#include "vramkit/texture/mip_residency_policy.hpp"
#include "vramkit/texture/mip_storage.hpp"
#include "vramkit/texture/texture_file.hpp"

namespace vramkit::texture {

struct mip_streamer_options {
  residency_policy_options policy;
  std::uint64_t staging_cap_bytes = 256ull << 20;  ///< pinned staging held at most
  /// Streams that loads' uploads take in turn (1 to 4): with two, one upload's start-up overlaps
  /// the previous one's transfer on a second copy engine.
  int upload_streams = 2;
};

/// Resident bytes of one texture, per level (0 for levels not resident).
struct texture_residency {
  int first_level = 0;
  int wanted_level = 0;
  std::vector<std::uint64_t> level_bytes;
};

struct mip_streamer_stats {
  residency_policy_stats policy;
  std::uint64_t bytes_streamed = 0;          ///< bytes copied host-to-device (tails included)
  std::uint64_t bytes_copied_on_device = 0;  ///< shared levels moved between chains
  std::uint64_t reads_pending = 0;
  std::uint64_t copies_pending = 0;
};

class mip_streamer {
 public:
  /// `storage` holds the chains on `api`'s device; `api` gives the copy stream, events and (through
  /// a pinned_host_pool) staging. Both must outlive the streamer. Throws invalid_input for
  /// upload_streams outside 1 to 4.
  mip_streamer(std::shared_ptr<device_api> api, mip_storage& storage, mip_streamer_options options);
  ~mip_streamer();
  mip_streamer(const mip_streamer&) = delete;
  mip_streamer& operator=(const mip_streamer&) = delete;

  /// Adds the DDS texture (2-D, array or cube map) in `file` and uploads its mip tail (waits for
  /// that copy). Throws texture_file_error for a bad file or one that holds no mip chain to stream
  /// (PNG, ASTC), invalid_input when the tails exceed the budget.
  int add_texture(const std::filesystem::path& file);

  /// Fills the staging pool with blocks of the level sizes loads will need (pinning is slow); call
  /// after adding the textures, before the first frame.
  void prepare_staging();
  /// Starts a frame (requests follow).
  void begin_frame();
  void request(int texture, float lod, double coverage_pixels);
  /// Finishes completed work, starts this frame's actions; returns without waiting. Render work
  /// for this frame goes on `render_stream` after update(); chains replaced by this call are freed
  /// only once that work has completed.
  void update(stream_view render_stream);
  /// Waits until nothing is in flight (for tests and the end of a run; never inside a frame).
  void drain(stream_view render_stream);

  /// The chain to sample this frame and its first level (the min-LOD clamp).
  [[nodiscard]] const mip_chain* chain(int texture) const;
  [[nodiscard]] int first_level(int texture) const;
  [[nodiscard]] texture_residency residency(int texture) const;
  [[nodiscard]] mip_streamer_stats stats() const;
  [[nodiscard]] const mip_residency_policy& policy() const;
  [[nodiscard]] int texture_count() const;

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace vramkit::texture

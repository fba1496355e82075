// mip_residency_policy: which mip levels of which textures stay in device memory under a byte
// budget, decided from what frames ask for; device-independent (no copies: it emits actions and is
// told when they complete). Each texture keeps an always-resident mip tail; a texture's resident
// chain is levels [first_level, mip_levels) and changes one level at a time (load one finer, drop
// the finest). Every byte of every chain that exists, including the new chain of an action in
// flight, is charged against the budget, so device bytes never exceed it. Not thread-safe: one
// thread drives the frames.
#pragma once

#include <cstdint>
#include <vector>

#include "vramkit/texture/cuda_allocation_model.hpp"
#include "vramkit/texture/texture_format.hpp"

namespace vramkit::texture {

struct mip_chain_desc {
  pixel_format format;
  int width = 0;
  int height = 0;
  int mip_levels = 1;
  int layers = 1;     ///< surfaces per level: array layers, 6 per cube for cube maps
  bool cube = false;  ///< the layers are cube faces (+X, -X, +Y, -Y, +Z, -Z per cube)
};

struct residency_policy_options {
  std::uint64_t budget_bytes = 0;
  /// The tail: the finest level whose chain (it and all coarser levels) fits in this many device
  /// bytes, and everything coarser, is always resident (a 64 KiB tile holds a BC mip tail).
  std::uint64_t tail_bytes = 64 * 1024;
  /// Most bytes of levels being loaded at once (staging and copy-queue depth).
  std::uint64_t max_inflight_bytes = 64ull << 20;
  /// Frames a request keeps counting after the last frame that made it (hysteresis).
  int keep_frames = 4;
  /// Added to every requested LOD (an engine's mip bias); positive = coarser.
  float lod_bias = 0.0f;
  cuda_allocation_model model;
};

enum class residency_action_kind {
  load_finer,   ///< make a chain starting one level finer: copy the resident levels, upload one
  drop_finest,  ///< make a coarser chain (one level, or straight to the wanted level when the
                ///< texture does not want its finest levels): copy the levels it keeps
};

/// A change the caller carries out asynchronously, then reports with complete().
struct residency_action {
  residency_action_kind kind = residency_action_kind::load_finer;
  int texture = 0;
  int new_first_level = 0;  ///< the first level of the chain that replaces the resident one
};

struct residency_policy_stats {
  std::uint64_t committed_bytes = 0;  ///< resident chains plus chains being built
  std::uint64_t resident_bytes = 0;   ///< resident chains
  std::uint64_t pending_actions = 0;
  std::uint64_t loads_started = 0;
  std::uint64_t drops_started = 0;
  std::uint64_t bytes_loaded = 0;      ///< level bytes uploaded by completed loads
  std::uint64_t starved_requests = 0;  ///< loads wanted but deferred for budget or in-flight room
  std::uint64_t frames = 0;
  std::uint64_t frames_with_deficit =
      0;  ///< frames where some texture showed a coarser level than wanted
};

class mip_residency_policy {
 public:
  explicit mip_residency_policy(residency_policy_options options);

  /// Registers a texture; its tail is resident from the start (the caller uploads it before the
  /// first frame). Throws invalid_input when the tails alone exceed the budget.
  int add_texture(const mip_chain_desc& desc);

  /// Starts a frame: requests from now on belong to it.
  void begin_frame();
  /// The frame samples `texture` at level-of-detail `lod` (level 0 = finest; fractional allowed)
  /// over `coverage_pixels` screen pixels. Several requests per frame keep the finest LOD and
  /// add the coverage.
  void request(int texture, float lod, double coverage_pixels);
  /// Decides this frame's actions: loads in priority order ((resident - wanted) x coverage)
  /// while the budget and in-flight room allow, and drops of the least useful finest levels
  /// (not wanted first, then the lowest priority) to make room. At most one action per texture is
  /// in flight.
  std::vector<residency_action> plan_frame();
  /// An action finished: its chain replaces the resident one.
  void complete(const residency_action& action);

  /// The finest resident level of `texture`: the min-LOD clamp a frame must sample with.
  [[nodiscard]] int resident_first_level(int texture) const;
  /// The level the current frame wants for `texture` (its tail when not requested lately).
  [[nodiscard]] int wanted_level(int texture) const;
  [[nodiscard]] int tail_level(int texture) const;
  [[nodiscard]] bool has_pending(int texture) const;
  /// Device bytes of `texture`'s chain starting at `first_level`, as charged.
  [[nodiscard]] std::uint64_t chain_bytes_from(int texture, int first_level) const;
  [[nodiscard]] const mip_chain_desc& desc(int texture) const;
  [[nodiscard]] int texture_count() const noexcept { return static_cast<int>(textures_.size()); }
  [[nodiscard]] residency_policy_stats stats() const;
  [[nodiscard]] const residency_policy_options& options() const noexcept { return options_; }

 private:
  struct state {
    mip_chain_desc desc;
    int tail = 0;
    int first = 0;        // resident chain's first level
    int pending = -1;     // first level of the chain being built, or -1
    float lod = 1e9f;     // finest LOD requested in the current frame
    double coverage = 0;  // summed coverage of the current frame
    int wanted = 0;       // wanted level, refreshed by plan_frame
    double wanted_coverage = 0;
    std::uint64_t last_request_frame = 0;
    bool ever_requested = false;
  };
  void refresh_wanted();
  [[nodiscard]] double priority_if_first(const state& s, int first) const;
  void check(int texture) const;

  residency_policy_options options_;
  std::vector<state> textures_;
  std::uint64_t frame_ = 0;
  std::uint64_t inflight_bytes_ = 0;
  residency_policy_stats stats_;
};

}  // namespace vramkit::texture

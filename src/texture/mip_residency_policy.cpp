// The mip residency policy: wanted levels from requests, loads by priority, drops by uselessness.
#include "vramkit/texture/mip_residency_policy.hpp"

#include <algorithm>
#include <cmath>

#include "vramkit/core/error.hpp"
#include "vramkit/core/units.hpp"

namespace vramkit::texture {

mip_residency_policy::mip_residency_policy(residency_policy_options options) : options_(options) {}

void mip_residency_policy::check(int texture) const {
  if (texture < 0 || texture >= texture_count()) {
    throw logic_error("mip_residency_policy: no texture " + std::to_string(texture));
  }
}

std::uint64_t mip_residency_policy::chain_bytes_from(int texture, int first_level) const {
  check(texture);
  const auto& d = textures_[texture].desc;
  return options_.model.device_bytes(d.format, d.width, d.height, d.mip_levels, first_level,
                                     d.layers);
}

int mip_residency_policy::add_texture(const mip_chain_desc& desc) {
  if (desc.width < 1 || desc.height < 1 || desc.mip_levels < 1 ||
      desc.mip_levels > full_mip_levels(desc.width, desc.height) || desc.layers < 1 ||
      (desc.cube && desc.layers % 6 != 0)) {
    throw logic_error("mip_residency_policy: invalid chain description");
  }
  state s;
  s.desc = desc;
  const int id = texture_count();
  textures_.push_back(s);
  auto& t = textures_.back();
  t.tail = desc.mip_levels - 1;
  while (t.tail > 0 && chain_bytes_from(id, t.tail - 1) <= options_.tail_bytes) --t.tail;
  t.first = t.tail;
  t.wanted = t.tail;
  const std::uint64_t bytes = chain_bytes_from(id, t.tail);
  if (stats_.committed_bytes + bytes > options_.budget_bytes) {
    textures_.pop_back();
    throw invalid_input("texture budget " +
                        format_bytes(static_cast<double>(options_.budget_bytes)) +
                        " is smaller than the always-resident mip tails (" +
                        format_bytes(static_cast<double>(stats_.committed_bytes + bytes)) +
                        " with texture " + std::to_string(id) + ")");
  }
  stats_.committed_bytes += bytes;
  stats_.resident_bytes += bytes;
  return id;
}

void mip_residency_policy::begin_frame() {
  ++frame_;
  ++stats_.frames;
  for (auto& t : textures_) {
    t.lod = 1e9f;
    t.coverage = 0;
  }
}

void mip_residency_policy::request(int texture, float lod, double coverage_pixels) {
  check(texture);
  auto& t = textures_[texture];
  t.lod = std::min(t.lod, lod + options_.lod_bias);
  t.coverage += std::max(0.0, coverage_pixels);
  t.last_request_frame = frame_;
  t.ever_requested = true;
}

void mip_residency_policy::refresh_wanted() {
  for (auto& t : textures_) {
    const bool current = t.ever_requested && t.last_request_frame == frame_;
    if (current) {
      // Trilinear filtering reads floor(lod) and the next level: floor(lod) must be resident.
      const int level = static_cast<int>(std::floor(std::max(0.0f, t.lod)));
      t.wanted = std::clamp(level, 0, t.tail);
      t.wanted_coverage = t.coverage;
    } else if (!t.ever_requested ||
               frame_ - t.last_request_frame >= static_cast<std::uint64_t>(options_.keep_frames)) {
      t.wanted = t.tail;
      t.wanted_coverage = 0;
    }
    // Otherwise keep the last frame's wish for a few frames (hysteresis).
  }
}

double mip_residency_policy::priority_if_first(const state& s, int first) const {
  // Levels still missing, weighted by the pixels that would show them; + a little so that a
  // visible texture with a tiny coverage still outranks an invisible one.
  if (first <= s.wanted) return 0.0;
  return (first - s.wanted) * (s.wanted_coverage + 1e-6);
}

std::vector<residency_action> mip_residency_policy::plan_frame() {
  refresh_wanted();
  std::vector<residency_action> actions;
  bool deficit = false;
  std::vector<int> candidates;
  for (int i = 0; i < texture_count(); ++i) {
    const auto& t = textures_[i];
    if (t.first > t.wanted) {
      deficit = true;
      if (t.pending < 0) candidates.push_back(i);
    }
  }
  if (deficit) ++stats_.frames_with_deficit;
  std::stable_sort(candidates.begin(), candidates.end(), [&](int a, int b) {
    return priority_if_first(textures_[a], textures_[a].first) >
           priority_if_first(textures_[b], textures_[b].first);
  });

  // Victims in order of uselessness: finest levels nobody wants (most excess first), then wanted
  // ones by the priority they would get back once dropped (lowest first).
  auto victim_order = [&]() {
    std::vector<int> v;
    for (int i = 0; i < texture_count(); ++i) {
      const auto& t = textures_[i];
      if (t.pending < 0 && t.first < t.tail) v.push_back(i);
    }
    std::stable_sort(v.begin(), v.end(), [&](int a, int b) {
      const auto& ta = textures_[a];
      const auto& tb = textures_[b];
      const int ea = ta.wanted - ta.first;  // > 0: finer than wanted
      const int eb = tb.wanted - tb.first;
      if ((ea > 0) != (eb > 0)) return ea > 0;
      if (ea > 0)
        return ea != eb ? ea > eb : chain_bytes_from(a, ta.first) > chain_bytes_from(b, tb.first);
      return priority_if_first(ta, ta.first + 1) < priority_if_first(tb, tb.first + 1);
    });
    return v;
  };

  // Once a load waits for room that drops are freeing, lower-priority loads do not take that room.
  bool room_reserved = false;
  for (int c : candidates) {
    auto& t = textures_[c];
    const int target = t.first - 1;
    const std::uint64_t new_chain = chain_bytes_from(c, target);
    const std::uint64_t level = level_bytes(t.desc.format, level_extent(t.desc.width, target),
                                            level_extent(t.desc.height, target)) *
                                static_cast<std::uint64_t>(t.desc.layers);
    if (inflight_bytes_ > 0 && inflight_bytes_ + level > options_.max_inflight_bytes) {
      ++stats_.starved_requests;
      continue;
    }
    if (room_reserved || stats_.committed_bytes + new_chain > options_.budget_bytes) {
      ++stats_.starved_requests;
      if (room_reserved) continue;
      const double want = priority_if_first(t, t.first);
      auto eligible = [&](const state& vt) {
        return vt.first < vt.wanted || priority_if_first(vt, vt.first + 1) < want;
      };
      // Only drop when the load can fit once the eligible victims are down to their tails (the old
      // chain stays while the new one is built): otherwise the drops would only thrash.
      std::uint64_t freeable = 0;
      for (int v = 0; v < texture_count(); ++v) {
        const auto& vt = textures_[v];
        if (v != c && vt.pending < 0 && eligible(vt))
          freeable += chain_bytes_from(v, vt.first) - chain_bytes_from(v, vt.tail);
      }
      if (stats_.committed_bytes - freeable + new_chain > options_.budget_bytes) continue;
      room_reserved = true;
      std::uint64_t freeing = 0;
      for (int v : victim_order()) {
        if (v == c) continue;
        auto& vt = textures_[v];
        if (!eligible(vt)) break;
        // A texture nobody wants that fine goes straight to its wanted level: the smallest new
        // chain, so the drop itself needs the least room. A wanted one gives up one level.
        const int to = vt.first < vt.wanted ? vt.wanted : vt.first + 1;
        const std::uint64_t smaller = chain_bytes_from(v, to);
        if (stats_.committed_bytes + smaller > options_.budget_bytes) continue;
        vt.pending = to;
        stats_.committed_bytes += smaller;
        ++stats_.drops_started;
        actions.push_back({residency_action_kind::drop_finest, v, vt.pending});
        freeing += chain_bytes_from(v, vt.first) - smaller;
        if (stats_.committed_bytes - freeing + new_chain <= options_.budget_bytes) break;
      }
      continue;
    }
    t.pending = target;
    stats_.committed_bytes += new_chain;
    inflight_bytes_ += level;
    ++stats_.loads_started;
    actions.push_back({residency_action_kind::load_finer, c, target});
  }
  stats_.pending_actions = 0;
  for (const auto& t : textures_) stats_.pending_actions += t.pending >= 0 ? 1 : 0;
  return actions;
}

void mip_residency_policy::complete(const residency_action& action) {
  check(action.texture);
  auto& t = textures_[action.texture];
  if (t.pending != action.new_first_level) {
    throw logic_error("mip_residency_policy::complete: no such action in flight for texture " +
                      std::to_string(action.texture));
  }
  const std::uint64_t old_chain = chain_bytes_from(action.texture, t.first);
  const std::uint64_t new_chain = chain_bytes_from(action.texture, t.pending);
  if (action.kind == residency_action_kind::load_finer) {
    const std::uint64_t level = level_bytes(t.desc.format, level_extent(t.desc.width, t.pending),
                                            level_extent(t.desc.height, t.pending)) *
                                static_cast<std::uint64_t>(t.desc.layers);
    inflight_bytes_ -= std::min(inflight_bytes_, level);
    stats_.bytes_loaded += level;
  }
  stats_.committed_bytes -= old_chain;
  stats_.resident_bytes = stats_.resident_bytes - old_chain + new_chain;
  t.first = t.pending;
  t.pending = -1;
  if (stats_.pending_actions > 0) --stats_.pending_actions;
}

int mip_residency_policy::resident_first_level(int texture) const {
  check(texture);
  return textures_[texture].first;
}
int mip_residency_policy::wanted_level(int texture) const {
  check(texture);
  return textures_[texture].wanted;
}
int mip_residency_policy::tail_level(int texture) const {
  check(texture);
  return textures_[texture].tail;
}
bool mip_residency_policy::has_pending(int texture) const {
  check(texture);
  return textures_[texture].pending >= 0;
}
const mip_chain_desc& mip_residency_policy::desc(int texture) const {
  check(texture);
  return textures_[texture].desc;
}
residency_policy_stats mip_residency_policy::stats() const { return stats_; }

}  // namespace vramkit::texture

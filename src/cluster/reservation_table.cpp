// Per-pod GPU memory reservations between placement and the pod's process showing in an exporter.
#include "vramkit/cluster/reservation_table.hpp"

#include <algorithm>
#include <unordered_set>

namespace vramkit::cluster {

reservation_table::reservation_table(std::chrono::milliseconds ttl, clock_function now)
    : ttl_(ttl),
      now_(now ? std::move(now) : clock_function([] { return std::chrono::steady_clock::now(); })) {
}

std::size_t reservation_table::expire_locked(std::chrono::steady_clock::time_point now) {
  std::vector<std::string> old;
  for (const auto& [key, hold] : gpus_) {
    for (const auto& [uid, r] : hold.by_pod) {
      if (!r.confirmed && now - r.made >= ttl_) old.push_back(uid);
    }
  }
  for (const std::string& uid : old) drop_locked(uid);
  // A GPU whose remaining holds are all confirmed is covered by its observed figure.
  for (auto it = gpus_.begin(); it != gpus_.end();) {
    const bool all = std::all_of(it->second.by_pod.begin(), it->second.by_pod.end(),
                                 [](const auto& e) { return e.second.confirmed; });
    if (!all) {
      ++it;
      continue;
    }
    for (const auto& [uid, r] : it->second.by_pod) pod_gpu_.erase(uid);
    it = gpus_.erase(it);
  }
  return old.size();
}

void reservation_table::drop_locked(const std::string& pod_uid) {
  auto p = pod_gpu_.find(pod_uid);
  if (p == pod_gpu_.end()) return;
  auto g = gpus_.find(p->second);
  if (g != gpus_.end()) {
    g->second.by_pod.erase(pod_uid);
    if (g->second.by_pod.empty()) gpus_.erase(g);
  }
  pod_gpu_.erase(p);
}

std::size_t reservation_table::expire() {
  std::lock_guard lock(mutex_);
  return expire_locked(now_());
}

node_state reservation_table::effective(const node_state& observed) {
  std::lock_guard lock(mutex_);
  expire_locked(now_());
  return effective_locked(observed);
}

node_state reservation_table::effective_locked(const node_state& observed) const {
  node_state out = observed;
  for (gpu_state& gpu : out.gpus) {
    auto it = gpus_.find(gpu_key{observed.name, gpu.index});
    if (it == gpus_.end()) continue;
    std::uint64_t held = it->second.baseline_used;
    for (const auto& [uid, r] : it->second.by_pod) held += r.bytes;
    if (held > gpu.used_bytes) {
      gpu.used_bytes = held;
      gpu.free_bytes = derived_free_bytes(gpu.total_bytes, held);
    }
  }
  return out;
}

node_states reservation_table::effective(const node_states& observed) {
  node_states out;
  out.reserve(observed.size());
  // One expiry pass and one lock for the whole request: a filter over 1,000 nodes with hundreds
  // of open reservations must not scan the table once per reserved node.
  std::lock_guard lock(mutex_);
  expire_locked(now_());
  std::unordered_set<std::string> held;
  for (const auto& [key, hold] : gpus_) held.insert(key.first);
  for (const auto& [name, state] : observed) {
    // Most nodes hold no reservation: their shared state passes through uncopied.
    if (state && held.count(name) != 0) {
      out.emplace(name, std::make_shared<const node_state>(effective_locked(**state)));
    } else {
      out.emplace(name, state);
    }
  }
  return out;
}

std::optional<reservation> reservation_table::find(const std::string& pod_uid) const {
  std::lock_guard lock(mutex_);
  auto p = pod_gpu_.find(pod_uid);
  if (p == pod_gpu_.end()) return std::nullopt;
  return gpus_.at(p->second).by_pod.at(pod_uid);
}

void reservation_table::add(reservation r, const node_state& observed) {
  std::lock_guard lock(mutex_);
  const auto now = now_();
  expire_locked(now);
  drop_locked(r.pod_uid);
  r.made = now;
  const gpu_key key{r.node, r.gpu_index};
  auto [it, fresh] = gpus_.try_emplace(key);
  if (fresh) {
    for (const gpu_state& g : observed.gpus) {
      if (g.index == r.gpu_index) it->second.baseline_used = g.used_bytes;
    }
  }
  pod_gpu_[r.pod_uid] = key;
  it->second.by_pod[r.pod_uid] = std::move(r);
}

bool reservation_table::release(const std::string& pod_uid) {
  std::lock_guard lock(mutex_);
  const bool had = pod_gpu_.count(pod_uid) != 0;
  drop_locked(pod_uid);
  return had;
}

void reservation_table::confirm(const std::string& node, const std::set<std::string>& pod_uids) {
  if (pod_uids.empty()) return;
  std::lock_guard lock(mutex_);
  for (auto it = gpus_.begin(); it != gpus_.end();) {
    if (it->first.first != node) {
      ++it;
      continue;
    }
    bool all = true;
    for (auto& [uid, r] : it->second.by_pod) {
      r.confirmed = r.confirmed || pod_uids.count(uid) != 0 || pod_uids.count(r.pod) != 0;
      all = all && r.confirmed;
    }
    if (!all) {
      ++it;
      continue;
    }
    // The observed figure now includes every pod that held this GPU: the hold is no longer needed.
    for (const auto& [uid, r] : it->second.by_pod) pod_gpu_.erase(uid);
    it = gpus_.erase(it);
  }
}

std::vector<reservation> reservation_table::list() const {
  std::lock_guard lock(mutex_);
  std::vector<reservation> out;
  for (const auto& [key, hold] : gpus_) {
    for (const auto& [uid, r] : hold.by_pod) out.push_back(r);
  }
  return out;
}

std::unique_lock<std::mutex> reservation_table::lock_node(const std::string& node) {
  std::mutex* m = nullptr;
  {
    std::lock_guard lock(node_locks_mutex_);
    auto& slot = node_locks_[node];
    if (!slot) slot = std::make_unique<std::mutex>();
    m = slot.get();
  }
  return std::unique_lock<std::mutex>(*m);
}

}  // namespace vramkit::cluster

// Reservations of GPU memory for pods that are placed but whose processes the node's exporter does
// not show yet: one entry per pod (UID, node, GPU, bytes). The extender counts a GPU as used =
// max(observed, observed-before-the-first-open-reservation + reserved bytes), so two pods placed
// between two scrapes cannot both be given the same free memory. Thread-safe: every member locks.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "vramkit/cluster/extender.hpp"
#include "vramkit/cluster/gpu_state.hpp"

namespace vramkit::cluster {

/// One pod's hold on one GPU.
struct reservation {
  std::string pod_uid;
  std::string pod;  ///< namespace/name, for messages
  std::string node;
  int gpu_index = -1;
  std::uint64_t bytes = 0;
  std::chrono::steady_clock::time_point made;
  bool confirmed = false;  ///< the exporter has shown a process of this pod
};

class reservation_table {
 public:
  using clock_function = std::function<std::chrono::steady_clock::time_point()>;

  /// Unconfirmed reservations expire `ttl` after they are made (a pod that never started, or that
  /// ended before its process was seen). `now` defaults to the steady clock.
  explicit reservation_table(std::chrono::milliseconds ttl = std::chrono::minutes(5),
                             clock_function now = {});

  /// Applies the open reservations to a node's observed state: each GPU's used becomes
  /// max(observed used, baseline + reserved bytes) and free total - used, where the baseline is the
  /// GPU's used bytes seen when its oldest open reservation was made. Expires old entries first.
  [[nodiscard]] node_state effective(const node_state& observed);

  /// Applies `effective` to every available state of a lookup's answer.
  [[nodiscard]] node_states effective(const node_states& observed);

  /// The reservation of `pod_uid`, if any.
  [[nodiscard]] std::optional<reservation> find(const std::string& pod_uid) const;

  /// Records `r` (replacing the pod's older one); `observed` is the node's state before it, used
  /// as the GPU's baseline when it is the GPU's first open reservation.
  void add(reservation r, const node_state& observed);

  /// Drops the pod's reservation (pod deleted, binding failed); true when there was one.
  bool release(const std::string& pod_uid);

  /// Marks the reservations of `pod_uids` (UIDs or namespace/name) on `node` confirmed; once every
  /// reservation of a GPU is confirmed the GPU's entries are dropped, as the observed figure then
  /// covers them all.
  void confirm(const std::string& node, const std::set<std::string>& pod_uids);

  /// Drops unconfirmed reservations older than the TTL; returns how many.
  std::size_t expire();

  /// All open reservations (for inspection and tests).
  [[nodiscard]] std::vector<reservation> list() const;

  /// Mutex held while a placement decision is re-checked and recorded on `node`, so that two binds
  /// to one node are decided one after the other.
  [[nodiscard]] std::unique_lock<std::mutex> lock_node(const std::string& node);

 private:
  struct gpu_hold {
    std::uint64_t baseline_used = 0;
    std::map<std::string, reservation> by_pod;
  };
  using gpu_key = std::pair<std::string, int>;

  std::size_t expire_locked(std::chrono::steady_clock::time_point now);
  [[nodiscard]] node_state effective_locked(const node_state& observed) const;
  void drop_locked(const std::string& pod_uid);

  std::chrono::milliseconds ttl_;
  clock_function now_;
  mutable std::mutex mutex_;
  std::map<gpu_key, gpu_hold> gpus_;
  std::map<std::string, gpu_key> pod_gpu_;
  std::mutex node_locks_mutex_;
  std::map<std::string, std::unique_ptr<std::mutex>> node_locks_;
};

}  // namespace vramkit::cluster

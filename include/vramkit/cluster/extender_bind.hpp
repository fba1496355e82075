// The extender's bind verb: re-checks the fit on the chosen node under that node's lock, picks the
// GPU, records a reservation, then has a binding writer create the Binding (and the pod's GPU
// annotations for the device plugin). Requests are remembered from the filter call, because
// ExtenderBindingArgs carries only the pod's name, namespace, UID and node. Thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <string_view>

#include "vramkit/cluster/extender.hpp"
#include "vramkit/cluster/reservation_table.hpp"

namespace vramkit::cluster {

/// Pod annotations the bind verb writes and the device plugin reads (as gpushare's
/// ALIYUN_COM_GPU_MEM_* and HAMi's hami.io/vgpu-devices-to-allocate).
inline constexpr std::string_view annotation_gpu_uuid = "vramkit.io/gpu-uuid";
inline constexpr std::string_view annotation_gpu_index = "vramkit.io/gpu-index";
inline constexpr std::string_view annotation_gpu_bytes = "vramkit.io/gpu-memory-bytes";
inline constexpr std::string_view annotation_assume_time = "vramkit.io/assume-time-ns";

/// What bind decided for one pod.
struct bind_decision {
  std::string pod_namespace;
  std::string pod_name;
  std::string pod_uid;
  std::string node;
  int gpu_index = -1;
  std::string gpu_uuid;
  std::uint64_t bytes = 0;
};

/// Creates the Binding of `d` through the API server (and annotates the pod); returns "" on
/// success or a one-line error. A pod already bound to d.node must count as success.
using binding_writer = std::function<std::string(const bind_decision& d)>;

class bind_service {
 public:
  /// `lookup` gives live node states (the scraper), `table` the reservations shared with filter
  /// and prioritize, `writer` the API side. Requests remembered from filter are kept for
  /// `request_ttl`.
  bind_service(node_lookup lookup, std::shared_ptr<reservation_table> table, extender_config config,
               binding_writer writer,
               std::chrono::milliseconds request_ttl = std::chrono::minutes(10));

  /// Records the per-GPU request of a pod seen by filter (the hook extender_config::on_request
  /// is set to).
  void remember(const std::string& pod_uid, std::uint64_t bytes);

  /// POST bind: ExtenderBindingArgs in, ExtenderBindingResult ({"Error": ""}) out. Fails (in
  /// Error) when the pod was not seen by filter, the node's figures are unknown, or the pod no
  /// longer fits any GPU of the node counting the reservations; a repeated bind of a pod bound to
  /// the same node succeeds without a second reservation. Malformed body -> status 400.
  [[nodiscard]] extender_response bind(std::string_view body);

  /// The lookup filter and prioritize should use: live states with the reservations applied.
  [[nodiscard]] node_lookup effective_lookup() const;

  [[nodiscard]] const std::shared_ptr<reservation_table>& table() const noexcept { return table_; }

 private:
  struct pending {
    std::uint64_t bytes = 0;
    std::chrono::steady_clock::time_point seen;
    std::string bound_node;  ///< set once a bind succeeded
  };

  node_lookup lookup_;
  std::shared_ptr<reservation_table> table_;
  extender_config config_;
  binding_writer writer_;
  std::chrono::milliseconds request_ttl_;
  std::mutex mutex_;
  std::map<std::string, pending> pending_;
};

}  // namespace vramkit::cluster

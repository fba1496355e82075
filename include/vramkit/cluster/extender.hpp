// kube-scheduler extender verbs (k8s.io/kube-scheduler/extender/v1) as pure functions: a request
// body in, a status and a response body out. Node states come through a lookup the caller provides
// (the HTTP server passes its exporter scraper; tests pass fixtures). Thread-safe when the lookup
// is.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "vramkit/cluster/gpu_state.hpp"
#include "vramkit/cluster/placement.hpp"
#include "vramkit/core/result.hpp"

namespace vramkit::cluster {

/// Names the extender reads from pods.
struct extender_config {
  placement_options placement{};
  std::string resource_name = "vramkit.io/gpu-memory";  ///< extended resource, a quantity
  /// Bytes per unit of the resource: 1 when pods give bytes ("24Gi"), 1 GiB with the vramkit
  /// device plugin, whose resource counts GiB ("24").
  std::uint64_t resource_unit_bytes = 1;
  std::string plan_annotation = "vramkit.io/plan";  ///< annotation holding planner JSON
  /// Called by filter with the pod's metadata.uid and its request, so that a bind verb (which
  /// is sent no pod spec) knows how much to reserve; empty: not called.
  std::function<void(const std::string& pod_uid, std::uint64_t bytes)> on_request;
};

/// A node's live state, shared rather than copied: the scraper's cache and every request in
/// flight point at the same immutable snapshot.
using node_state_ptr = std::shared_ptr<const node_state>;

/// Node name -> its live state, or why it has none (exporter unreachable, not configured).
using node_states = std::unordered_map<std::string, result<node_state_ptr>>;

/// Returns the states of the named nodes; called once per request with every node it names.
using node_lookup = std::function<node_states(const std::vector<std::string>& names)>;

/// An HTTP answer: 200 with a JSON body, or 400 with a one-line plain-text message.
struct extender_response {
  int status = 200;
  std::string body;
  std::string content_type = "application/json";
};

/// The pod's per-GPU memory request in bytes: the sum over containers of `resource_name` in
/// limits (or requests) times resource_unit_bytes, at least the largest init container's, else the
/// plan annotation's device_peak_bytes; nullopt when the pod asks for neither. Throws invalid_input
/// on a malformed quantity or plan.
[[nodiscard]] std::optional<std::uint64_t> pod_memory_request(std::string_view pod_json,
                                                              const extender_config& config);

/// POST filter: ExtenderArgs in, ExtenderFilterResult out. Keeps the nodes where one GPU can hold
/// the request now; a node whose GPUs are all too small goes to FailedAndUnresolvableNodes, one
/// that is full now or unreachable to FailedNodes, with the reason. Answers with NodeNames when the
/// request carried NodeNames (nodeCacheCapable), else with Nodes (the NodeList items as received).
/// A pod without a request passes every node. Malformed input -> status 400, never a throw.
[[nodiscard]] extender_response extender_filter(std::string_view body, const node_lookup& lookup,
                                                const extender_config& config);

/// POST prioritize: ExtenderArgs in, HostPriorityList ([{"Host","Score"}], 0..10) out, one entry
/// per node sent, in the order sent; nodes that cannot hold the request score 0.
[[nodiscard]] extender_response extender_prioritize(std::string_view body,
                                                    const node_lookup& lookup,
                                                    const extender_config& config);

}  // namespace vramkit::cluster

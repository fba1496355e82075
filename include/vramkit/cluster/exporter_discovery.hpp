// Node discovery for the extender: the exporter DaemonSet's pods, listed through the API, give
// each node's exporter URL (node name -> http://<pod IP>:<port>/metrics), replacing a static node
// map. Pure parsing plus one HTTP GET; thread-safe.
#pragma once

#include <chrono>
#include <map>
#include <string>
#include <string_view>

#include "vramkit/core/result.hpp"

namespace vramkit::cluster {

/// Reads a v1 PodList (the API's answer to a pod list): every Running, Ready pod with a
/// spec.nodeName and a status.podIP gives node -> http://<podIP>:<port>/metrics (IPv6 in
/// brackets). With the DaemonSet on the host network the pod IP is the node IP. Throws
/// invalid_input on text that is not a PodList.
[[nodiscard]] std::map<std::string, std::string> exporters_from_pod_list(std::string_view json_text,
                                                                         int port);

/// GETs the pods matching `label_selector` in `namespace_name` from the API at `api_url` (plain
/// HTTP, e.g. a kubectl proxy sidecar) and reads them with exporters_from_pod_list; an
/// unreachable API or a non-200 answer is an `unavailable` with the reason.
[[nodiscard]] result<std::map<std::string, std::string>> discover_exporters(
    const std::string& api_url, const std::string& namespace_name,
    const std::string& label_selector, int port, std::chrono::milliseconds timeout);

}  // namespace vramkit::cluster

// The bind verb's API side: annotates the pod with its GPU (for the device plugin) and creates its
// Binding, over plain HTTP to an API endpoint that adds the credentials itself (a `kubectl proxy`
// sidecar on loopback, as deploy/ sets it up). Thread-safe.
#pragma once

#include <chrono>
#include <string>

#include "vramkit/cluster/extender_bind.hpp"

namespace vramkit::cluster {

/// A binding_writer for the API at `api_url` (http://host:port): merge-patches the pod's
/// annotations vramkit.io/gpu-uuid, gpu-index, gpu-memory-bytes and assume-time-ns, then POSTs
/// pods/<name>/binding; a 409 counts as success when the pod is already on the chosen node. Without
/// cpp-httplib in the build every call fails with a message saying so.
[[nodiscard]] binding_writer kube_api_binding_writer(std::string api_url,
                                                     std::chrono::milliseconds timeout);

}  // namespace vramkit::cluster

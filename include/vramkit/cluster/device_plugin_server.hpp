// The kubelet device plugin over gRPC (deviceplugin v1beta1): serves DevicePlugin on a unix socket
// and registers with the kubelet's Registration service. Built only with gRPC (VRAMKIT_GRPC);
// the decisions are device_plugin.hpp's. Thread-safe; stop() may be called from any thread.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "vramkit/cluster/device_plugin.hpp"

namespace vramkit::cluster {

/// Where the plugin reads its node's GPUs and pods, and how it records an allocation.
struct device_plugin_sources {
  std::function<std::vector<gpu_state>()> gpus;  ///< the node's GPUs now (NVML or a fixture)
  std::function<std::string()> pod_list;         ///< a v1 PodList holding the node's pods
  /// Records that `a` was allocated (annotates the pod); returns "" or a one-line error, which is
  /// logged, not fatal: the plugin also remembers its allocations itself.
  std::function<std::string(const allocation& a)> mark_allocated;
};

/// Pod list and marking through the API at `api_url` (plain HTTP, a kubectl proxy): GET
/// /api/v1/pods?fieldSelector=spec.nodeName=<node>, and a merge patch of vramkit.io/allocated.
/// Needs cpp-httplib; without it every call throws.
[[nodiscard]] device_plugin_sources kube_api_pod_sources(std::string api_url, std::string node,
                                                         std::chrono::milliseconds timeout);

class device_plugin_server {
 public:
  device_plugin_server(device_plugin_options options, device_plugin_sources sources);
  ~device_plugin_server();
  device_plugin_server(const device_plugin_server&) = delete;
  device_plugin_server& operator=(const device_plugin_server&) = delete;

  /// Listens on the unix socket `socket_path` (an old file there is removed first); throws
  /// vramkit::error when it cannot.
  void start(const std::string& socket_path);

  /// Calls Registration/Register on the kubelet's socket with `endpoint` (the socket's file name);
  /// throws vramkit::error with the kubelet's answer when it refuses or cannot be reached.
  void register_with_kubelet(const std::string& kubelet_socket, const std::string& endpoint,
                             std::chrono::milliseconds timeout = std::chrono::seconds(10));

  /// Ends every ListAndWatch stream and shuts the server down.
  void stop() noexcept;

  /// Allocate calls answered successfully so far (containers).
  [[nodiscard]] std::size_t allocations() const;

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace vramkit::cluster

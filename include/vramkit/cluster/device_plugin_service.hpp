// device_plugin_service: the device plugin served and kept registered with the kubelet. The kubelet
// removes every plugin socket when it restarts; the service notices the socket gone, serves again
// and registers again. Built only with gRPC (VRAMKIT_GRPC). Thread-safe; stop() may be called
// from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "vramkit/cluster/device_plugin_server.hpp"

namespace vramkit::cluster {

/// Where the plugin and the kubelet meet.
struct kubelet_endpoint {
  std::string kubelet_socket = "/var/lib/kubelet/device-plugins/kubelet.sock";
  std::string endpoint = "vramkit-gpu-memory.sock";  ///< the plugin's socket, beside the kubelet's
  std::chrono::milliseconds check_every{2000};       ///< how often the socket's presence is checked
};

class device_plugin_service {
 public:
  /// Told, on the watching thread, each re-registration and each failure to re-register.
  using log_function = std::function<void(const std::string& line)>;

  device_plugin_service(device_plugin_options options, device_plugin_sources sources,
                        kubelet_endpoint where, log_function log);
  /// Stops (stop()).
  ~device_plugin_service();
  device_plugin_service(const device_plugin_service&) = delete;
  device_plugin_service& operator=(const device_plugin_service&) = delete;

  /// The plugin's socket: `endpoint` in the kubelet socket's folder.
  [[nodiscard]] const std::string& socket_path() const noexcept { return socket_; }

  /// Serves on socket_path() and registers once, throwing vramkit::error as
  /// device_plugin_server::start and register_with_kubelet do; then watches the socket. Call once.
  void start();

  /// Stops watching and serving and removes the socket file. Idempotent.
  void stop() noexcept;

 private:
  void serve_and_register();
  void watch();

  device_plugin_options options_;
  device_plugin_sources sources_;
  kubelet_endpoint where_;
  log_function log_;
  std::string socket_;
  std::mutex server_mutex_;
  std::unique_ptr<device_plugin_server> server_;
  std::atomic<bool> stopping_{false};
  std::thread watcher_;
};

}  // namespace vramkit::cluster

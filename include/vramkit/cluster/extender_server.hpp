// The HTTP front of the scheduler extender: POST <prefix>/filter, <prefix>/prioritize (any
// prefix, as kube-scheduler's urlPrefix sets it), optionally <prefix>/bind, GET /healthz. Needs
// cpp-httplib in the build; without it start() throws. Handlers run on the server's thread pool;
// stop() may be called from any thread.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "vramkit/cluster/extender.hpp"

namespace vramkit::cluster {

/// True when this build can serve HTTP (built with cpp-httplib).
[[nodiscard]] bool extender_server_available() noexcept;

class extender_server {
 public:
  /// Serves `lookup` (kept alive by the server) with `config` on bind:port; port 0 picks a free
  /// one.
  extender_server(node_lookup lookup, extender_config config, std::string bind, int port);
  ~extender_server();
  extender_server(const extender_server&) = delete;
  extender_server& operator=(const extender_server&) = delete;

  /// Also serves POST <prefix>/bind with `handler` (bind_service::bind); call before run().
  void serve_bind(std::function<extender_response(std::string_view body)> handler);

  /// Binds the socket (throws vramkit::error naming the address when it cannot) and returns the
  /// port bound.
  int bind();

  /// Serves until stop(); call after bind().
  void run();

  /// Makes run() return; safe from any thread or a signal-watching thread.
  void stop() noexcept;

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace vramkit::cluster

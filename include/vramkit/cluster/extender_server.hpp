// The HTTP front of the scheduler extender: POST <prefix>/filter, <prefix>/prioritize (any
// prefix, as kube-scheduler's urlPrefix sets it), optionally <prefix>/bind, GET /healthz. Needs
// libmicrohttpd in the build; without it start() throws. Handlers run on the server's thread pool;
// stop() may be called from any thread.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "vramkit/cluster/extender.hpp"
#include "vramkit/monitor/http_server.hpp"

namespace vramkit::cluster {

/// True when this build can serve HTTP (built with libmicrohttpd).
[[nodiscard]] bool extender_server_available() noexcept;

class extender_server {
 public:
  /// Serves `lookup` (kept alive by the server) with `config` on bind:port; port 0 picks a free
  /// one; `limits` bounds connections and timeouts (its address and port are ignored).
  extender_server(node_lookup lookup, extender_config config, std::string bind, int port,
                  monitor::http_server_options limits = {});
  ~extender_server();
  extender_server(const extender_server&) = delete;
  extender_server& operator=(const extender_server&) = delete;

  /// Also serves POST <prefix>/bind with `handler` (bind_service::bind); call before bind().
  void serve_bind(std::function<extender_response(std::string_view body)> handler);

  /// Binds the socket and starts serving; returns the port bound. Throws vramkit::invalid_input
  /// for an address that is not one, vramkit::error naming the address when it cannot bind.
  int bind();

  /// Blocks until stop() (returns at once if stop() came first); call after bind().
  void run();

  /// Stops serving and makes run() return; safe from any thread, also before run().
  void stop() noexcept;

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace vramkit::cluster

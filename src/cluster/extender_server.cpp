// HTTP server for the scheduler extender verbs (monitor's http_server when the build has it).
#include "vramkit/cluster/extender_server.hpp"

#include <fmt/format.h>

#include <functional>
#include <string_view>

#include "vramkit/core/error.hpp"

namespace vramkit::cluster {

bool extender_server_available() noexcept { return monitor::http_server_built(); }

struct extender_server::impl {
  node_lookup lookup;
  extender_config config;
  std::unique_ptr<monitor::http_server> server;
  // POST <prefix>/bind, when serve_bind() set it (set before bind(), read by handler threads).
  std::function<extender_response(std::string_view body)> bind_handler;
};

namespace {

monitor::http_response route(const monitor::http_request& req, const node_lookup& lookup,
                             const extender_config& config,
                             const std::function<extender_response(std::string_view)>& bind) {
  monitor::http_response res;
  auto ends_with = [&](std::string_view tail) {
    return req.path.size() >= tail.size() &&
           req.path.compare(req.path.size() - tail.size(), tail.size(), tail) == 0;
  };
  auto reply = [&](const extender_response& r) {
    res.status = r.status;
    res.content_type = r.content_type;
    res.body = r.body;
  };
  if (req.method == "POST" && ends_with("/filter")) {
    reply(extender_filter(req.body, lookup, config));
  } else if (req.method == "POST" && ends_with("/prioritize")) {
    reply(extender_prioritize(req.body, lookup, config));
  } else if (req.method == "POST" && ends_with("/bind") && bind) {
    reply(bind(req.body));
  } else if ((req.method == "GET" || req.method == "HEAD") && req.path == "/healthz") {
    res.body = "ok\n";
  } else {
    res.status = 404;
    res.body = fmt::format("no such endpoint: {} {} (POST .../filter or .../prioritize)\n",
                           req.method, req.path);
  }
  return res;
}

}  // namespace

extender_server::extender_server(node_lookup lookup, extender_config config, std::string bind,
                                 int port, monitor::http_server_options limits)
    : impl_(std::make_unique<impl>()) {
  impl_->lookup = std::move(lookup);
  impl_->config = std::move(config);
  limits.bind_address = std::move(bind);
  limits.port = port;
  impl* self = impl_.get();
  impl_->server = std::make_unique<monitor::http_server>(
      std::move(limits), [self](const monitor::http_request& req) {
        try {
          return route(req, self->lookup, self->config, self->bind_handler);
        } catch (const std::exception& e) {
          monitor::http_response res;
          res.status = 500;
          res.body = std::string("vramkit extender: ") + e.what() + "\n";
          return res;
        }
      });
}

extender_server::~extender_server() { stop(); }

void extender_server::serve_bind(std::function<extender_response(std::string_view body)> handler) {
  impl_->bind_handler = std::move(handler);
}

int extender_server::bind() {
  if (!extender_server_available())
    throw error("vramkit extender needs a build with libmicrohttpd");
  return impl_->server->start();
}

// The server already serves from bind() on; run() only blocks, so a stop() that comes first (a
// SIGTERM straight after start) makes it return at once instead of being lost.
void extender_server::run() { impl_->server->wait(); }

void extender_server::stop() noexcept {
  if (impl_) impl_->server->stop();
}

}  // namespace vramkit::cluster

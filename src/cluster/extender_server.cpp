// HTTP server for the scheduler extender verbs (cpp-httplib when the build has it).
#include "vramkit/cluster/extender_server.hpp"

#include <fmt/format.h>

#include "vramkit/config.hpp"
#include "vramkit/core/error.hpp"

#if VRAMKIT_HAVE_HTTPLIB
#include <httplib.h>
#endif

namespace vramkit::cluster {

bool extender_server_available() noexcept { return VRAMKIT_HAVE_HTTPLIB != 0; }

struct extender_server::impl {
  node_lookup lookup;
  extender_config config;
  std::string bind;
  int port = 0;
#if VRAMKIT_HAVE_HTTPLIB
  httplib::Server server;
#endif
};

extender_server::extender_server(node_lookup lookup, extender_config config, std::string bind,
                                 int port)
    : impl_(std::make_unique<impl>()) {
  impl_->lookup = std::move(lookup);
  impl_->config = std::move(config);
  impl_->bind = std::move(bind);
  impl_->port = port;
#if VRAMKIT_HAVE_HTTPLIB
  auto& s = impl_->server;
  impl* self = impl_.get();
  // kube-scheduler keeps a connection alive per goroutine that calls the extender (filters and
  // asynchronous binds overlap); each such connection holds one server thread while it is idle, so
  // the pool must be larger than cpp-httplib's default (the core count) or calls queue up.
  s.new_task_queue = [] { return new httplib::ThreadPool(64); };
  // cpp-httplib closes a kept-alive connection after 5 requests by default; a client that sent its
  // next request meanwhile sees a failed read. Reuse connections far longer.
  s.set_keep_alive_max_count(100000);
  auto reply = [](httplib::Response& res, const extender_response& r) {
    res.status = r.status;
    res.set_content(r.body, r.content_type.c_str());
  };
  s.Post(R"((.*)/filter)", [self, reply](const httplib::Request& req, httplib::Response& res) {
    reply(res, extender_filter(req.body, self->lookup, self->config));
  });
  s.Post(R"((.*)/prioritize)", [self, reply](const httplib::Request& req, httplib::Response& res) {
    reply(res, extender_prioritize(req.body, self->lookup, self->config));
  });
  s.Get("/healthz", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("ok\n", "text/plain");
  });
  s.set_exception_handler(
      [](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
        std::string what = "internal error";
        try {
          if (ep) std::rethrow_exception(ep);
        } catch (const std::exception& e) {
          what = e.what();
        } catch (...) {
        }
        res.status = 500;
        res.set_content("vramkit extender: " + what + "\n", "text/plain");
      });
  s.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    res.set_content(fmt::format("no such endpoint: {} {} (POST .../filter or .../prioritize)\n",
                                req.method, req.path),
                    "text/plain");
  });
#endif
}

extender_server::~extender_server() { stop(); }

void extender_server::serve_bind(std::function<extender_response(std::string_view body)> handler) {
#if VRAMKIT_HAVE_HTTPLIB
  impl_->server.Post(R"((.*)/bind)", [handler = std::move(handler)](const httplib::Request& req,
                                                                    httplib::Response& res) {
    const extender_response r = handler(req.body);
    res.status = r.status;
    res.set_content(r.body, r.content_type.c_str());
  });
#else
  (void)handler;
#endif
}

int extender_server::bind() {
#if VRAMKIT_HAVE_HTTPLIB
  auto& s = impl_->server;
  if (impl_->port == 0) {
    impl_->port = s.bind_to_any_port(impl_->bind);
    if (impl_->port <= 0) throw error(fmt::format("cannot bind the extender to {}:0", impl_->bind));
  } else if (!s.bind_to_port(impl_->bind, impl_->port)) {
    throw error(
        fmt::format("cannot bind the extender to {}:{} (in use?)", impl_->bind, impl_->port));
  }
  return impl_->port;
#else
  throw error("vramkit serve --extender needs a build with cpp-httplib");
#endif
}

void extender_server::run() {
#if VRAMKIT_HAVE_HTTPLIB
  impl_->server.listen_after_bind();
#endif
}

void extender_server::stop() noexcept {
#if VRAMKIT_HAVE_HTTPLIB
  if (impl_) impl_->server.stop();
#endif
}

}  // namespace vramkit::cluster

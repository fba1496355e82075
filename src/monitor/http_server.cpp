// http_server over libmicrohttpd (epoll, internal thread pool). Without the library
// (VRAMKIT_MONITOR_MHD undefined) start() says the build has no server.
#include "vramkit/monitor/http_server.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <mutex>

#include "vramkit/core/error.hpp"

#if defined(VRAMKIT_MONITOR_MHD)
#include <microhttpd.h>
#endif

namespace vramkit::monitor {

std::optional<std::string> http_request::param(const std::string& name) const {
  for (const auto& [k, v] : query)
    if (k == name) return v;
  return std::nullopt;
}

bool http_server_built() noexcept {
#if defined(VRAMKIT_MONITOR_MHD)
  return true;
#else
  return false;
#endif
}

std::string http_url(const std::string& host, int port) {
  const bool v6 = host.find(':') != std::string::npos && host.front() != '[';
  return "http://" + (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port) + "/";
}

namespace {

struct resolved_address {
  sockaddr_storage storage{};
  socklen_t length = 0;
  bool v6 = false;
};

// The first address `host` names (an IP literal, or a name the resolver knows), with `port`.
resolved_address resolve(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  std::string h = host;
  if (h.size() > 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  const int rc = getaddrinfo(h.c_str(), std::to_string(port).c_str(), &hints, &res);
  if (rc != 0 || res == nullptr)
    throw invalid_input("cannot listen on '" + host +
                        "': not an IP address or a known host name (" + gai_strerror(rc) + ")");
  resolved_address out;
  std::memcpy(&out.storage, res->ai_addr, res->ai_addrlen);
  out.length = res->ai_addrlen;
  out.v6 = res->ai_family == AF_INET6;
  freeaddrinfo(res);
  return out;
}

// Why binding `a` fails, tried with a socket of our own (the server reports only that it failed).
std::string bind_failure(const resolved_address& a) {
  int fd = socket(a.v6 ? AF_INET6 : AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return std::strerror(errno);
  int yes = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  std::string why = "cannot bind that address";
  if (bind(fd, reinterpret_cast<const sockaddr*>(&a.storage), a.length) != 0) {
    why = errno == EADDRINUSE      ? "address already in use"
          : errno == EADDRNOTAVAIL ? "address not available on this machine"
                                   : std::strerror(errno);
  }
  close(fd);
  return why;
}

}  // namespace

struct http_server::impl {
  http_server_options options;
  http_handler handler;
  std::mutex mutex;
  std::condition_variable stopped_cv;
  bool started = false;
  bool stopped = false;
  int port = 0;
#if defined(VRAMKIT_MONITOR_MHD)
  MHD_Daemon* daemon = nullptr;
  std::string last_log;  // the library's last message, for the error of a failed start

  // What one connection's current request has gathered so far.
  struct request_state {
    std::string body;
    bool refused = false;
  };

  static void log(void* cls, const char* format, va_list ap) {
    auto* self = static_cast<impl*>(cls);
    char line[256];
    std::vsnprintf(line, sizeof line, format, ap);
    std::lock_guard lock(self->mutex);
    if (!self->started) self->last_log = line;
  }

  static void free_body(void* body) { delete static_cast<std::string*>(body); }

  // Queues `r`; the response owns its body from here (moved, not copied: a /metrics page is
  // tens of kilobytes per scrape).
  static MHD_Result queue(MHD_Connection* c, http_response& r) {
    auto* body = new std::string(std::move(r.body));
    MHD_Response* resp = MHD_create_response_from_buffer_with_free_callback_cls(
        body->size(), body->data(), &impl::free_body, body);
    if (resp == nullptr) {
      delete body;
      return MHD_NO;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, r.content_type.c_str());
    for (const auto& [k, v] : r.headers) MHD_add_response_header(resp, k.c_str(), v.c_str());
    const MHD_Result ret = MHD_queue_response(c, static_cast<unsigned>(r.status), resp);
    MHD_destroy_response(resp);
    return ret;
  }

  static MHD_Result collect_query(void* cls, MHD_ValueKind, const char* key, const char* value) {
    static_cast<http_request*>(cls)->query.emplace_back(key ? key : "", value ? value : "");
    return MHD_YES;
  }

  static MHD_Result on_request(void* cls, MHD_Connection* c, const char* url, const char* method,
                               const char*, const char* upload, size_t* upload_size,
                               void** req_cls) {
    auto* self = static_cast<impl*>(cls);
    auto* st = static_cast<request_state*>(*req_cls);
    if (st == nullptr) {  // headers are in; the body (if any) follows in later calls
      *req_cls = new request_state;
      return MHD_YES;
    }
    if (*upload_size != 0) {
      // Past the limit the rest is read and dropped (bounded memory), then answered 413.
      if (st->body.size() + *upload_size > self->options.max_body_bytes) st->refused = true;
      if (!st->refused) st->body.append(upload, *upload_size);
      *upload_size = 0;
      return MHD_YES;
    }
    if (st->refused) {
      http_response r;
      r.status = 413;
      r.body = "request body above " + std::to_string(self->options.max_body_bytes) + " bytes\n";
      return queue(c, r);
    }
    http_request req;
    req.method = method;
    req.path = url;
    req.body = std::move(st->body);
    MHD_get_connection_values(c, MHD_GET_ARGUMENT_KIND, &impl::collect_query, &req);
    http_response r;
    try {
      r = self->handler(req);
    } catch (const std::exception& e) {
      r = http_response{};
      r.status = 500;
      r.body = std::string("internal error: ") + e.what() + "\n";
    } catch (...) {
      r = http_response{};
      r.status = 500;
      r.body = "internal error\n";
    }
    return queue(c, r);
  }

  static void on_completed(void*, MHD_Connection*, void** req_cls, MHD_RequestTerminationCode) {
    delete static_cast<request_state*>(*req_cls);
    *req_cls = nullptr;
  }
#endif
};

http_server::http_server(http_server_options options, http_handler handler)
    : impl_(std::make_unique<impl>()) {
  impl_->options = std::move(options);
  impl_->handler = std::move(handler);
}

http_server::~http_server() { stop(); }

int http_server::port() const noexcept { return impl_->port; }

int http_server::start() {
  auto& o = impl_->options;
  if (o.port < 0 || o.port > 65535)
    throw invalid_input("port " + std::to_string(o.port) + " is not a TCP port (0-65535)");
  const resolved_address addr = resolve(o.bind_address, o.port);
#if defined(VRAMKIT_MONITOR_MHD)
  {
    std::lock_guard lock(impl_->mutex);
    if (impl_->started) throw logic_error("http_server::start called twice");
    if (impl_->stopped) throw error("the server was stopped before it started");
  }
  unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_USE_ERROR_LOG;
  if (addr.v6) flags |= MHD_USE_IPv6;
  const unsigned pool = o.poll_threads > 1 ? o.poll_threads : 1;
  MHD_Daemon* d = MHD_start_daemon(
      flags, static_cast<std::uint16_t>(o.port), nullptr, nullptr, &impl::on_request, impl_.get(),
      MHD_OPTION_SOCK_ADDR, reinterpret_cast<const sockaddr*>(&addr.storage),
      MHD_OPTION_LISTEN_BACKLOG_SIZE, o.listen_backlog, MHD_OPTION_THREAD_POOL_SIZE, pool,
      MHD_OPTION_CONNECTION_LIMIT, o.max_connections, MHD_OPTION_PER_IP_CONNECTION_LIMIT,
      o.max_connections_per_client, MHD_OPTION_CONNECTION_TIMEOUT,
      static_cast<unsigned>(o.idle_timeout.count()), MHD_OPTION_CONNECTION_MEMORY_LIMIT,
      o.max_header_bytes, MHD_OPTION_NOTIFY_COMPLETED, &impl::on_completed, nullptr,
      MHD_OPTION_EXTERNAL_LOGGER, &impl::log, impl_.get(), MHD_OPTION_END);
  const std::string where =
      (addr.v6 ? "[" + o.bind_address + "]" : o.bind_address) + ":" + std::to_string(o.port);
  if (d == nullptr) {
    std::string why = bind_failure(addr);
    if (why == "cannot bind that address" && !impl_->last_log.empty()) why = impl_->last_log;
    while (!why.empty() && (why.back() == '\n' || why.back() == '.')) why.pop_back();
    throw error("cannot listen on " + where + ": " + why);
  }
  std::lock_guard lock(impl_->mutex);
  impl_->daemon = d;
  impl_->started = true;
  const MHD_DaemonInfo* info = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
  impl_->port = info != nullptr ? info->port : o.port;
  return impl_->port;
#else
  (void)addr;
  throw error("built without libmicrohttpd: this build has no HTTP server");
#endif
}

void http_server::stop() noexcept {
  if (!impl_) return;
#if defined(VRAMKIT_MONITOR_MHD)
  MHD_Daemon* d = nullptr;
#endif
  {
    std::lock_guard lock(impl_->mutex);
    if (impl_->stopped) return;
    impl_->stopped = true;
#if defined(VRAMKIT_MONITOR_MHD)
    d = impl_->daemon;
    impl_->daemon = nullptr;
#endif
  }
  impl_->stopped_cv.notify_all();
#if defined(VRAMKIT_MONITOR_MHD)
  if (d != nullptr) MHD_stop_daemon(d);
#endif
}

void http_server::wait() {
  std::unique_lock lock(impl_->mutex);
  impl_->stopped_cv.wait(lock, [this] { return impl_->stopped; });
}

}  // namespace vramkit::monitor

// http_server: the small HTTP/1.1 server behind `vramkit serve` and `vramkit extender`, built on
// GNU libmicrohttpd's epoll loop, so an idle or slow connection costs a socket and a buffer but
// never a worker thread. Bounded everywhere: listen backlog, poll threads, connections in all and
// per client address, idle timeout, header bytes, body bytes. Thread-safe; handlers run on the
// poll threads and must be quick (render from memory, never wait on the network for long).
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace vramkit::monitor {

/// One request as the handler sees it (the body only for methods that carry one).
struct http_request {
  std::string method;
  std::string path;
  std::string body;
  std::vector<std::pair<std::string, std::string>> query;
  /// The first query argument named `name`, if there is one.
  [[nodiscard]] std::optional<std::string> param(const std::string& name) const;
};

struct http_response {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
};

/// Answers one request; an exception becomes a 500 with its message.
using http_handler = std::function<http_response(const http_request&)>;

/// Limits, with the defaults Prometheus-style exporters get away with on a busy node: a scraper
/// keeps one connection alive for as many requests as it likes; what is bounded is resources.
struct http_server_options {
  std::string bind_address = "127.0.0.1";
  int port = 0;                               ///< 0 picks a free port
  unsigned listen_backlog = 1024;             ///< kernel accept queue (SOMAXCONN caps it)
  unsigned poll_threads = 2;                  ///< worker threads, each with its own epoll set
  unsigned max_connections = 4096;            ///< open connections in all
  unsigned max_connections_per_client = 128;  ///< per client IP address; 0: no limit
  std::chrono::seconds idle_timeout{10};      ///< a connection silent this long is closed
  std::size_t max_header_bytes = 16 * 1024;   ///< request line + headers; more is answered 431/413
  std::size_t max_body_bytes = 4 * 1024 * 1024;  ///< larger bodies are answered 413
};

/// True when this build contains the HTTP server (libmicrohttpd was found).
[[nodiscard]] bool http_server_built() noexcept;

/// `http://host:port/`, with an IPv6 literal in brackets as RFC 3986 requires.
[[nodiscard]] std::string http_url(const std::string& host, int port);

class http_server {
 public:
  http_server(http_server_options options, http_handler handler);
  ~http_server();
  http_server(const http_server&) = delete;
  http_server& operator=(const http_server&) = delete;

  /// Binds and starts serving on background threads; returns the bound port. Throws
  /// vramkit::invalid_input for an address that is neither an IP literal nor a resolvable host
  /// name, vramkit::error for one that cannot be bound (in use, not local) or a build without
  /// the server. Throws logic_error when called twice.
  int start();
  /// Stops serving (idempotent, noexcept, safe from any thread; before start() it makes a later
  /// start() throw and wait() return at once).
  void stop() noexcept;
  /// Blocks until stop() has been called (returns at once when it already was).
  void wait();
  [[nodiscard]] int port() const noexcept;

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace vramkit::monitor

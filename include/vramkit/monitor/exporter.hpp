// exporter: the HTTP side of `vramkit serve`. A background thread samples every `interval` into a
// history ring; HTTP handlers only render the latest sample (a scrape never samples). Endpoints:
// /metrics (Prometheus text), /healthz, /api/samples (JSON history), / (the live page, embedded in
// the binary). Needs libmicrohttpd at build time; without it start() says so. Thread-safe.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "vramkit/monitor/exposition.hpp"
#include "vramkit/monitor/http_server.hpp"
#include "vramkit/monitor/sample_history.hpp"
#include "vramkit/monitor/sampler.hpp"

namespace vramkit::monitor {

struct exporter_options {
  std::string bind_address = "127.0.0.1";
  int port = 9464;  ///< 0 picks a free port
  std::chrono::milliseconds interval{1000};
  std::size_t history_samples = 600;  ///< ten minutes at 1 s
  /// Connection limits and timeouts; its bind_address and port are taken from the fields above.
  http_server_options http;
};

/// True when this build contains the HTTP server (libmicrohttpd was found).
bool exporter_built() noexcept;

class exporter {
 public:
  exporter(std::unique_ptr<sampler> source, exporter_options options);
  ~exporter();
  exporter(const exporter&) = delete;
  exporter& operator=(const exporter&) = delete;

  /// Takes a first sample, binds and starts serving on background threads; returns the bound
  /// port. Throws vramkit::error with one line when the address cannot be bound (port in use) or
  /// the build has no HTTP server.
  int start();
  /// Stops serving and sampling; idempotent, noexcept.
  void stop() noexcept;

  /// The /metrics body for the latest sample (counts as a scrape).
  std::string metrics();
  /// The /api/samples body: history since `since_ms` plus the latest full sample.
  std::string samples_json(std::int64_t since_ms) const;
  [[nodiscard]] const sample_history& history() const noexcept { return history_; }

 private:
  void sample_loop();
  /// Renders the /metrics page of `s` once, then adds `s` to the history.
  void publish(sample s);
  http_response handle(const http_request& req);

  struct server;
  std::unique_ptr<sampler> source_;
  exporter_options options_;
  sample_history history_;
  std::unique_ptr<server> server_;
  std::thread sample_thread_;
  std::thread serve_thread_;
  std::atomic<bool> stopping_{false};
  std::atomic<std::uint64_t> scrapes_{0};
  std::atomic<std::uint64_t> samples_{0};
  std::atomic<std::int64_t> latest_sample_ms_{-1};  ///< the latest sample's time, for /healthz
  std::mutex body_mutex_;
  std::shared_ptr<const std::string> body_;  ///< the latest sample's page, without the counter
  std::mutex wake_mutex_;
  std::condition_variable wake_;
};

}  // namespace vramkit::monitor

// exporter: background sampler thread + cpp-httplib server. Handlers render from the history ring
// and never sample. Without cpp-httplib (VRAMKIT_MONITOR_HTTP undefined) start() reports it.
#include "vramkit/monitor/exporter.hpp"

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include "vramkit/core/error.hpp"
#include "vramkit/monitor/recording.hpp"
#include "vramkit_monitor_web_assets.hpp"

#if defined(VRAMKIT_MONITOR_HTTP)
#include <httplib.h>
#endif

namespace vramkit::monitor {

bool exporter_built() noexcept {
#if defined(VRAMKIT_MONITOR_HTTP)
  return true;
#else
  return false;
#endif
}

struct exporter::server {
#if defined(VRAMKIT_MONITOR_HTTP)
  httplib::Server http;
#endif
};

exporter::exporter(std::unique_ptr<sampler> source, exporter_options options)
    : source_(std::move(source)),
      options_(std::move(options)),
      history_(options_.history_samples),
      server_(std::make_unique<server>()) {}

exporter::~exporter() { stop(); }

std::string exporter::metrics() {
  auto latest = history_.latest();
  exporter_stats stats{++scrapes_, samples_.load()};
  return render_metrics(latest ? *latest : sample{}, stats);
}

namespace {

// The processes with the most device memory on one GPU (at most 8), for the live page's
// per-process history: [{"pid", "used", "command"}].
nlohmann::json top_processes_json(const gpu_sample& g) {
  std::vector<const gpu_process*> ps;
  for (const auto& p : g.processes)
    if (p.used_bytes) ps.push_back(&p);
  std::sort(ps.begin(), ps.end(), [](const gpu_process* a, const gpu_process* b) {
    return *a->used_bytes > *b->used_bytes;
  });
  if (ps.size() > 8) ps.resize(8);
  auto out = nlohmann::json::array();
  for (const auto* p : ps)
    out.push_back({{"pid", p->pid}, {"used", *p->used_bytes}, {"command", p->command}});
  return out;
}

}  // namespace

std::string exporter::samples_json(std::int64_t since_ms) const {
  using nlohmann::json;
  json out;
  out["interval_ms"] = options_.interval.count();
  out["capacity"] = history_.capacity();
  json arr = json::array();
  for (const auto& s : history_.since(since_ms)) {
    json j;
    j["t"] = s.timestamp_ms;
    json gpus = json::array();
    for (const auto& g : s.gpus) {
      json gj{
          {"index", g.index}, {"uuid", g.uuid}, {"name", g.name}, {"state", to_string(g.state)}};
      if (!g.state_reason.empty()) gj["state_reason"] = g.state_reason;
      if (g.memory_used_bytes) gj["used"] = *g.memory_used_bytes;
      if (g.memory_total_bytes) gj["total"] = *g.memory_total_bytes;
      if (g.memory_reserved_bytes) gj["reserved"] = *g.memory_reserved_bytes;
      if (g.utilization_gpu_percent) gj["util"] = *g.utilization_gpu_percent;
      if (g.temperature_celsius) gj["temp"] = *g.temperature_celsius;
      if (g.power_watts) gj["power"] = *g.power_watts;
      if (g.pcie_rx_bytes_per_second) gj["rx"] = *g.pcie_rx_bytes_per_second;
      if (g.pcie_tx_bytes_per_second) gj["tx"] = *g.pcie_tx_bytes_per_second;
      gj["procs"] = top_processes_json(g);
      gpus.push_back(std::move(gj));
    }
    j["gpus"] = std::move(gpus);
    if (!s.gpu_unavailable_reason.empty()) j["gpu_unavailable_reason"] = s.gpu_unavailable_reason;
    if (s.host.memory) {
      j["host_total"] = s.host.memory->total_bytes;
      if (s.host.memory->available_bytes) j["host_available"] = *s.host.memory->available_bytes;
    }
    if (!s.host.numa.empty()) {
      json numa = json::array();
      for (const auto& n : s.host.numa)
        numa.push_back({{"node", n.node}, {"total", n.total_bytes}, {"free", n.free_bytes}});
      j["numa"] = std::move(numa);
    }
    arr.push_back(std::move(j));
  }
  out["samples"] = std::move(arr);
  auto latest = history_.latest();
  out["latest"] = latest ? json::parse(to_json_line(*latest)) : json(nullptr);
  return out.dump(-1, ' ', false, json::error_handler_t::replace);
}

void exporter::sample_loop() {
  auto next = std::chrono::steady_clock::now() + options_.interval;
  std::unique_lock lock(wake_mutex_);
  while (!stopping_) {
    if (wake_.wait_until(lock, next, [this] { return stopping_.load(); })) break;
    lock.unlock();
    history_.push(source_->take());
    ++samples_;
    lock.lock();
    // Fixed rate, not fixed delay: a slow sample does not shift the schedule; a very slow one
    // skips ahead rather than bursting.
    next += options_.interval;
    auto now = std::chrono::steady_clock::now();
    if (next < now) next = now + options_.interval;
  }
}

#if defined(VRAMKIT_MONITOR_HTTP)

namespace {

// Whether binding host:port fails with EADDRINUSE, tried with a socket of our own (the server's
// errno is not reliable after its clean-up).
bool port_in_use(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res) != 0 || res == nullptr)
    return false;
  int fd = socket(res->ai_family, res->ai_socktype, res->ai_protocol);
  bool in_use = false;
  if (fd >= 0) {
    int yes = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    in_use = bind(fd, res->ai_addr, res->ai_addrlen) != 0 && errno == EADDRINUSE;
    close(fd);
  }
  freeaddrinfo(res);
  return in_use;
}

}  // namespace

int exporter::start() {
  history_.push(source_->take());
  ++samples_;
  auto& http = server_->http;
  // cpp-httplib sets SO_REUSEPORT by default, which would let a second server bind a port that
  // is in use; keep only SO_REUSEADDR so "port in use" is detected.
  http.set_socket_options([](int sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  // Without TCP_NODELAY a response written in two parts waits for the peer's delayed ACK (40 ms).
  http.set_tcp_nodelay(true);
  // One thread serves one connection while it is kept alive: a bounded pool, and connections that
  // close after a few requests, keep many concurrent scrapers from starving each other.
  http.new_task_queue = [] { return new httplib::ThreadPool(64); };
  http.set_keep_alive_max_count(20);
  http.set_keep_alive_timeout(1);
  http.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics(), exposition_content_type);
  });
  http.Get("/healthz", [this](const httplib::Request&, httplib::Response& res) {
    auto latest = history_.latest();
    auto age_ms = latest ? now_ms() - latest->timestamp_ms : -1;
    bool fresh = latest && age_ms <= 3 * options_.interval.count() + 1000;
    res.status = fresh ? 200 : 503;
    res.set_content(fresh ? "ok\n" : "stale: no sample for " + std::to_string(age_ms) + " ms\n",
                    "text/plain; charset=utf-8");
  });
  http.Get("/api/samples", [this](const httplib::Request& req, httplib::Response& res) {
    std::int64_t since = 0;
    if (req.has_param("since")) {
      try {
        since = std::stoll(req.get_param_value("since"));
      } catch (const std::exception&) {
        res.status = 400;
        res.set_content("since must be milliseconds since the epoch\n",
                        "text/plain; charset=utf-8");
        return;
      }
    }
    res.set_header("Cache-Control", "no-store");
    res.set_content(samples_json(since), "application/json");
  });
  auto serve_asset = [](const char* file, const char* type) {
    return [file, type](const httplib::Request&, httplib::Response& res) {
      for (const auto& a : web::assets) {
        if (a.name == file) {
          res.set_content(std::string(a.content), type);
          return;
        }
      }
      res.status = 404;
    };
  };
  http.Get("/", serve_asset("index.html", "text/html; charset=utf-8"));
  http.Get("/index.html", serve_asset("index.html", "text/html; charset=utf-8"));
  http.Get("/monitor.js", serve_asset("monitor.js", "text/javascript; charset=utf-8"));
  http.Get("/monitor.css", serve_asset("monitor.css", "text/css; charset=utf-8"));

  int port = options_.port;
  if (port == 0) {
    port = http.bind_to_any_port(options_.bind_address);
    if (port < 0)
      throw error("cannot listen on " + options_.bind_address + ": " + std::strerror(errno));
  } else if (!http.bind_to_port(options_.bind_address, port)) {
    throw error("cannot listen on " + options_.bind_address + ":" + std::to_string(port) + ": " +
                (port_in_use(options_.bind_address, port) ? "address already in use"
                                                          : "cannot bind that address"));
  }
  serve_thread_ = std::thread([this] { server_->http.listen_after_bind(); });
  // stop() only reaches a server that is running: wait for it so an early stop cannot hang.
  for (int i = 0; i < 2000 && !server_->http.is_running(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  sample_thread_ = std::thread([this] { sample_loop(); });
  return port;
}

void exporter::stop() noexcept {
  if (stopping_.exchange(true)) return;
  { std::lock_guard lock(wake_mutex_); }
  wake_.notify_all();
  if (sample_thread_.joinable()) sample_thread_.join();
  server_->http.stop();
  if (serve_thread_.joinable()) serve_thread_.join();
}

#else

int exporter::start() {
  throw error("built without cpp-httplib: vramkit serve is not available in this build");
}

void exporter::stop() noexcept {
  stopping_ = true;
  wake_.notify_all();
  if (sample_thread_.joinable()) sample_thread_.join();
}

#endif

}  // namespace vramkit::monitor

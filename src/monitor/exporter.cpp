// exporter: background sampler thread + http_server. Handlers render from the history ring and
// never sample. Without an HTTP server in the build start() reports it.
#include "vramkit/monitor/exporter.hpp"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "vramkit/core/error.hpp"
#include "vramkit/monitor/recording.hpp"
#include "vramkit_monitor_web_assets.hpp"

namespace vramkit::monitor {

bool exporter_built() noexcept { return http_server_built(); }

struct exporter::server {
  std::unique_ptr<http_server> http;
};

exporter::exporter(std::unique_ptr<sampler> source, exporter_options options)
    : source_(std::move(source)),
      options_(std::move(options)),
      history_(options_.history_samples),
      server_(std::make_unique<server>()) {}

exporter::~exporter() { stop(); }

std::string exporter::metrics() {
  std::shared_ptr<const std::string> body;
  {
    std::lock_guard lock(body_mutex_);
    body = body_;
  }
  if (!body) body = std::make_shared<const std::string>(render_sample_metrics(sample{}, 0));
  // A scrape copies the page rendered at the last sample and appends its own counter: no sample
  // copy and no formatting of the GPU and process families per request.
  std::string out;
  const std::string counter = render_scrape_counter(++scrapes_);
  out.reserve(body->size() + counter.size());
  out += *body;
  out += counter;
  return out;
}

void exporter::publish(sample s) {
  const std::uint64_t count = ++samples_;
  auto body = std::make_shared<const std::string>(render_sample_metrics(s, count));
  const std::int64_t taken_ms = s.timestamp_ms;
  history_.push(std::move(s));
  latest_sample_ms_ = taken_ms;
  std::lock_guard lock(body_mutex_);
  body_ = std::move(body);
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
    publish(source_->take());
    lock.lock();
    // Fixed rate, not fixed delay: a slow sample does not shift the schedule; a very slow one
    // skips ahead rather than bursting.
    next += options_.interval;
    auto now = std::chrono::steady_clock::now();
    if (next < now) next = now + options_.interval;
  }
}

namespace {

http_response text(int status, std::string body) {
  http_response r;
  r.status = status;
  r.body = std::move(body);
  return r;
}

}  // namespace

http_response exporter::handle(const http_request& req) {
  if (req.method != "GET" && req.method != "HEAD")
    return text(405, req.method + " is not served here (GET only)\n");
  if (req.path == "/metrics") {
    http_response r;
    r.content_type = exposition_content_type;
    r.body = metrics();
    return r;
  }
  if (req.path == "/healthz") {
    // The latest sample's time only: no copy of the sample, no lock shared with the sampler.
    const std::int64_t taken_ms = latest_sample_ms_;
    const std::int64_t age_ms = taken_ms >= 0 ? now_ms() - taken_ms : -1;
    const bool fresh = taken_ms >= 0 && age_ms <= 3 * options_.interval.count() + 1000;
    return fresh ? text(200, "ok\n")
                 : text(503, "stale: no sample for " + std::to_string(age_ms) + " ms\n");
  }
  if (req.path == "/api/samples") {
    std::int64_t since = 0;
    if (auto p = req.param("since")) {
      try {
        std::size_t used = 0;
        since = std::stoll(*p, &used);
        if (used != p->size()) throw std::invalid_argument("trailing characters");
      } catch (const std::exception&) {
        return text(400, "since must be milliseconds since the epoch\n");
      }
    }
    http_response r;
    r.content_type = "application/json";
    r.headers.emplace_back("Cache-Control", "no-store");
    r.body = samples_json(since);
    return r;
  }
  struct asset {
    const char* path;
    const char* file;
    const char* type;
  };
  static constexpr asset pages[] = {
      {"/", "index.html", "text/html; charset=utf-8"},
      {"/index.html", "index.html", "text/html; charset=utf-8"},
      {"/monitor.js", "monitor.js", "text/javascript; charset=utf-8"},
      {"/monitor.css", "monitor.css", "text/css; charset=utf-8"},
  };
  for (const auto& page : pages) {
    if (req.path != page.path) continue;
    for (const auto& a : web::assets) {
      if (a.name == page.file) {
        http_response r;
        r.content_type = page.type;
        r.body = std::string(a.content);
        return r;
      }
    }
  }
  return text(404, "no such page: " + req.path + " (try /metrics, /healthz, /api/samples, /)\n");
}

int exporter::start() {
  if (!http_server_built())
    throw error("built without libmicrohttpd: vramkit serve is not available in this build");
  publish(source_->take());
  http_server_options ho = options_.http;
  ho.bind_address = options_.bind_address;
  ho.port = options_.port;
  server_->http =
      std::make_unique<http_server>(ho, [this](const http_request& req) { return handle(req); });
  const int port = server_->http->start();
  sample_thread_ = std::thread([this] { sample_loop(); });
  return port;
}

void exporter::stop() noexcept {
  if (stopping_.exchange(true)) return;
  { std::lock_guard lock(wake_mutex_); }
  wake_.notify_all();
  if (sample_thread_.joinable()) sample_thread_.join();
  if (server_->http) server_->http->stop();
}

}  // namespace vramkit::monitor

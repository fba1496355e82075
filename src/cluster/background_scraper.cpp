// Background scraping of node exporters: a scheduling thread hands due nodes to a fixed pool of
// workers; requests read the last good sample.
#include "vramkit/cluster/background_scraper.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "vramkit/cluster/exporter_scraper.hpp"
#include "vramkit/cluster/prometheus_text.hpp"
#include "vramkit/core/error.hpp"

namespace vramkit::cluster {

exporter_scrape parse_exporter_scrape(const std::string& name, std::string_view text) {
  const std::vector<metric_sample> samples = parse_prometheus_text(text);
  exporter_scrape out;
  node_state state{name, gpus_from_metrics(samples)};
  if (state.gpus.empty()) throw invalid_input("the exporter reports no GPU metrics");
  out.state = std::make_shared<const node_state>(std::move(state));
  std::optional<std::int64_t> newest_ms;
  for (const metric_sample& s : samples) {
    if (s.name == "vramkit_exporter_last_sample_timestamp_seconds" && std::isfinite(s.value) &&
        s.value > 0) {
      out.sampled_at = std::chrono::system_clock::time_point(
          std::chrono::milliseconds(static_cast<std::int64_t>(std::llround(s.value * 1000.0))));
    } else if (s.name == "vramkit_gpu_process_memory_used_bytes") {
      if (const std::string* uid = s.label("pod_uid"); uid && !uid->empty()) out.pods.insert(*uid);
      const std::string* ns = s.label("namespace");
      const std::string* pod = s.label("pod");
      if (ns && pod && !pod->empty()) out.pods.insert(*ns + "/" + *pod);
    }
    if (s.timestamp_ms) newest_ms = std::max(newest_ms.value_or(*s.timestamp_ms), *s.timestamp_ms);
  }
  if (!out.sampled_at && newest_ms) {
    out.sampled_at = std::chrono::system_clock::time_point(std::chrono::milliseconds(*newest_ms));
  }
  return out;
}

background_scraper::background_scraper(std::map<std::string, std::string> node_urls,
                                       background_options options, fetch_function fetch,
                                       steady_function steady, wall_function wall)
    : options_(options),
      fetch_(fetch ? std::move(fetch) : fetch_function(http_get)),
      steady_(steady ? std::move(steady)
                     : steady_function([] { return std::chrono::steady_clock::now(); })),
      wall_(wall ? std::move(wall)
                 : wall_function([] { return std::chrono::system_clock::now(); })) {
  options_.max_parallel = std::max<std::size_t>(1, options_.max_parallel);
  for (auto& [name, url] : node_urls) nodes_[name].url = std::move(url);
}

background_scraper::~background_scraper() { stop(); }

void background_scraper::on_sample(sample_hook hook) {
  std::lock_guard lock(mutex_);
  hook_ = std::move(hook);
}

void background_scraper::start() {
  std::lock_guard lock(mutex_);
  if (running_) return;
  running_ = true;
  scheduler_ = std::thread([this] { scheduler_loop(); });
  for (std::size_t i = 0; i < options_.max_parallel; ++i) {
    workers_.emplace_back([this] { worker_loop(); });
  }
}

void background_scraper::stop() noexcept {
  {
    std::lock_guard lock(mutex_);
    if (!running_) return;
    running_ = false;
  }
  wake_.notify_all();
  if (scheduler_.joinable()) scheduler_.join();
  for (std::thread& t : workers_) t.join();
  workers_.clear();
  std::lock_guard lock(mutex_);
  for (const std::string& name : queue_) {
    if (auto it = nodes_.find(name); it != nodes_.end()) it->second.in_flight = false;
  }
  queue_.clear();
}

void background_scraper::scheduler_loop() {
  std::unique_lock lock(mutex_);
  while (running_) {
    const auto now = steady_();
    auto next = now + options_.interval;
    bool queued = false;
    for (auto& [name, e] : nodes_) {
      if (e.in_flight) continue;
      if (e.next_due <= now) {
        e.in_flight = true;
        queue_.push_back(name);
        queued = true;
      } else {
        next = std::min(next, e.next_due);
      }
    }
    if (queued) wake_.notify_all();
    // Wake at the next due time, but at least every 100 ms so that an injected clock or a changed
    // node map is noticed.
    const auto wait = std::clamp(std::chrono::duration_cast<std::chrono::milliseconds>(next - now),
                                 std::chrono::milliseconds(1), std::chrono::milliseconds(100));
    wake_.wait_for(lock, wait, [this] { return !running_; });
  }
}

void background_scraper::worker_loop() {
  std::unique_lock lock(mutex_);
  while (true) {
    wake_.wait(lock, [this] { return !running_ || !queue_.empty(); });
    if (!running_) return;
    const std::string name = std::move(queue_.front());
    queue_.pop_front();
    auto it = nodes_.find(name);
    if (it == nodes_.end()) continue;
    const std::string url = it->second.url;
    lock.unlock();
    scrape(name, url);
    lock.lock();
  }
}

void background_scraper::scrape(const std::string& name, const std::string& url) {
  const auto started = steady_();
  {
    std::lock_guard lock(mutex_);
    ++fetches_;
  }
  std::optional<exporter_scrape> parsed;
  std::string error;
  result<std::string> body = fetch_(url, options_.timeout);
  if (!body) {
    error = body.error().reason;
  } else {
    try {
      parsed = parse_exporter_scrape(name, *body);
    } catch (const std::exception& e) {
      error = fmt::format("{}: {}", url, e.what());
    }
  }
  sample_hook hook;
  std::set<std::string> pods;
  {
    std::lock_guard lock(mutex_);
    auto it = nodes_.find(name);
    if (it == nodes_.end() || it->second.url != url) return;  // removed or moved meanwhile
    node_entry& e = it->second;
    e.in_flight = false;
    // A failing exporter (a hung one holds a worker for the whole timeout) is retried less often,
    // up to 8 intervals apart, so that it cannot starve the scrapes of healthy nodes.
    e.failures = parsed ? 0 : std::min(e.failures + 1, 3U);
    e.next_due = started + options_.interval * (1U << e.failures);
    if (parsed) {
      pods = parsed->pods;
      e.good = std::move(parsed);
      e.good_at = started;
      e.last_error.clear();
      hook = hook_;
    } else {
      e.last_error = std::move(error);
    }
  }
  if (hook) hook(name, pods);
}

void background_scraper::scrape_all_now() {
  std::vector<std::pair<std::string, std::string>> todo;
  {
    std::lock_guard lock(mutex_);
    for (auto& [name, e] : nodes_) {
      if (e.in_flight) continue;
      e.in_flight = true;
      todo.emplace_back(name, e.url);
    }
  }
  for (const auto& [name, url] : todo) scrape(name, url);
}

void background_scraper::set_nodes(std::map<std::string, std::string> node_urls) {
  {
    std::lock_guard lock(mutex_);
    for (auto it = nodes_.begin(); it != nodes_.end();) {
      auto n = node_urls.find(it->first);
      if (n == node_urls.end()) {
        it = nodes_.erase(it);
        continue;
      }
      if (it->second.url != n->second) {
        it->second = node_entry{};
        it->second.url = n->second;
      }
      node_urls.erase(n);
      ++it;
    }
    for (auto& [name, url] : node_urls) nodes_[name].url = std::move(url);
  }
  wake_.notify_all();
}

node_states background_scraper::states(const std::vector<std::string>& names) const {
  node_states out;
  out.reserve(names.size());
  const auto now = steady_();
  const auto wall = wall_();
  const auto seconds = [](auto d) {
    return std::chrono::duration_cast<std::chrono::duration<double>>(d).count();
  };
  std::lock_guard lock(mutex_);
  for (const std::string& name : names) {
    auto it = nodes_.find(name);
    if (it == nodes_.end()) {
      out.emplace(name, unavailable{unavailable_kind::not_supported,
                                    fmt::format("node {} has no exporter in the node map", name)});
      continue;
    }
    const node_entry& e = it->second;
    const std::string last_error =
        e.last_error.empty() ? "" : " (last error: " + e.last_error + ")";
    if (!e.good) {
      out.emplace(name, unavailable{unavailable_kind::failed,
                                    fmt::format("no good scrape of {} yet{}", e.url, last_error)});
    } else if (now - e.good_at > options_.max_age) {
      out.emplace(name, unavailable{unavailable_kind::failed,
                                    fmt::format("last good scrape of {} is {:.1f} s old{}", e.url,
                                                seconds(now - e.good_at), last_error)});
    } else if (e.good->sampled_at && wall - *e.good->sampled_at > options_.max_age) {
      out.emplace(name, unavailable{unavailable_kind::failed,
                                    fmt::format("the exporter's sample is {:.1f} s old (stale)",
                                                seconds(wall - *e.good->sampled_at))});
    } else {
      out.emplace(name, e.good->state);
    }
  }
  return out;
}

std::size_t background_scraper::fetch_count() const {
  std::lock_guard lock(mutex_);
  return fetches_;
}

}  // namespace vramkit::cluster

// Scrapes node exporters over HTTP, in parallel, with a per-node cache.
#include "vramkit/cluster/exporter_scraper.hpp"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <sstream>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "vramkit/cluster/prometheus_text.hpp"
#include "vramkit/config.hpp"
#include "vramkit/core/error.hpp"

#if VRAMKIT_HAVE_HTTPLIB
#include <httplib.h>
#endif

namespace vramkit::cluster {
namespace {

std::string with_default_path(std::string url) {
  const std::size_t scheme = url.find("://");
  const std::size_t host_start = scheme == std::string::npos ? 0 : scheme + 3;
  if (url.find('/', host_start) == std::string::npos) url += "/metrics";
  return url;
}

}  // namespace

result<std::string> http_get(const std::string& url, std::chrono::milliseconds timeout) {
#if VRAMKIT_HAVE_HTTPLIB
  const std::size_t scheme_end = url.find("://");
  if (scheme_end == std::string::npos) {
    return unavailable{unavailable_kind::failed, fmt::format("{}: not an http:// URL", url)};
  }
  const std::size_t path_start = url.find('/', scheme_end + 3);
  const std::string origin = url.substr(0, path_start);
  const std::string target = path_start == std::string::npos ? "/" : url.substr(path_start);
  httplib::Client client(origin);
  client.set_connection_timeout(timeout);
  client.set_read_timeout(timeout);
  client.set_write_timeout(timeout);
  auto res = client.Get(target);
  if (!res) {
    return unavailable{unavailable_kind::failed,
                       fmt::format("{}: {}", url, httplib::to_string(res.error()))};
  }
  if (res->status != 200) {
    return unavailable{unavailable_kind::failed, fmt::format("{}: HTTP {}", url, res->status)};
  }
  return std::move(res->body);
#else
  return unavailable{unavailable_kind::not_built,
                     fmt::format("{}: this vramkit was built without cpp-httplib", url)};
#endif
}

std::map<std::string, std::string> parse_node_map(std::string_view text, std::string_view origin) {
  std::map<std::string, std::string> out;
  std::size_t first = text.find_first_not_of(" \t\r\n");
  if (first != std::string_view::npos && text[first] == '{') {
    nlohmann::json doc;
    try {
      doc = nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception& e) {
      throw invalid_input(fmt::format("{}: not valid JSON ({})", origin, e.what()));
    }
    for (auto it = doc.begin(); it != doc.end(); ++it) {
      if (!it->is_string() || it->get<std::string>().empty()) {
        throw invalid_input(
            fmt::format("{}: the URL of node '{}' must be a non-empty string", origin, it.key()));
      }
      out[it.key()] = with_default_path(it->get<std::string>());
    }
  } else {
    std::istringstream in{std::string(text)};
    std::string line;
    std::size_t number = 0;
    while (std::getline(in, line)) {
      ++number;
      if (const std::size_t hash = line.find('#'); hash != std::string::npos) line.resize(hash);
      std::istringstream words(line);
      std::string name, url, extra;
      if (!(words >> name)) continue;
      if (!(words >> url) || (words >> extra)) {
        throw invalid_input(fmt::format("{} line {}: expected 'NODE URL'", origin, number));
      }
      out[name] = with_default_path(url);
    }
  }
  for (const auto& [name, url] : out) {
    if (url.rfind("http://", 0) != 0 && url.rfind("https://", 0) != 0) {
      throw invalid_input(
          fmt::format("{}: the URL of node '{}' must start with http:// ({})", origin, name, url));
    }
  }
  if (out.empty()) throw invalid_input(fmt::format("{}: names no nodes", origin));
  return out;
}

exporter_scraper::exporter_scraper(std::map<std::string, std::string> node_urls,
                                   scraper_options options, fetch_function fetch,
                                   clock_function now)
    : urls_(std::move(node_urls)),
      options_(options),
      fetch_(fetch ? std::move(fetch) : fetch_function(http_get)),
      now_(now ? std::move(now) : clock_function([] { return std::chrono::steady_clock::now(); })) {
  options_.max_parallel = std::max<std::size_t>(1, options_.max_parallel);
}

std::size_t exporter_scraper::fetch_count() const {
  std::lock_guard lock(mutex_);
  return fetches_;
}

node_states exporter_scraper::states(const std::vector<std::string>& names) {
  node_states out;
  out.reserve(names.size());
  std::vector<std::string> stale;
  const auto now = now_();
  {
    std::lock_guard lock(mutex_);
    for (const std::string& name : names) {
      if (out.count(name) != 0) continue;
      auto it = cache_.find(name);
      if (it != cache_.end() && now - it->second.at < options_.ttl) {
        out.emplace(name, it->second.state);
      } else if (urls_.count(name) == 0) {
        out.emplace(name,
                    unavailable{unavailable_kind::not_supported,
                                fmt::format("node {} has no exporter URL in the node map", name)});
      } else if (std::find(stale.begin(), stale.end(), name) == stale.end()) {
        stale.push_back(name);
      }
    }
  }
  if (stale.empty()) return out;

  // Scrape outside the lock: a slow exporter must not hold up requests for other nodes.
  std::vector<std::optional<result<node_state_ptr>>> fetched(stale.size());
  std::atomic<std::size_t> next{0};
  auto worker = [&] {
    for (std::size_t i = next++; i < stale.size(); i = next++) {
      const std::string& name = stale[i];
      result<std::string> body = fetch_(urls_.at(name), options_.timeout);
      if (!body) {
        fetched[i].emplace(body.error());
        continue;
      }
      try {
        node_state state{name, gpus_from_metrics(parse_prometheus_text(*body))};
        if (state.gpus.empty()) {
          fetched[i].emplace(unavailable{unavailable_kind::no_device,
                                         fmt::format("{} reports no GPU metrics", urls_.at(name))});
        } else {
          fetched[i].emplace(std::make_shared<const node_state>(std::move(state)));
        }
      } catch (const std::exception& e) {
        fetched[i].emplace(
            unavailable{unavailable_kind::failed, fmt::format("{}: {}", urls_.at(name), e.what())});
      }
    }
  };
  const std::size_t threads = std::min(options_.max_parallel, stale.size());
  std::vector<std::thread> pool;
  pool.reserve(threads > 0 ? threads - 1 : 0);
  for (std::size_t t = 1; t < threads; ++t) pool.emplace_back(worker);
  worker();
  for (std::thread& t : pool) t.join();

  std::lock_guard lock(mutex_);
  fetches_ += stale.size();
  const auto at = now_();
  for (std::size_t i = 0; i < stale.size(); ++i) {
    cache_.insert_or_assign(stale[i], entry{at, *fetched[i]});
    out.emplace(stale[i], std::move(*fetched[i]));
  }
  return out;
}

}  // namespace vramkit::cluster

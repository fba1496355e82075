// Live node states from the nodes' `vramkit serve` exporters: concurrent HTTP scrapes with a
// timeout, cached per node for a short time-to-live. Thread-safe: one scraper serves every request
// of the extender at once.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "vramkit/cluster/extender.hpp"
#include "vramkit/core/result.hpp"

namespace vramkit::cluster {

/// GETs `url` (http://host:port/path) and returns the body of a 200 answer; any other outcome is an
/// `unavailable` with a one-line reason. Without cpp-httplib in the build it answers not_built.
[[nodiscard]] result<std::string> http_get(const std::string& url,
                                           std::chrono::milliseconds timeout);

/// Reads a node map: JSON {"node-a": "http://10.0.0.5:9400", ...} or lines "node-a URL" (blank
/// lines and # comments skipped). A URL without a path gets /metrics. Throws invalid_input naming
/// `origin` and the line on bad input.
[[nodiscard]] std::map<std::string, std::string> parse_node_map(std::string_view text,
                                                                std::string_view origin);

struct scraper_options {
  std::chrono::milliseconds ttl{2000};      ///< how long a scrape stays fresh
  std::chrono::milliseconds timeout{1000};  ///< per scrape (connect + read)
  std::size_t max_parallel = 32;            ///< scrapes in flight at once
};

class exporter_scraper {
 public:
  using fetch_function =
      std::function<result<std::string>(const std::string& url, std::chrono::milliseconds timeout)>;
  using clock_function = std::function<std::chrono::steady_clock::time_point()>;

  /// `fetch` and `now` default to http_get and the steady clock; tests inject their own.
  exporter_scraper(std::map<std::string, std::string> node_urls, scraper_options options,
                   fetch_function fetch = {}, clock_function now = {});

  /// The states of `names`: fresh cache entries as they are, the rest scraped in parallel. A node
  /// without a URL, an unreachable exporter or unreadable metrics yields an `unavailable` reason.
  [[nodiscard]] node_states states(const std::vector<std::string>& names);

  /// Number of HTTP fetches made so far (for tests and the benchmark).
  [[nodiscard]] std::size_t fetch_count() const;

 private:
  struct entry {
    std::chrono::steady_clock::time_point at;
    result<node_state_ptr> state;
  };

  std::map<std::string, std::string> urls_;
  scraper_options options_;
  fetch_function fetch_;
  clock_function now_;
  mutable std::mutex mutex_;
  std::unordered_map<std::string, entry> cache_;
  std::size_t fetches_ = 0;
};

}  // namespace vramkit::cluster

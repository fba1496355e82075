// Node exporters scraped off the request path: worker threads scrape every node at an interval
// and keep its last good sample; a request reads those samples and never waits on the network.
// A sample older than `max_age` by its own timestamp (the exporter's last-sample time) or by when
// it was scraped counts as unknown. Thread-safe.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "vramkit/cluster/extender.hpp"
#include "vramkit/core/result.hpp"

namespace vramkit::cluster {

/// What one scrape of a vramkit exporter says about its node.
struct exporter_scrape {
  node_state_ptr state;
  /// When the exporter took the sample (vramkit_exporter_last_sample_timestamp_seconds, else the
  /// newest sample timestamp in the text); nullopt when the text gives neither.
  std::optional<std::chrono::system_clock::time_point> sampled_at;
  /// Pods whose processes the exporter shows: pod_uid labels and namespace/pod label pairs of
  /// vramkit_gpu_process_memory_used_bytes.
  std::set<std::string> pods;
};

/// Reads one exporter's /metrics text for node `name`; throws invalid_input on malformed text or
/// when it names no GPU.
[[nodiscard]] exporter_scrape parse_exporter_scrape(const std::string& name, std::string_view text);

struct background_options {
  std::chrono::milliseconds interval{2000};  ///< between the starts of two scrapes of one node
  std::chrono::milliseconds timeout{1000};   ///< per scrape (connect + read)
  std::chrono::milliseconds max_age{10000};  ///< older samples are unknown
  std::size_t max_parallel = 32;             ///< scrapes in flight at once
};

class background_scraper {
 public:
  using fetch_function =
      std::function<result<std::string>(const std::string& url, std::chrono::milliseconds timeout)>;
  using steady_function = std::function<std::chrono::steady_clock::time_point()>;
  using wall_function = std::function<std::chrono::system_clock::time_point()>;
  /// Called after each good scrape with the node and the pods it shows.
  using sample_hook = std::function<void(const std::string& node, const std::set<std::string>&)>;

  /// `fetch` defaults to http_get, the clocks to steady_clock and system_clock.
  background_scraper(std::map<std::string, std::string> node_urls, background_options options,
                     fetch_function fetch = {}, steady_function steady = {},
                     wall_function wall = {});
  ~background_scraper();
  background_scraper(const background_scraper&) = delete;
  background_scraper& operator=(const background_scraper&) = delete;

  /// Sets the hook; call before start().
  void on_sample(sample_hook hook);

  /// Starts the scheduling thread and the workers; idempotent.
  void start();

  /// Stops and joins them; scrapes in flight finish first (bounded by the timeout).
  void stop() noexcept;

  /// Scrapes every node not already being scraped, on the calling thread, one after another (tests
  /// and a first fill before serving).
  void scrape_all_now();

  /// Replaces the node map (node discovery): new nodes are scraped at once, removed ones forgotten.
  void set_nodes(std::map<std::string, std::string> node_urls);

  /// The last good, fresh sample of each named node, or why there is none; never blocks on a
  /// scrape.
  [[nodiscard]] node_states states(const std::vector<std::string>& names) const;

  /// HTTP fetches started so far.
  [[nodiscard]] std::size_t fetch_count() const;

 private:
  struct node_entry {
    std::string url;
    bool in_flight = false;
    std::chrono::steady_clock::time_point next_due{};
    std::optional<exporter_scrape> good;
    std::chrono::steady_clock::time_point good_at{};
    std::string last_error;
    unsigned failures = 0;  ///< consecutive failed scrapes, for the back-off
  };

  void scrape(const std::string& name, const std::string& url);
  void scheduler_loop();
  void worker_loop();

  background_options options_;
  fetch_function fetch_;
  steady_function steady_;
  wall_function wall_;
  sample_hook hook_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::map<std::string, node_entry> nodes_;
  std::deque<std::string> queue_;
  bool running_ = false;
  std::size_t fetches_ = 0;
  std::thread scheduler_;
  std::vector<std::thread> workers_;
};

}  // namespace vramkit::cluster

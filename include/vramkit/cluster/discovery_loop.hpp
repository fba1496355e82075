// discovery_loop: keeps the extender's node map current by listing the exporter pods again and
// again on its own thread: quickly until a list succeeds, then at a slower period. Thread-safe:
// refresh, start and stop may be called from any thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include "vramkit/core/result.hpp"

namespace vramkit::cluster {

/// When the loop lists again: `retry` after a failed list, `period` after a good one.
struct discovery_schedule {
  std::chrono::milliseconds retry{std::chrono::seconds(5)};
  std::chrono::milliseconds period{std::chrono::seconds(30)};
};

class discovery_loop {
 public:
  /// node name -> exporter URL, or why the list failed (discover_exporters with its arguments).
  using list_function = std::function<result<std::map<std::string, std::string>>()>;
  /// Receives each node map listed (background_scraper::set_nodes).
  using nodes_function = std::function<void(std::map<std::string, std::string>)>;
  /// Told the reason of each failed list on the loop's thread (a log line).
  using failure_function = std::function<void(const std::string& reason)>;

  discovery_loop(list_function list, nodes_function set_nodes, failure_function on_failure,
                 discovery_schedule schedule = {});
  /// Stops the thread (stop()).
  ~discovery_loop();
  discovery_loop(const discovery_loop&) = delete;
  discovery_loop& operator=(const discovery_loop&) = delete;

  /// Lists once on the calling thread and hands a good map to set_nodes; returns the node count
  /// or the reason the list failed (on_failure is not called).
  result<std::size_t> refresh();

  /// Starts the thread; its first wait is `period` when `listed` (a refresh succeeded), else
  /// `retry`. Call at most once.
  void start(bool listed);

  /// Wakes and joins the thread; returns at once when it was never started. Idempotent.
  void stop();

 private:
  void run(bool listed);

  list_function list_;
  nodes_function set_nodes_;
  failure_function on_failure_;
  discovery_schedule schedule_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace vramkit::cluster

// discovery_loop: a synchronous refresh, the thread listing again after failures and successes,
// and a prompt stop however long the periods are.
#include "vramkit/cluster/discovery_loop.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace vramkit::cluster {
namespace {

using node_map = std::map<std::string, std::string>;

// A scripted API: answers its lists in order (the last one again once they run out) and lets a
// test wait until a number of lists were made.
class scripted_lists {
 public:
  explicit scripted_lists(std::vector<result<node_map>> answers) : answers_(std::move(answers)) {}

  result<node_map> list() {
    std::lock_guard lock(mutex_);
    const std::size_t i = std::min(calls_, answers_.size() - 1);
    ++calls_;
    changed_.notify_all();
    return answers_[i];
  }
  void set_nodes(node_map nodes) {
    std::lock_guard lock(mutex_);
    maps_.push_back(std::move(nodes));
  }
  void failed(const std::string& reason) {
    std::lock_guard lock(mutex_);
    failures_.push_back(reason);
  }
  /// True once `n` lists were made; false after 10 s (a hung loop fails the test, never hangs it).
  bool wait_for_calls(std::size_t n) {
    std::unique_lock lock(mutex_);
    return changed_.wait_for(lock, std::chrono::seconds(10), [&] { return calls_ >= n; });
  }
  std::size_t calls() {
    std::lock_guard lock(mutex_);
    return calls_;
  }
  std::vector<node_map> maps() {
    std::lock_guard lock(mutex_);
    return maps_;
  }
  std::vector<std::string> failures() {
    std::lock_guard lock(mutex_);
    return failures_;
  }

  discovery_loop make_loop(discovery_schedule schedule) {
    return {[this] { return list(); }, [this](node_map nodes) { set_nodes(std::move(nodes)); },
            [this](const std::string& reason) { failed(reason); }, schedule};
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<result<node_map>> answers_;
  std::size_t calls_ = 0;
  std::vector<node_map> maps_;
  std::vector<std::string> failures_;
};

const node_map two_nodes{{"a", "http://10.0.0.1:9410/metrics"},
                         {"b", "http://10.0.0.2:9410/metrics"}};

unavailable api_down() { return {unavailable_kind::failed, "connection refused"}; }

TEST(DiscoveryLoop, RefreshHandsAGoodListOnAndCountsItsNodes) {
  scripted_lists api({two_nodes});
  auto loop = api.make_loop({});
  const auto n = loop.refresh();
  ASSERT_TRUE(n.has_value());
  EXPECT_EQ(*n, 2u);
  ASSERT_EQ(api.maps().size(), 1u);
  EXPECT_EQ(api.maps()[0], two_nodes);
}

TEST(DiscoveryLoop, RefreshReturnsAFailureWithoutTouchingTheNodes) {
  scripted_lists api({api_down()});
  auto loop = api.make_loop({});
  const auto n = loop.refresh();
  ASSERT_FALSE(n.has_value());
  EXPECT_EQ(n.error().reason, "connection refused");
  EXPECT_TRUE(api.maps().empty());
  EXPECT_TRUE(api.failures().empty()) << "refresh reports to its caller, not to on_failure";
}

TEST(DiscoveryLoop, RetriesAfterFailuresThenKeepsListing) {
  scripted_lists api({api_down(), api_down(), two_nodes});
  // The retry wait is 1 ms and the period an hour: three lists show that the loop retried after
  // each failure, and no fourth that it then waited the period.
  auto loop = api.make_loop({std::chrono::milliseconds(1), std::chrono::hours(1)});
  loop.start(false);
  ASSERT_TRUE(api.wait_for_calls(3));
  loop.stop();
  EXPECT_EQ(api.failures(), (std::vector<std::string>{"connection refused", "connection refused"}));
  ASSERT_EQ(api.maps().size(), 1u);
  EXPECT_EQ(api.calls(), 3u) << "after a good list the loop waits the (hour-long) period";
}

TEST(DiscoveryLoop, AfterAGoodFirstListTheLoopWaitsThePeriod) {
  scripted_lists api({two_nodes});
  auto loop = api.make_loop({std::chrono::milliseconds(1), std::chrono::milliseconds(1)});
  loop.start(true);
  ASSERT_TRUE(api.wait_for_calls(3));
  loop.stop();
  EXPECT_GE(api.maps().size(), 3u);
  EXPECT_TRUE(api.failures().empty());
}

TEST(DiscoveryLoop, StopWakesTheThreadAtOnce) {
  scripted_lists api({two_nodes});
  auto loop = api.make_loop({std::chrono::hours(1), std::chrono::hours(1)});
  loop.start(true);
  const auto t0 = std::chrono::steady_clock::now();
  loop.stop();
  loop.stop();  // idempotent
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  EXPECT_EQ(api.calls(), 0u);
}

TEST(DiscoveryLoop, StopWithoutStartReturns) {
  scripted_lists api({two_nodes});
  auto loop = api.make_loop({});
  loop.stop();
  EXPECT_EQ(api.calls(), 0u);
}

}  // namespace
}  // namespace vramkit::cluster

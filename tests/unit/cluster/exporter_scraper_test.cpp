// The exporter scraper: node map parsing, caching with a TTL (injected clock), parallel fetches,
// and failures reported per node.
#include "vramkit/cluster/exporter_scraper.hpp"

#include <atomic>
#include <thread>

#include <gtest/gtest.h>

#include "vramkit/core/error.hpp"
#include "vramkit/core/units.hpp"

namespace vramkit::cluster {
namespace {

using namespace std::chrono_literals;

std::string metrics(std::uint64_t total, std::uint64_t used) {
  return "vramkit_gpu_memory_total_bytes{gpu=\"0\"} " + std::to_string(total) + "\n" +
         "vramkit_gpu_memory_used_bytes{gpu=\"0\"} " + std::to_string(used) + "\n";
}

TEST(NodeMap, ReadsJsonAndLines) {
  const auto j = parse_node_map(
      R"({"a": "http://10.0.0.1:9400", "b": "http://10.0.0.2:9400/custom"})", "m.json");
  EXPECT_EQ(j.at("a"), "http://10.0.0.1:9400/metrics");
  EXPECT_EQ(j.at("b"), "http://10.0.0.2:9400/custom");
  const auto l = parse_node_map("# comment\n\na http://h:1  # trailing\nb http://h:2/m\n", "m.txt");
  EXPECT_EQ(l.size(), 2u);
  EXPECT_EQ(l.at("a"), "http://h:1/metrics");
  EXPECT_EQ(l.at("b"), "http://h:2/m");
}

TEST(NodeMap, RejectsBadMaps) {
  EXPECT_THROW((void)parse_node_map("a\n", "m"), invalid_input);
  EXPECT_THROW((void)parse_node_map("a http://x b\n", "m"), invalid_input);
  EXPECT_THROW((void)parse_node_map("a ftp://x\n", "m"), invalid_input);
  EXPECT_THROW((void)parse_node_map(R"({"a": 5})", "m"), invalid_input);
  EXPECT_THROW((void)parse_node_map("{", "m"), invalid_input);
  EXPECT_THROW((void)parse_node_map("# nothing\n", "m"), invalid_input);
}

struct fake_clock {
  std::chrono::steady_clock::time_point now{};
  exporter_scraper::clock_function fn() {
    return [this] { return now; };
  }
};

TEST(ExporterScraper, CachesForTheTtlThenScrapesAgain) {
  fake_clock clock;
  std::atomic<int> fetches{0};
  std::uint64_t used = 10 * GiB;
  exporter_scraper s(
      {{"a", "http://a/metrics"}}, {2000ms, 100ms, 4},
      [&](const std::string& url, std::chrono::milliseconds) -> result<std::string> {
        ++fetches;
        return metrics(80 * GiB, used);
      },
      clock.fn());
  auto first = s.states({"a"});
  ASSERT_TRUE(first.at("a"));
  EXPECT_EQ((*first.at("a"))->gpus.at(0).free_bytes, 70 * GiB);
  used = 50 * GiB;
  clock.now += 1999ms;
  EXPECT_EQ((*s.states({"a"}).at("a"))->gpus.at(0).free_bytes, 70 * GiB);  // still cached
  EXPECT_EQ(fetches.load(), 1);
  clock.now += 1ms;
  EXPECT_EQ((*s.states({"a"}).at("a"))->gpus.at(0).free_bytes, 30 * GiB);
  EXPECT_EQ(fetches.load(), 2);
  EXPECT_EQ(s.fetch_count(), 2u);
}

TEST(ExporterScraper, ReportsEachFailureWithItsReason) {
  exporter_scraper s({{"down", "http://down/metrics"},
                      {"junk", "http://junk/metrics"},
                      {"empty", "http://empty/metrics"},
                      {"ok", "http://ok/metrics"}},
                     {},
                     [](const std::string& url, std::chrono::milliseconds) -> result<std::string> {
                       if (url == "http://down/metrics")
                         return unavailable{unavailable_kind::failed, "connection refused"};
                       if (url == "http://junk/metrics") return std::string("not { metrics");
                       if (url == "http://empty/metrics") return std::string("# nothing here\n");
                       return metrics(GiB, 0);
                     });
  auto st = s.states({"down", "junk", "empty", "ok", "unknown", "ok"});
  EXPECT_EQ(st.size(), 5u);
  EXPECT_EQ(st.at("down").error().reason, "connection refused");
  EXPECT_NE(st.at("junk").error().reason.find("metrics line 1"), std::string::npos);
  EXPECT_NE(st.at("empty").error().reason.find("no GPU metrics"), std::string::npos);
  EXPECT_NE(st.at("unknown").error().reason.find("no exporter URL"), std::string::npos);
  EXPECT_TRUE(st.at("ok"));
  EXPECT_EQ(s.fetch_count(), 4u);  // "ok" asked twice, fetched once
}

TEST(ExporterScraper, ScrapesNodesInParallel) {
  // Each fetch waits until 4 fetches are in flight at once; done serially this would never finish,
  // so the deadline inside turns a serial scraper into a failure instead of a hang.
  std::map<std::string, std::string> urls;
  for (int i = 0; i < 4; ++i)
    urls["n" + std::to_string(i)] = "http://n" + std::to_string(i) + "/metrics";
  std::atomic<int> in_flight{0};
  std::atomic<int> peak{0};
  exporter_scraper s(urls, {2000ms, 100ms, 4},
                     [&](const std::string&, std::chrono::milliseconds) -> result<std::string> {
                       const int now = ++in_flight;
                       peak = std::max(peak.load(), now);
                       const auto deadline = std::chrono::steady_clock::now() + 5s;
                       while (peak.load() < 4 && std::chrono::steady_clock::now() < deadline)
                         std::this_thread::yield();
                       --in_flight;
                       return metrics(GiB, 0);
                     });
  auto st = s.states({"n0", "n1", "n2", "n3"});
  EXPECT_EQ(peak.load(), 4);
  for (const auto& [name, state] : st) EXPECT_TRUE(state) << name;
}

TEST(HttpGet, UnreachableServerIsAValueNotAThrow) {
  // Port 1 on loopback: nothing listens there in a test environment.
  const auto r = http_get("http://127.0.0.1:1/metrics", 200ms);
  EXPECT_FALSE(r);
  EXPECT_FALSE(r.error().reason.empty());
}

}  // namespace
}  // namespace vramkit::cluster

// Reservations (used = max(observed, baseline + reserved), TTL, confirmation by the exporter), the
// bind verb (fit re-checked, GPU chosen, idempotent, released on a failed Binding) and the
// background scraper (last good sample, staleness by the sample's own timestamp, back-off).
#include <atomic>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "vramkit/cluster/background_scraper.hpp"
#include "vramkit/cluster/extender_bind.hpp"
#include "vramkit/cluster/reservation_table.hpp"
#include "vramkit/core/units.hpp"

namespace vramkit::cluster {
namespace {

using namespace std::chrono_literals;
using json = nlohmann::json;

node_state node(const std::string& name, std::vector<std::uint64_t> used, std::uint64_t total) {
  node_state n{name, {}};
  for (std::size_t i = 0; i < used.size(); ++i) {
    gpu_state g;
    g.index = static_cast<int>(i);
    g.uuid = name + "-gpu" + std::to_string(i);
    g.total_bytes = total;
    g.used_bytes = used[i];
    g.free_bytes = derived_free_bytes(total, used[i]);
    n.gpus.push_back(g);
  }
  return n;
}

struct fake_steady {
  std::chrono::steady_clock::time_point now{};
  reservation_table::clock_function fn() {
    return [this] { return now; };
  }
};

TEST(ReservationTable, CountsUsedAsMaxOfObservedAndBaselinePlusReserved) {
  fake_steady clock;
  reservation_table t(60s, clock.fn());
  const node_state before = node("n", {10 * GiB, 0}, 80 * GiB);
  t.add({"u1", "ns/a", "n", 0, 30 * GiB, {}, false}, before);
  t.add({"u2", "ns/b", "n", 0, 20 * GiB, {}, false}, before);
  // Not started yet: 10 + 30 + 20.
  EXPECT_EQ(t.effective(before).gpus[0].used_bytes, 60 * GiB);
  EXPECT_EQ(t.effective(before).gpus[0].free_bytes, 20 * GiB);
  EXPECT_EQ(t.effective(before).gpus[1].used_bytes, 0u);
  // One pod started and uses its 30 GiB: still 60, not 90 (no double count).
  EXPECT_EQ(t.effective(node("n", {40 * GiB, 0}, 80 * GiB)).gpus[0].used_bytes, 60 * GiB);
  // Observed above the reservations wins.
  EXPECT_EQ(t.effective(node("n", {75 * GiB, 0}, 80 * GiB)).gpus[0].used_bytes, 75 * GiB);
  // Reservations are per node name.
  EXPECT_EQ(t.effective(node("m", {10 * GiB, 0}, 80 * GiB)).gpus[0].used_bytes, 10 * GiB);
}

TEST(ReservationTable, ExpiresUnconfirmedAfterTtlAndReleases) {
  fake_steady clock;
  reservation_table t(60s, clock.fn());
  const node_state before = node("n", {0}, 80 * GiB);
  t.add({"u1", "ns/a", "n", 0, 30 * GiB, {}, false}, before);
  clock.now += 30s;
  t.add({"u2", "ns/b", "n", 0, 10 * GiB, {}, false}, before);
  clock.now += 31s;
  EXPECT_EQ(t.effective(before).gpus[0].used_bytes, 10 * GiB);
  EXPECT_FALSE(t.find("u1"));
  EXPECT_TRUE(t.release("u2"));
  EXPECT_FALSE(t.release("u2"));
  EXPECT_EQ(t.effective(before).gpus[0].used_bytes, 0u);
  EXPECT_TRUE(t.list().empty());
}

TEST(ReservationTable, DropsAGpusHoldOnlyOnceEveryPodOnItIsSeen) {
  fake_steady clock;
  reservation_table t(60s, clock.fn());
  const node_state before = node("n", {0, 0}, 80 * GiB);
  t.add({"u1", "ns/a", "n", 0, 30 * GiB, {}, false}, before);
  t.add({"u2", "ns/b", "n", 0, 20 * GiB, {}, false}, before);
  t.add({"u3", "ns/c", "n", 1, 5 * GiB, {}, false}, before);
  // u1 shows in the exporter (30 GiB used); u2 does not yet: 50 GiB must still be counted.
  t.confirm("n", {"u1"});
  EXPECT_EQ(t.effective(node("n", {30 * GiB, 0}, 80 * GiB)).gpus[0].used_bytes, 50 * GiB);
  // u2 seen by namespace/name; the figure now covers both, so the hold goes.
  t.confirm("n", {"ns/b"});
  EXPECT_EQ(t.effective(node("n", {48 * GiB, 0}, 80 * GiB)).gpus[0].used_bytes, 48 * GiB);
  EXPECT_FALSE(t.find("u1"));
  EXPECT_TRUE(t.find("u3"));
  // Another node's sighting confirms nothing here.
  t.confirm("m", {"u3"});
  EXPECT_TRUE(t.find("u3"));
}

std::string filter_body(const std::string& uid, const std::string& quantity,
                        std::vector<std::string> nodes) {
  json pod = {
      {"metadata", {{"name", "p-" + uid}, {"namespace", "ns"}, {"uid", uid}}},
      {"spec",
       {{"containers",
         {{{"name", "c"}, {"resources", {{"limits", {{"vramkit.io/gpu-memory", quantity}}}}}}}}}}};
  return json{{"Pod", pod}, {"NodeNames", nodes}}.dump();
}

std::string bind_body(const std::string& uid, const std::string& node) {
  return json{{"PodName", "p-" + uid}, {"PodNamespace", "ns"}, {"PodUID", uid}, {"Node", node}}
      .dump();
}

struct bind_fixture {
  std::map<std::string, node_state> nodes;
  std::shared_ptr<reservation_table> table = std::make_shared<reservation_table>();
  std::vector<bind_decision> written;
  std::string fail_next;
  std::unique_ptr<bind_service> service;
  extender_config config;

  bind_fixture() {
    node_lookup live = [this](const std::vector<std::string>& names) {
      node_states out;
      for (const auto& n : names) {
        if (auto it = nodes.find(n); it != nodes.end())
          out.emplace(n, std::make_shared<const node_state>(it->second));
        else
          out.emplace(n, unavailable{unavailable_kind::failed, "unreachable"});
      }
      return out;
    };
    service = std::make_unique<bind_service>(live, table, config, [this](const bind_decision& d) {
      if (!fail_next.empty()) return std::exchange(fail_next, "");
      written.push_back(d);
      return std::string();
    });
    config.on_request = [this](const std::string& uid, std::uint64_t bytes) {
      service->remember(uid, bytes);
    };
  }

  std::string filter(const std::string& uid, const std::string& q, std::vector<std::string> ns) {
    const auto r = extender_filter(filter_body(uid, q, ns), service->effective_lookup(), config);
    EXPECT_EQ(r.status, 200);
    return r.body;
  }
  std::string bind(const std::string& uid, const std::string& n) {
    const auto r = service->bind(bind_body(uid, n));
    EXPECT_EQ(r.status, 200) << r.body;
    return json::parse(r.body).at("Error").get<std::string>();
  }
};

TEST(BindService, ReservesTheChosenGpuSoTheNextFilterSeesIt) {
  bind_fixture f;
  f.nodes["a"] = node("a", {0, 50 * GiB}, 80 * GiB);
  f.filter("u1", "40Gi", {"a"});
  EXPECT_EQ(f.bind("u1", "a"), "");
  ASSERT_EQ(f.written.size(), 1u);
  // Pack: GPU 0 (80 free) is the only one holding 40 GiB.
  EXPECT_EQ(f.written[0].gpu_index, 0);
  EXPECT_EQ(f.written[0].gpu_uuid, "a-gpu0");
  EXPECT_EQ(f.written[0].bytes, 40 * GiB);
  EXPECT_EQ(f.written[0].pod_namespace, "ns");
  // The exporter still shows nothing on GPU 0, but a second 41 GiB pod no longer fits.
  const json second = json::parse(f.filter("u2", "41Gi", {"a"}));
  EXPECT_TRUE(second["NodeNames"].empty());
  EXPECT_EQ(second["FailedNodes"].size(), 1u);
  // 30 GiB still fits on GPU 0 or 1: pack takes GPU 1 (30 free, 0 left).
  f.filter("u3", "30Gi", {"a"});
  EXPECT_EQ(f.bind("u3", "a"), "");
  EXPECT_EQ(f.written.back().gpu_index, 1);
}

// Found by fuzzing (tests/fuzz/regressions/extender_request/): a number beyond a double's range
// made json::parse throw out_of_range, which bind let escape (it caught parse_error only).
TEST(BindService, NumberOutOfRangeIsA400NotAThrow) {
  bind_fixture f;
  for (const char* body :
       {"8880e7508m.e|}", R"({"PodName":"p","PodUID":"u","Node":"a","x":1e999})"}) {
    const auto r = f.service->bind(body);
    EXPECT_EQ(r.status, 400) << body;
    EXPECT_NE(r.body.find("not JSON"), std::string::npos) << r.body;
  }
}

TEST(BindService, RecheckRefusesWhatFilterPassedBeforeAnotherBind) {
  bind_fixture f;
  f.nodes["a"] = node("a", {0}, 80 * GiB);
  f.filter("u1", "50Gi", {"a"});
  f.filter("u2", "50Gi", {"a"});  // both passed: neither was bound yet
  EXPECT_EQ(f.bind("u1", "a"), "");
  const std::string e = f.bind("u2", "a");
  EXPECT_NE(e.find("no room"), std::string::npos) << e;
  EXPECT_EQ(f.written.size(), 1u);
  EXPECT_FALSE(f.table->find("u2"));
}

TEST(BindService, RepeatedBindIsIdempotentAndFailedBindingReleases) {
  bind_fixture f;
  f.nodes["a"] = node("a", {0}, 80 * GiB);
  f.filter("u1", "50Gi", {"a"});
  f.fail_next = "HTTP 500";
  EXPECT_NE(f.bind("u1", "a").find("HTTP 500"), std::string::npos);
  EXPECT_FALSE(f.table->find("u1"));
  EXPECT_EQ(f.bind("u1", "a"), "");
  EXPECT_EQ(f.bind("u1", "a"), "");  // a retried bind after a lost reply
  EXPECT_EQ(f.written.size(), 1u);
  EXPECT_EQ(f.table->list().size(), 1u);
  // A bind of the bound pod to another node is refused and keeps the reservation where it is.
  f.nodes["b"] = node("b", {0}, 80 * GiB);
  f.filter("u1", "50Gi", {"a", "b"});
  EXPECT_NE(f.bind("u1", "b").find("already bound to a"), std::string::npos);
  ASSERT_TRUE(f.table->find("u1"));
  EXPECT_EQ(f.table->find("u1")->node, "a");
}

TEST(BindService, RefusesUnknownPodsUnknownNodesAndBadBodies) {
  bind_fixture f;
  f.nodes["a"] = node("a", {0}, 80 * GiB);
  EXPECT_NE(f.bind("never-filtered", "a").find("no filter call"), std::string::npos);
  f.filter("u1", "1Gi", {"a"});
  EXPECT_NE(f.bind("u1", "gone").find("no live GPU figures"), std::string::npos);
  EXPECT_EQ(f.service->bind("{").status, 400);
  EXPECT_EQ(f.service->bind(R"({"PodName":"x"})").status, 400);
  EXPECT_EQ(f.service->bind(R"({"PodName":5,"PodUID":"u","Node":"a"})").status, 400);
  // Go's decoder matches field names case-insensitively.
  EXPECT_EQ(
      f.service->bind(R"({"podname":"p-u1","podnamespace":"ns","poduid":"u1","node":"a"})").status,
      200);
  EXPECT_EQ(f.written.size(), 1u);
}

std::string exporter_text(std::uint64_t used, double sampled_s, const std::string& pod_uid = "") {
  std::string t =
      "# TYPE vramkit_gpu_memory_total_bytes gauge\n"
      "vramkit_gpu_memory_total_bytes{gpu=\"0\",uuid=\"GPU-0\",name=\"H200\"} 85899345920\n"
      "vramkit_gpu_memory_used_bytes{gpu=\"0\",uuid=\"GPU-0\",name=\"H200\"} " +
      std::to_string(used) + "\n";
  if (!pod_uid.empty()) {
    t += "vramkit_gpu_process_memory_used_bytes{gpu=\"0\",pid=\"7\",pod_uid=\"" + pod_uid +
         "\"} 1\n";
  }
  t += "vramkit_exporter_last_sample_timestamp_seconds " + std::to_string(sampled_s) + "\n";
  return t;
}

struct scraper_clocks {
  std::chrono::steady_clock::time_point steady{};
  std::chrono::system_clock::time_point wall{std::chrono::seconds(1'800'000'000)};
  double wall_s() const { return std::chrono::duration<double>(wall.time_since_epoch()).count(); }
};

TEST(BackgroundScraper, ServesTheLastGoodSampleAndMarksOldOnesUnknown) {
  scraper_clocks c;
  std::string body_a = exporter_text(10 * GiB, c.wall_s());
  bool fail_a = false;
  background_scraper s(
      {{"a", "http://a/metrics"}, {"b", "http://b/metrics"}}, {1000ms, 100ms, 5000ms, 2},
      [&](const std::string& url, std::chrono::milliseconds) -> result<std::string> {
        if (url == "http://a/metrics") {
          if (fail_a) return unavailable{unavailable_kind::failed, "timed out"};
          return body_a;
        }
        // b's exporter answers, but its own sample is an hour old (its sampler is stuck).
        return exporter_text(1 * GiB, c.wall_s() - 3600);
      },
      [&] { return c.steady; }, [&] { return c.wall; });
  auto st = s.states({"a", "b", "c"});
  EXPECT_FALSE(st.at("a"));  // nothing scraped yet
  s.scrape_all_now();
  st = s.states({"a", "b", "c"});
  ASSERT_TRUE(st.at("a"));
  EXPECT_EQ((*st.at("a"))->gpus.at(0).used_bytes, 10 * GiB);
  ASSERT_FALSE(st.at("b"));
  EXPECT_NE(st.at("b").error().reason.find("stale"), std::string::npos);
  EXPECT_FALSE(st.at("c"));
  // a's exporter hangs: its last good sample is served until it is older than max_age.
  fail_a = true;
  c.steady += 3s;
  c.wall += 3s;
  s.scrape_all_now();
  st = s.states({"a"});
  ASSERT_TRUE(st.at("a"));
  c.steady += 3s;
  c.wall += 3s;
  st = s.states({"a"});
  ASSERT_FALSE(st.at("a"));
  EXPECT_NE(st.at("a").error().reason.find("timed out"), std::string::npos);
  EXPECT_EQ(s.fetch_count(), 4u);
}

TEST(BackgroundScraper, ReportsPodsSeenAndRunsInTheBackground) {
  scraper_clocks c;
  std::atomic<int> fetches{0};
  std::mutex m;
  std::set<std::string> seen;
  background_scraper s(
      {{"a", "http://a/metrics"}}, {10ms, 100ms, 5000ms, 2},
      [&](const std::string&, std::chrono::milliseconds) -> result<std::string> {
        ++fetches;
        return exporter_text(1 * GiB, c.wall_s(), "uid-1");
      },
      {}, [&] { return c.wall; });
  s.on_sample([&](const std::string& node, const std::set<std::string>& pods) {
    std::lock_guard lock(m);
    for (const auto& p : pods) seen.insert(node + ":" + p);
  });
  s.start();
  for (int i = 0; i < 400 && fetches < 3; ++i) std::this_thread::sleep_for(5ms);
  s.stop();
  EXPECT_GE(fetches.load(), 3);
  std::lock_guard lock(m);
  EXPECT_EQ(seen, (std::set<std::string>{"a:uid-1"}));
  EXPECT_TRUE(s.states({"a"}).at("a"));
}

TEST(BackgroundScraper, SetNodesAddsAndForgets) {
  scraper_clocks c;
  background_scraper s(
      {{"a", "http://a/metrics"}}, {1000ms, 100ms, 5000ms, 2},
      [&](const std::string&, std::chrono::milliseconds) -> result<std::string> {
        return exporter_text(1 * GiB, c.wall_s());
      },
      [&] { return c.steady; }, [&] { return c.wall; });
  s.scrape_all_now();
  s.set_nodes({{"b", "http://b/metrics"}});
  s.scrape_all_now();
  auto st = s.states({"a", "b"});
  EXPECT_FALSE(st.at("a"));
  EXPECT_TRUE(st.at("b"));
}

}  // namespace
}  // namespace vramkit::cluster

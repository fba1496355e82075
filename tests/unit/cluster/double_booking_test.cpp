// No double booking: 1,000 pods scheduled as kube-scheduler would (filter, prioritize, bind over
// HTTP) against node exporters on loopback, in back-to-back bursts and from 32 threads at once.
// Half of the pods "start" (their memory and pod_uid appear in the exporter), half never do. The
// ground truth — each GPU's starting use plus every pod bound to it — must stay within capacity.
// Nothing here depends on how fast the machine runs it: the reservations' clock stands still, a
// sample never goes stale, and a call may take as long as a loaded machine needs.
#include <httplib.h>

#include <atomic>
#include <cstdio>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "vramkit/cluster/background_scraper.hpp"
#include "vramkit/cluster/extender_bind.hpp"
#include "vramkit/cluster/extender_server.hpp"
#include "vramkit/cluster/kube_binding_writer.hpp"
#include "vramkit/core/units.hpp"
#include "vramkit/monitor/http_server.hpp"

namespace vramkit::cluster {
namespace {

using namespace std::chrono_literals;
using json = nlohmann::json;

constexpr int node_count = 6;
constexpr int gpus_per_node = 4;
constexpr std::uint64_t gpu_total_bytes = 141 * GiB;

// One node's GPUs as its exporter reports them; pods add their use once they "start".
struct fake_node {
  std::mutex m;
  std::array<std::uint64_t, gpus_per_node> used{};
  std::vector<std::pair<int, std::string>> started;  // gpu, pod uid
  httplib::Server server;
  std::thread thread;
  int port = 0;

  std::string metrics() {
    std::lock_guard lock(m);
    std::string t;
    for (int g = 0; g < gpus_per_node; ++g) {
      const std::string labels = R"({gpu=")" + std::to_string(g) + R"(",uuid="GPU-)" +
                                 std::to_string(g) + R"(",name="H200"})";
      t += "vramkit_gpu_memory_total_bytes" + labels + " " + std::to_string(gpu_total_bytes) + "\n";
      t += "vramkit_gpu_memory_used_bytes" + labels + " " + std::to_string(used[g]) + "\n";
    }
    for (const auto& [g, uid] : started) {
      t += "vramkit_gpu_process_memory_used_bytes{gpu=\"" + std::to_string(g) + "\",pod_uid=\"" +
           uid + "\"} 1\n";
    }
    const double now =
        std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    t += "vramkit_exporter_last_sample_timestamp_seconds " + std::to_string(now) + "\n";
    return t;
  }
};

std::string describe(const httplib::Result& r) {
  if (!r) return httplib::to_string(r.error());
  return "HTTP " + std::to_string(r->status) + " " + r->body;
}

struct cluster_fixture {
  std::array<fake_node, node_count> nodes;
  std::array<std::array<std::uint64_t, gpus_per_node>, node_count> initial{};
  std::array<std::array<std::atomic<std::uint64_t>, gpus_per_node>, node_count> committed{};
  std::unique_ptr<background_scraper> scraper;
  // A pod that never starts must hold its reservation to the end, however long the test takes
  // (expiry has its own tests): the table's clock stands still.
  std::shared_ptr<reservation_table> table = std::make_shared<reservation_table>(
      60s, [] { return std::chrono::steady_clock::time_point{}; });
  std::unique_ptr<bind_service> service;
  std::unique_ptr<extender_server> extender;
  std::thread extender_thread;
  int extender_port = 0;
  std::atomic<int> binds{0};

  explicit cluster_fixture(unsigned seed) {
    std::mt19937 rng(seed);
    std::map<std::string, std::string> urls;
    for (int n = 0; n < node_count; ++n) {
      fake_node& f = nodes[n];
      for (int g = 0; g < gpus_per_node; ++g) {
        f.used[g] = std::uniform_int_distribution<std::uint64_t>(0, 40)(rng) * GiB;
        initial[n][g] = f.used[g];
      }
      f.server.Get("/metrics", [&f](const httplib::Request&, httplib::Response& res) {
        res.set_content(f.metrics(), "text/plain");
      });
      f.port = f.server.bind_to_any_port("127.0.0.1");
      f.thread = std::thread([&f] { f.server.listen_after_bind(); });
      urls["node-" + std::to_string(n)] = "http://127.0.0.1:" + std::to_string(f.port) + "/metrics";
    }
    // Scrapes every 20 ms, far slower than pods are bound; a slow scrape keeps the last sample,
    // which never counts as stale here (staleness has its own tests).
    scraper = std::make_unique<background_scraper>(urls, background_options{20ms, 30s, 24h, 8});
    scraper->on_sample([this](const std::string& node, const std::set<std::string>& pods) {
      table->confirm(node, pods);
    });
    scraper->scrape_all_now();
    scraper->start();

    extender_config config;
    node_lookup live = [this](const std::vector<std::string>& names) {
      return scraper->states(names);
    };
    service = std::make_unique<bind_service>(live, table, config, [this](const bind_decision& d) {
      const int n = std::stoi(d.node.substr(5));
      committed[n][d.gpu_index] += d.bytes;
      // Every other pod starts: the exporter shows its memory and its UID from the next scrape.
      if (++binds % 2 == 0) {
        std::lock_guard lock(nodes[n].m);
        nodes[n].used[d.gpu_index] += d.bytes;
        nodes[n].started.emplace_back(d.gpu_index, d.pod_uid);
      }
      return std::string();
    });
    config.on_request = [this](const std::string& uid, std::uint64_t bytes) {
      service->remember(uid, bytes);
    };
    // A connection waiting on a stalled machine must not count as idle and be closed.
    monitor::http_server_options limits;
    limits.idle_timeout = std::chrono::hours(24);
    extender = std::make_unique<extender_server>(service->effective_lookup(), config, "127.0.0.1",
                                                 0, limits);
    extender->serve_bind([this](std::string_view body) { return service->bind(body); });
    extender_port = extender->bind();
    extender_thread = std::thread([this] { extender->run(); });
  }

  ~cluster_fixture() {
    extender->stop();
    extender_thread.join();
    scraper->stop();
    for (auto& f : nodes) {
      f.server.stop();
      f.thread.join();
    }
  }

  // kube-scheduler's cycle for one pod: filter, prioritize (when more than one node is left), the
  // best score, bind. Returns whether the pod was bound.
  bool schedule(httplib::Client& c, const std::string& uid, std::uint64_t gib) {
    json names = json::array();
    for (int n = 0; n < node_count; ++n) names.push_back("node-" + std::to_string(n));
    json pod = {{"metadata", {{"name", "p-" + uid}, {"namespace", "default"}, {"uid", uid}}},
                {"spec",
                 {{"containers",
                   {{{"name", "main"},
                     {"resources",
                      {{"limits", {{"vramkit.io/gpu-memory", std::to_string(gib) + "Gi"}}}}}}}}}}};
    const std::string args = json{{"Pod", pod}, {"NodeNames", names}}.dump();
    auto f = c.Post("/vramkit/filter", args, "application/json");
    if (!f || f->status != 200) throw std::runtime_error("filter failed: " + describe(f));
    const json kept = json::parse(f->body)["NodeNames"];
    if (kept.empty()) return false;
    std::string best = kept[0];
    if (kept.size() > 1) {
      const std::string pargs = json{{"Pod", pod}, {"NodeNames", kept}}.dump();
      auto p = c.Post("/vramkit/prioritize", pargs, "application/json");
      if (!p || p->status != 200) throw std::runtime_error("prioritize failed: " + describe(p));
      std::int64_t top = -1;
      for (const json& h : json::parse(p->body)) {
        if (h["Score"].get<std::int64_t>() > top) {
          top = h["Score"].get<std::int64_t>();
          best = h["Host"];
        }
      }
    }
    const std::string bargs = json{
        {"PodName", "p-" + uid},
        {"PodNamespace", "default"},
        {"PodUID", uid},
        {"Node", best}}.dump();
    auto b = c.Post("/vramkit/bind", bargs, "application/json");
    if (!b || b->status != 200) throw std::runtime_error("bind failed: " + describe(b));
    return json::parse(b->body)["Error"].get<std::string>().empty();
  }

  // Over-committed GPUs by the ground truth, and the share of the starting free memory now placed.
  [[nodiscard]] std::pair<int, double> audit() const {
    int over = 0;
    std::uint64_t placed = 0, free = 0;
    for (int n = 0; n < node_count; ++n) {
      for (int g = 0; g < gpus_per_node; ++g) {
        if (initial[n][g] + committed[n][g].load() > gpu_total_bytes) ++over;
        placed += committed[n][g].load();
        free += gpu_total_bytes - initial[n][g];
      }
    }
    return {over, static_cast<double>(placed) / static_cast<double>(free)};
  }
};

std::uint64_t pod_gib(std::mt19937& rng) {
  return std::uniform_int_distribution<std::uint64_t>(1, 24)(rng);
}

// A scheduler's connection to the extender; a loaded machine may take seconds to answer.
std::unique_ptr<httplib::Client> extender_client(int port) {
  auto c = std::make_unique<httplib::Client>("127.0.0.1", port);
  c->set_read_timeout(120s);
  c->set_write_timeout(120s);
  return c;
}

TEST(DoubleBooking, SequentialBurstsOfPodsNeverOvercommit) {
  cluster_fixture cl(1);
  const auto c = extender_client(cl.extender_port);
  std::mt19937 rng(7);
  int bound = 0;
  for (int burst = 0; burst < 20; ++burst) {
    // 50 pods back to back, faster than the background scrapes catch up; then every exporter is
    // read once, so the next burst starts from a view that shows the pods started so far.
    for (int i = 0; i < 50; ++i) {
      bound += cl.schedule(*c, "s" + std::to_string(burst * 50 + i), pod_gib(rng)) ? 1 : 0;
    }
    cl.scraper->scrape_all_now();
  }
  const auto [over, placed] = cl.audit();
  EXPECT_EQ(over, 0);
  EXPECT_GT(bound, 200);
  // The pods offered about 3x the free memory: most of it must be used, not refused.
  EXPECT_GT(placed, 0.85) << bound << " pods bound";
}

TEST(DoubleBooking, ThirtyTwoConcurrentSchedulersNeverOvercommit) {
  cluster_fixture cl(2);
  std::atomic<int> next{0}, bound{0};
  std::mutex failures_mutex;
  std::vector<std::string> failures;
  std::vector<std::thread> threads;
  threads.reserve(32);
  for (int t = 0; t < 32; ++t) {
    threads.emplace_back([&, t] {
      const auto c = extender_client(cl.extender_port);
      std::mt19937 rng(100 + t);
      for (int i = next++; i < 1000; i = next++) {
        // The extender listens with a backlog of 1,024 and answers every call: a failed call is a
        // fault, not load.
        try {
          if (cl.schedule(*c, "c" + std::to_string(i), pod_gib(rng))) ++bound;
        } catch (const std::exception& e) {
          std::lock_guard lock(failures_mutex);
          failures.emplace_back(e.what());
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  const auto [over, placed] = cl.audit();
  EXPECT_TRUE(failures.empty()) << failures.size() << " calls failed, the first: " << failures[0];
  std::printf("32 concurrent schedulers: %d pods bound\n", bound.load());
  EXPECT_EQ(over, 0);
  EXPECT_GT(bound.load(), 200);
  EXPECT_GT(placed, 0.85) << bound << " pods bound";
}

}  // namespace
}  // namespace vramkit::cluster

namespace vramkit::cluster {
namespace {

// The API side of bind against a loopback stand-in for the API server (behind kubectl proxy):
// the annotation patch, the Binding, and a 409 that counts as success only for the same node.
TEST(KubeBindingWriter, PatchesAnnotationsThenCreatesTheBinding) {
  httplib::Server api;
  std::mutex m;
  std::vector<std::string> calls;
  json last_patch, last_binding;
  std::string bound_node;
  api.Patch("/api/v1/namespaces/ns/pods/p",
            [&](const httplib::Request& req, httplib::Response& res) {
              std::lock_guard lock(m);
              calls.push_back("PATCH " + req.get_header_value("Content-Type"));
              last_patch = json::parse(req.body);
              res.set_content("{}", "application/json");
            });
  api.Post("/api/v1/namespaces/ns/pods/p/binding",
           [&](const httplib::Request& req, httplib::Response& res) {
             std::lock_guard lock(m);
             calls.emplace_back("POST binding");
             last_binding = json::parse(req.body);
             const std::string node = last_binding["target"]["name"];
             if (!bound_node.empty()) {
               res.status = 409;
               return;
             }
             bound_node = node;
             res.status = 201;
             res.set_content("{}", "application/json");
           });
  api.Get("/api/v1/namespaces/ns/pods/p", [&](const httplib::Request&, httplib::Response& res) {
    std::lock_guard lock(m);
    res.set_content(json{{"spec", {{"nodeName", bound_node}}}}.dump(), "application/json");
  });
  const int port = api.bind_to_any_port("127.0.0.1");
  std::thread serving([&] { api.listen_after_bind(); });

  const binding_writer write =
      kube_api_binding_writer("http://127.0.0.1:" + std::to_string(port) + "/", 2s);
  bind_decision d{"ns", "p", "uid-1", "node-a", 3, "GPU-abc", 24 * GiB};
  EXPECT_EQ(write(d), "");
  EXPECT_EQ(calls,
            (std::vector<std::string>{"PATCH application/merge-patch+json", "POST binding"}));
  const json& ann = last_patch["metadata"]["annotations"];
  EXPECT_EQ(ann["vramkit.io/gpu-uuid"], "GPU-abc");
  EXPECT_EQ(ann["vramkit.io/gpu-index"], "3");
  EXPECT_EQ(ann["vramkit.io/gpu-memory-bytes"], std::to_string(24 * GiB));
  EXPECT_FALSE(ann["vramkit.io/assume-time-ns"].get<std::string>().empty());
  EXPECT_EQ(last_binding["kind"], "Binding");
  EXPECT_EQ(last_binding["metadata"]["uid"], "uid-1");
  EXPECT_EQ(last_binding["target"]["kind"], "Node");
  EXPECT_EQ(last_binding["target"]["name"], "node-a");
  // Bound already (a reply lost earlier): success on the same node, an error on another.
  EXPECT_EQ(write(d), "");
  d.node = "node-b";
  EXPECT_NE(write(d).find("409"), std::string::npos);
  api.stop();
  serving.join();
  // Nothing listening: a one-line error, no throw.
  EXPECT_FALSE(write(d).empty());
}

}  // namespace
}  // namespace vramkit::cluster

// Filter + prioritize latency over 1,000 nodes x 8 GPUs when 10% of the exporters hang (each
// scrape runs into the timeout) and 10% serve a sample an hour old, with the reservations of
// earlier pods applied. Compared in the same run with the on-request scraper (exporter_scraper,
// which scrapes expired nodes inside the request). Scrapes go through an in-process fetch, not
// sockets: what is measured is the request path, which never waits on a scrape.
// Usage: cluster_extender_latency_bench [requests=400] [hang_ms=1000] [baseline_requests=3]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include <nlohmann/json.hpp>

#include "vramkit/cluster/background_scraper.hpp"
#include "vramkit/cluster/exporter_scraper.hpp"
#include "vramkit/cluster/extender.hpp"
#include "vramkit/cluster/extender_bind.hpp"
#include "vramkit/core/units.hpp"

namespace {

using namespace vramkit;
using namespace vramkit::cluster;
using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;

constexpr int kNodes = 1000;

std::string metrics(int node, double sampled_s) {
  std::string t;
  for (int g = 0; g < 8; ++g) {
    const std::uint64_t used = ((node * 8 + g) * 2654435761ULL % 100) * GiB;
    const std::string l = "{gpu=\"" + std::to_string(g) + "\",uuid=\"GPU-" + std::to_string(node) +
                          "-" + std::to_string(g) + "\",name=\"NVIDIA H200\"}";
    t += "vramkit_gpu_memory_total_bytes" + l + " 150754820096\n";
    t += "vramkit_gpu_memory_used_bytes" + l + " " + std::to_string(used) + "\n";
  }
  t += "vramkit_exporter_last_sample_timestamp_seconds " + std::to_string(sampled_s) + "\n";
  return t;
}

double now_s() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Node n: n % 10 == 0 hangs, n % 10 == 1 is an hour stale, the rest answer at once.
result<std::string> fetch(const std::string& url, std::chrono::milliseconds timeout,
                          std::chrono::milliseconds hang) {
  const int node = std::atoi(url.c_str() + url.rfind('/') + 1);
  if (node % 10 == 0) {
    std::this_thread::sleep_for(std::min(hang, timeout));
    return unavailable{unavailable_kind::failed, url + ": timed out"};
  }
  return metrics(node, node % 10 == 1 ? now_s() - 3600 : now_s());
}

std::string args(int i) {
  nlohmann::json pod = {
      {"metadata", {{"name", "p" + std::to_string(i)}, {"uid", "uid-" + std::to_string(i)}}},
      {"spec",
       {{"containers",
         {{{"name", "c"}, {"resources", {{"limits", {{"vramkit.io/gpu-memory", "24Gi"}}}}}}}}}}};
  nlohmann::json names = nlohmann::json::array();
  for (int n = 0; n < kNodes; ++n) names.push_back("node-" + std::to_string(n));
  return nlohmann::json{{"Pod", pod}, {"NodeNames", names}}.dump();
}

struct stats {
  double p50, p99, max;
};

stats summarize(std::vector<double> ms) {
  std::sort(ms.begin(), ms.end());
  auto at = [&](double q) {
    return ms[std::min(ms.size() - 1, static_cast<std::size_t>(q * (ms.size() - 1) + 0.5))];
  };
  return {at(0.5), at(0.99), ms.back()};
}

std::vector<double> run(const node_lookup& lookup, const extender_config& config, int requests,
                        bind_service* binder, std::chrono::milliseconds pause) {
  std::vector<double> ms;
  for (int i = 0; i < requests; ++i) {
    const std::string body = args(i);
    const auto t0 = clock_type::now();
    const auto f = extender_filter(body, lookup, config);
    const auto p = extender_prioritize(body, lookup, config);
    ms.push_back(std::chrono::duration<double, std::milli>(clock_type::now() - t0).count());
    if (f.status != 200 || p.status != 200) {
      std::fprintf(stderr, "request %d failed\n", i);
      std::exit(1);
    }
    // Bind every pod to the best node so that reservations accumulate as in a real cluster.
    if (binder != nullptr) {
      const auto hosts = nlohmann::json::parse(p.body);
      std::string best;
      std::int64_t top = -1;
      for (const auto& h : hosts) {
        if (h["Score"].get<std::int64_t>() > top) {
          top = h["Score"];
          best = h["Host"];
        }
      }
      (void)binder->bind(nlohmann::json{
          {"PodName", "p" + std::to_string(i)},
          {"PodNamespace", "bench"},
          {"PodUID", "uid-" + std::to_string(i)},
          {"Node", best}}.dump());
    }
    std::this_thread::sleep_for(pause);
  }
  return ms;
}

}  // namespace

int main(int argc, char** argv) {
  const int requests = argc > 1 ? std::atoi(argv[1]) : 400;
  const auto hang = std::chrono::milliseconds(argc > 2 ? std::atoi(argv[2]) : 1000);
  const int old_requests = argc > 3 ? std::atoi(argv[3]) : 3;
  if (requests <= 0 || hang.count() <= 0 || old_requests < 0) {
    std::fprintf(stderr,
                 "usage: cluster_extender_latency_bench [requests>0] [hang_ms>0] "
                 "[baseline_requests>=0]\n");
    return 2;
  }
  std::map<std::string, std::string> urls;
  for (int n = 0; n < kNodes; ++n)
    urls["node-" + std::to_string(n)] = "http://x/" + std::to_string(n);
  auto fetch_fn = [hang](const std::string& url, std::chrono::milliseconds timeout) {
    return fetch(url, timeout, hang);
  };

  std::printf(
      "cluster_extender_latency_bench: %d nodes x 8 GPUs, 10%% hung (%lld ms), 10%% stale "
      "(1 h), %d filter+prioritize requests\n",
      kNodes, static_cast<long long>(hang.count()), requests);

  // vramkit: background scraping every 2 s, 32 workers, max age 10 s, reservations on.
  background_scraper scraper(urls, {2000ms, 1000ms, 10000ms, 32}, fetch_fn);
  scraper.start();
  std::this_thread::sleep_for(hang + 500ms);  // the first round: good nodes known
  auto table = std::make_shared<reservation_table>();
  extender_config config;
  node_lookup live = [&scraper](const std::vector<std::string>& n) { return scraper.states(n); };
  bind_service binder(live, table, config, [](const bind_decision&) { return std::string(); });
  config.on_request = [&binder](const std::string& uid, std::uint64_t b) {
    binder.remember(uid, b);
  };
  const auto bg = summarize(run(binder.effective_lookup(), config, requests, &binder, 5ms));
  const auto fetches = scraper.fetch_count();
  scraper.stop();
  std::printf(
      "background scraper + reservations: p50 %.2f ms  p99 %.2f ms  max %.2f ms  (%zu "
      "scrapes meanwhile, %zu reservations)\n",
      bg.p50, bg.p99, bg.max, fetches, table->list().size());

  // Baseline: on-request scraping with a 2 s TTL, as before; a few requests past the TTL.
  exporter_scraper old(urls, {2000ms, 1000ms, 32}, fetch_fn);
  node_lookup old_lookup = [&old](const std::vector<std::string>& n) { return old.states(n); };
  extender_config plain;
  if (old_requests == 0) return 0;
  std::vector<double> old_ms;
  for (int i = 0; i < old_requests; ++i) {
    auto part = run(old_lookup, plain, 1, nullptr, 0ms);
    old_ms.push_back(part[0]);
    std::this_thread::sleep_for(2100ms);  // past the TTL: the next request scrapes again
  }
  const auto base = summarize(old_ms);
  std::printf(
      "baseline on-request scraper (TTL 2 s): p50 %.2f ms  p99 %.2f ms  max %.2f ms  (%d "
      "requests, each after the TTL)\n",
      base.p50, base.p99, base.max, old_requests);
  std::printf("p99 ratio baseline/background: %.1fx; target p99 < 50 ms: %s\n", base.p99 / bg.p99,
              bg.p99 < 50.0 ? "met" : "NOT met");
  return 0;
}

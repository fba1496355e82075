// `vramkit serve --extender`: the kube-scheduler extender (filter and prioritize verbs) over the
// live figures of the nodes' `vramkit serve` exporters. Parses, builds the library objects, serves.
#include <pthread.h>

#include <csignal>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <thread>

#include <fmt/format.h>

#include "commands.hpp"
#include "vramkit/cluster/exporter_scraper.hpp"
#include "vramkit/cluster/extender.hpp"
#include "vramkit/cluster/extender_server.hpp"
#include "vramkit/cluster/placement.hpp"
#include "vramkit/core/error.hpp"

namespace vramkit::cli {
namespace {

struct extender_args {
  bool enabled = false;
  std::string nodes;
  std::string policy = "pack";
  std::string headroom = "0";
  std::string ttl = "2s";
  std::string timeout = "1s";
  std::string resource = "vramkit.io/gpu-memory";
  std::string annotation = "vramkit.io/plan";
};

// "2s", "500ms", "1.5s" -> milliseconds; throws invalid_input naming the flag.
std::chrono::milliseconds parse_duration(const std::string& text, const char* flag) {
  std::size_t used = 0;
  double v = -1;
  try {
    v = std::stod(text, &used);
  } catch (...) {
    used = 0;
  }
  const std::string unit = used == 0 ? "" : text.substr(used);
  if (used == 0 || v < 0 || (unit != "s" && unit != "ms")) {
    throw invalid_input(fmt::format("{} '{}' is not a duration (e.g. 2s, 500ms)", flag, text));
  }
  return std::chrono::milliseconds(static_cast<long long>(unit == "s" ? v * 1000 : v));
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw invalid_input(fmt::format("cannot read --nodes file '{}'", path));
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

void run_extender(const extender_args& a, CLI::App& serve) {
  if (a.nodes.empty())
    throw invalid_input("--extender needs --nodes FILE (node name -> exporter URL)");
  cluster::extender_config config;
  config.placement.policy = cluster::parse_placement_policy(a.policy);
  config.placement.safety = cluster::parse_headroom(a.headroom);
  config.resource_name = a.resource;
  config.plan_annotation = a.annotation;
  cluster::scraper_options so;
  so.ttl = parse_duration(a.ttl, "--scrape-ttl");
  so.timeout = parse_duration(a.timeout, "--scrape-timeout");
  if (so.timeout.count() == 0) throw invalid_input("--scrape-timeout must be above zero");
  auto urls = cluster::parse_node_map(read_text(a.nodes), a.nodes);
  const std::size_t node_count = urls.size();
  if (!cluster::extender_server_available()) {
    throw error(
        "built without cpp-httplib: vramkit serve --extender is not available in this build");
  }

  // serve's --port and --bind are the monitor's options; the extender listens on them, with its own
  // default port so it can share a host with an exporter.
  int port = 9411;
  std::string bind = "127.0.0.1";
  if (auto* o = serve.get_option_no_throw("--port"); o != nullptr && o->count() > 0)
    port = o->as<int>();
  if (auto* o = serve.get_option_no_throw("--bind"); o != nullptr && o->count() > 0)
    bind = o->as<std::string>();
  if (port < 0 || port > 65535)
    throw invalid_input(fmt::format("--port {} is not a TCP port (0-65535)", port));

  auto scraper = std::make_shared<cluster::exporter_scraper>(std::move(urls), so);
  cluster::node_lookup lookup = [scraper](const std::vector<std::string>& names) {
    return scraper->states(names);
  };

  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  cluster::extender_server server(std::move(lookup), config, bind, port);
  const int bound = server.bind();
  std::printf(
      "vramkit serve --extender: listening on http://%s:%d/ (POST /filter, /prioritize), %zu "
      "nodes, policy %s\n",
      bind.c_str(), bound, node_count, a.policy.c_str());
  std::fflush(stdout);
  std::thread serving([&server] { server.run(); });
  int sig = 0;
  sigwait(&stop_signals, &sig);
  server.stop();
  serving.join();
}

}  // namespace

std::function<bool()> add_extender_options(CLI::App& serve, command_context& ctx) {
  auto a = std::make_shared<extender_args>();
  const char* group = "Scheduler extender";
  serve
      .add_flag("--extender", a->enabled,
                "serve kube-scheduler's extender verbs (filter, prioritize) instead of metrics")
      ->group(group);
  serve
      .add_option("--nodes", a->nodes,
                  "node name -> exporter URL map (JSON object, or 'NODE URL' lines)")
      ->group(group);
  serve.add_option("--policy", a->policy, "pack (best fit) or spread")
      ->capture_default_str()
      ->group(group);
  serve
      .add_option("--headroom", a->headroom,
                  "memory kept free on every GPU: bytes (2GiB) or percent (5%)")
      ->capture_default_str()
      ->group(group);
  serve.add_option("--scrape-ttl", a->ttl, "how long a node's figures stay fresh")
      ->capture_default_str()
      ->group(group);
  serve.add_option("--scrape-timeout", a->timeout, "per-node scrape timeout")
      ->capture_default_str()
      ->group(group);
  serve.add_option("--resource-name", a->resource, "extended resource carrying the pod's request")
      ->capture_default_str()
      ->group(group);
  serve.add_option("--plan-annotation", a->annotation, "pod annotation carrying planner JSON")
      ->capture_default_str()
      ->group(group);
  return [a, &serve, &ctx] {
    if (!a->enabled) return false;
    run_extender(*a, serve);
    ctx.exit_code = 0;
    return true;
  };
}

}  // namespace vramkit::cli

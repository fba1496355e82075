// `vramkit extender`: the kube-scheduler extender (filter and prioritize verbs) over the live
// figures of the nodes' `vramkit serve` exporters. Parses, builds the library objects, serves.
#include <cstdio>
#include <memory>
#include <thread>

#include <fmt/format.h>

#include "commands.hpp"
#include "vramkit/cluster/exporter_scraper.hpp"
#include "vramkit/cluster/extender.hpp"
#include "vramkit/cluster/extender_server.hpp"
#include "vramkit/cluster/placement.hpp"
#include "vramkit/core/error.hpp"
#include "vramkit/core/units.hpp"

namespace vramkit::cli {

void run_extender(const extender_args& a, const std::string& command) {
  if (a.nodes.empty()) throw invalid_input("the extender needs --nodes FILE (node name -> URL)");
  cluster::extender_config config;
  config.placement.policy = cluster::parse_placement_policy(a.policy);
  config.placement.safety = cluster::parse_headroom(a.headroom);
  config.resource_name = a.resource;
  config.plan_annotation = a.annotation;
  cluster::scraper_options so;
  so.ttl = parse_duration(a.ttl, "--scrape-ttl");
  so.timeout = parse_duration(a.timeout, "--scrape-timeout");
  if (so.timeout.count() == 0) throw invalid_input("--scrape-timeout must be above zero");
  auto urls = cluster::parse_node_map(read_input_file(a.nodes, "--nodes file"), a.nodes);
  const std::size_t node_count = urls.size();
  if (!cluster::extender_server_available())
    throw error("built without libmicrohttpd: " + command + " is not available in this build");
  if (a.port < 0 || a.port > 65535)
    throw invalid_input(fmt::format("--port {} is not a TCP port (0-65535)", a.port));

  auto scraper = std::make_shared<cluster::exporter_scraper>(std::move(urls), so);
  cluster::node_lookup lookup = [scraper](const std::vector<std::string>& names) {
    return scraper->states(names);
  };
  stop_signals stop;
  cluster::extender_server server(std::move(lookup), config, a.bind, a.port);
  const int bound = server.bind();
  std::printf("%s: listening on %s (POST /filter, /prioritize), %zu nodes, policy %s\n",
              command.c_str(), monitor::http_url(a.bind, bound).c_str(), node_count,
              a.policy.c_str());
  std::fflush(stdout);
  std::thread serving([&server] { server.run(); });
  stop.wait();
  server.stop();
  serving.join();
}

std::vector<CLI::Option*> add_extender_options(CLI::App& cmd, extender_args& a) {
  return {
      cmd.add_option("--nodes", a.nodes,
                     "node name -> exporter URL map (JSON object, or 'NODE URL' lines)"),
      cmd.add_option("--policy", a.policy, "pack (best fit) or spread")->capture_default_str(),
      cmd.add_option("--headroom", a.headroom,
                     "memory kept free on every GPU: bytes (2GiB) or percent (5%)")
          ->capture_default_str(),
      cmd.add_option("--scrape-ttl", a.ttl, "how long a node's figures stay fresh (500ms, 2s, 1m)")
          ->capture_default_str(),
      cmd.add_option("--scrape-timeout", a.timeout, "per-node scrape timeout")
          ->capture_default_str(),
      cmd.add_option("--resource-name", a.resource, "extended resource carrying the pod's request")
          ->capture_default_str(),
      cmd.add_option("--plan-annotation", a.annotation, "pod annotation carrying planner JSON")
          ->capture_default_str(),
  };
}

void add_extender_command(CLI::App& app, command_context& ctx) {
  auto a = std::make_shared<extender_args>();
  auto* sub = app.add_subcommand(
      "extender",
      "kube-scheduler extender (filter, prioritize) over the nodes' vramkit serve exporters");
  add_extender_options(*sub, *a);
  sub->add_option("--port", a->port, "TCP port (0 picks a free one and prints it)")
      ->capture_default_str();
  sub->add_option("--bind", a->bind, "Address to listen on")->capture_default_str();
  sub->callback([a, &ctx] {
    run_extender(*a, "vramkit extender");
    ctx.exit_code = 0;
  });
}

}  // namespace vramkit::cli

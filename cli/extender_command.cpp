// `vramkit extender`: the kube-scheduler extender (filter, prioritize and optionally bind verbs)
// over the live figures of the nodes' `vramkit serve` exporters. Parses, builds the library
// objects, serves.
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include <fmt/format.h>

#include "commands.hpp"
#include "vramkit/cluster/background_scraper.hpp"
#include "vramkit/cluster/discovery_loop.hpp"
#include "vramkit/cluster/exporter_discovery.hpp"
#include "vramkit/cluster/exporter_scraper.hpp"
#include "vramkit/cluster/extender.hpp"
#include "vramkit/cluster/extender_bind.hpp"
#include "vramkit/cluster/extender_server.hpp"
#include "vramkit/cluster/kube_binding_writer.hpp"
#include "vramkit/cluster/placement.hpp"
#include "vramkit/cluster/reservation_table.hpp"
#include "vramkit/core/error.hpp"
#include "vramkit/core/units.hpp"

namespace vramkit::cli {
namespace {

// API calls (binding, discovery) must answer well inside kube-scheduler's 5 s default
// httpTimeout for the bind verb.
constexpr std::chrono::milliseconds api_timeout{3000};
// Node discovery: retried quickly until the first list succeeds, then refreshed at a slower period.
constexpr cluster::discovery_schedule discovery_every{std::chrono::seconds(5),
                                                      std::chrono::seconds(30)};

// Refuses the combinations that would leave a flag without effect.
void check_combinations(const extender_args& a) {
  const extender_args::node_source& n = a.nodes;
  if (n.discovered() && !n.map_file.empty())
    throw invalid_input(
        "--nodes and --discover-namespace are exclusive: a static map or discovery");
  if (!n.discovered() && n.map_file.empty())
    throw invalid_input(
        "the extender needs --nodes FILE (node name -> URL) or --discover-namespace NS");
  if (!n.discovered() && n.selector)
    throw invalid_input("--discover-selector needs --discover-namespace");
  if (!n.discovered() && n.exporter_port)
    throw invalid_input("--exporter-port needs --discover-namespace");
  if ((a.bind_verb.enabled || n.discovered()) && !a.api_url)
    throw invalid_input(
        fmt::format("{} needs --api-url URL (a kubectl proxy, e.g. http://127.0.0.1:8001)",
                    a.bind_verb.enabled ? "--bind-verb" : "--discover-namespace"));
  if (a.api_url && !a.bind_verb.enabled && !n.discovered())
    throw invalid_input("--api-url is used only by --bind-verb and --discover-namespace");
  if (a.bind_verb.reservation_ttl && !a.bind_verb.enabled)
    throw invalid_input("--reservation-ttl needs --bind-verb (reservations are made by bind)");
  if (a.background() && a.scrape.ttl)
    throw invalid_input(
        "--scrape-ttl applies to on-request scraping only; scraping is in the background "
        "(--scrape-interval, --bind-verb or discovery): use --max-sample-age");
  if (!a.background() && a.scrape.max_sample_age)
    throw invalid_input("--max-sample-age needs background scraping (--scrape-interval)");
  if (n.exporter_port) check_tcp_port("--exporter-port", *n.exporter_port, 1);
  check_api_url(a.api_url);
}

// The background scraping settings of the flags; with `background` set, refuses an interval of
// zero and an age limit shorter than the interval.
cluster::background_options background_settings(const extender_args::scraping& s,
                                                std::chrono::milliseconds timeout,
                                                bool background) {
  cluster::background_options bo;
  bo.timeout = timeout;
  if (s.interval) bo.interval = parse_duration(*s.interval, "--scrape-interval");
  if (s.max_sample_age) bo.max_age = parse_duration(*s.max_sample_age, "--max-sample-age");
  if (background && bo.interval.count() == 0)
    throw invalid_input("--scrape-interval must be above zero");
  if (background && bo.max_age < bo.interval)
    throw invalid_input(fmt::format(
        "--max-sample-age ({} ms) is shorter than --scrape-interval ({} ms): every sample would "
        "be stale",
        bo.max_age.count(), bo.interval.count()));
  return bo;
}

// Lists the exporter pods once (a failure is said and retried) and starts the thread that keeps
// the scraper's node map current; `nodes_text` says what the first list found.
std::unique_ptr<cluster::discovery_loop> start_discovery(
    const extender_args::node_source& n, const std::string& api_url,
    const std::shared_ptr<cluster::background_scraper>& scraper, std::string& nodes_text) {
  const std::string selector = n.selector.value_or("app=vramkit-exporter");
  auto discover = std::make_unique<cluster::discovery_loop>(
      [url = api_url, ns = *n.pod_namespace, selector, port = n.exporter_port.value_or(9410)] {
        return cluster::discover_exporters(url, ns, selector, port, api_timeout);
      },
      [scraper](std::map<std::string, std::string> nodes) { scraper->set_nodes(std::move(nodes)); },
      [](const std::string& reason) {
        std::fprintf(stderr, "vramkit extender: node discovery failed: %s\n", reason.c_str());
      },
      discovery_every);
  auto first = discover->refresh();
  if (first) {
    nodes_text = fmt::format("{} nodes from pods {} in {}", *first, selector, *n.pod_namespace);
  } else {
    std::fprintf(
        stderr, "vramkit extender: node discovery failed (retrying every %llds): %s\n",
        static_cast<long long>(
            std::chrono::duration_cast<std::chrono::seconds>(discovery_every.retry).count()),
        first.error().reason.c_str());
    nodes_text = "0 nodes yet (discovery retrying)";
  }
  discover->start(first.has_value());
  return discover;
}

}  // namespace

void run_extender(const extender_args& a, const std::string& command) {
  check_combinations(a);
  cluster::extender_config config;
  config.placement.policy = cluster::parse_placement_policy(a.place.policy);
  config.placement.safety = cluster::parse_headroom(a.place.headroom);
  config.resource_name = a.place.resource;
  config.resource_unit_bytes = parse_bytes(a.place.resource_unit);
  if (config.resource_unit_bytes == 0) throw invalid_input("--resource-unit must be above zero");
  config.plan_annotation = a.place.annotation;
  const auto timeout = parse_duration(a.scrape.timeout, "--scrape-timeout");
  if (timeout.count() == 0) throw invalid_input("--scrape-timeout must be above zero");
  const bool discovery = a.nodes.discovered();
  const bool background = a.background();
  const cluster::background_options bo = background_settings(a.scrape, timeout, background);
  std::chrono::milliseconds reservation_ttl = std::chrono::minutes(5);
  if (a.bind_verb.reservation_ttl) {
    reservation_ttl = parse_duration(*a.bind_verb.reservation_ttl, "--reservation-ttl");
    if (reservation_ttl.count() == 0) throw invalid_input("--reservation-ttl must be above zero");
  }
  std::map<std::string, std::string> urls;
  if (!discovery)
    urls = cluster::parse_node_map(read_input_file(a.nodes.map_file, "--nodes file"),
                                   a.nodes.map_file);
  const std::size_t node_count = urls.size();
  if (!cluster::extender_server_available())
    throw error("built without libmicrohttpd: " + command + " is not available in this build");
  check_tcp_port("--port", a.port);

  // Threads started from here on inherit the blocked SIGINT/SIGTERM.
  stop_signals stop;
  cluster::node_lookup lookup;
  std::shared_ptr<cluster::background_scraper> background_scraper;
  if (background) {
    background_scraper = std::make_shared<cluster::background_scraper>(std::move(urls), bo);
    lookup = [s = background_scraper](const std::vector<std::string>& names) {
      return s->states(names);
    };
  } else {
    cluster::scraper_options so;
    so.ttl = a.scrape.ttl ? parse_duration(*a.scrape.ttl, "--scrape-ttl")
                          : std::chrono::milliseconds(2000);
    so.timeout = timeout;
    auto scraper = std::make_shared<cluster::exporter_scraper>(std::move(urls), so);
    lookup = [scraper](const std::vector<std::string>& names) { return scraper->states(names); };
  }

  std::shared_ptr<cluster::bind_service> binder;
  if (a.bind_verb.enabled) {
    auto table = std::make_shared<cluster::reservation_table>(reservation_ttl);
    binder = std::make_shared<cluster::bind_service>(
        lookup, table, config, cluster::kube_api_binding_writer(*a.api_url, api_timeout));
    config.on_request = [binder](const std::string& uid, std::uint64_t bytes) {
      binder->remember(uid, bytes);
    };
    background_scraper->on_sample(
        [table](const std::string& node, const std::set<std::string>& pods) {
          table->confirm(node, pods);
        });
    lookup = binder->effective_lookup();
  }

  std::string nodes_text = fmt::format("{} nodes", node_count);
  std::unique_ptr<cluster::discovery_loop> discover;
  if (discovery) discover = start_discovery(a.nodes, *a.api_url, background_scraper, nodes_text);
  if (background_scraper) background_scraper->start();

  cluster::extender_server server(std::move(lookup), config, a.bind, a.port);
  if (binder) server.serve_bind([binder](std::string_view body) { return binder->bind(body); });
  const int bound = server.bind();
  const std::string scraping =
      background ? fmt::format("scraped every {} ms in the background", bo.interval.count())
                 : std::string("scraped on request");
  std::printf("%s: listening on %s (POST /filter, /prioritize%s; %s), %s, policy %s\n",
              command.c_str(), monitor::http_url(a.bind, bound).c_str(), binder ? ", /bind" : "",
              scraping.c_str(), nodes_text.c_str(), a.place.policy.c_str());
  std::fflush(stdout);
  std::thread serving([&server] { server.run(); });
  stop.wait();
  server.stop();
  serving.join();
  if (discover) discover->stop();
  if (background_scraper) background_scraper->stop();
}

namespace {

// The extender's options by concern, each list under its heading in --help.
std::vector<CLI::Option*> in_group(const char* heading, std::vector<CLI::Option*> options) {
  for (auto* o : options) o->group(heading);
  return options;
}

std::vector<CLI::Option*> add_node_options(CLI::App& cmd, extender_args::node_source& n) {
  return in_group(
      "Nodes",
      {cmd.add_option("--nodes", n.map_file,
                      "node name -> exporter URL map (JSON object, or 'NODE URL' lines)"),
       cmd.add_option("--discover-namespace", n.pod_namespace,
                      "find exporters as the pods of this namespace (instead of --nodes)"),
       cmd.add_option("--discover-selector", n.selector,
                      "label selector of the exporter pods (default app=vramkit-exporter)"),
       cmd.add_option("--exporter-port", n.exporter_port,
                      "port of the discovered exporters (default 9410)")});
}

std::vector<CLI::Option*> add_placement_options(CLI::App& cmd, extender_args& a) {
  auto& p = a.place;
  return in_group(
      "Placement",
      {cmd.add_option("--policy", p.policy, "pack (best fit) or spread")->capture_default_str(),
       cmd.add_option("--headroom", p.headroom,
                      "memory kept free on every GPU: bytes (2GiB) or percent (5%)")
           ->check(headroom_check())
           ->capture_default_str(),
       cmd.add_option("--resource-name", p.resource, "extended resource carrying the pod's request")
           ->capture_default_str(),
       cmd.add_option("--resource-unit", p.resource_unit,
                      "bytes per unit of the resource: 1GiB as the device plugin advertises it, 1 "
                      "when pods give bytes (24Gi)")
           ->check(byte_size_check())
           ->capture_default_str(),
       cmd.add_option("--plan-annotation", p.annotation, "pod annotation carrying planner JSON")
           ->capture_default_str()});
}

std::vector<CLI::Option*> add_scrape_options(CLI::App& cmd, extender_args::scraping& s) {
  // Every one a duration; on request (ttl, timeout) or in the background (interval, age).
  const auto duration = [&cmd](const char* name, auto& value, const char* help) {
    return cmd.add_option(name, value, help)->check(duration_check());
  };
  return in_group(
      "Scraping",
      {duration("--scrape-ttl", s.ttl,
                "on-request scraping: how long a node's figures stay fresh (default 2s)"),
       duration("--scrape-timeout", s.timeout, "per-node scrape timeout")->capture_default_str(),
       duration("--scrape-interval", s.interval,
                "scrape exporters in the background at this interval (default 2s with "
                "--bind-verb or discovery)"),
       duration("--max-sample-age", s.max_sample_age,
                "background scraping: older samples count as unknown (default 10s)")});
}

std::vector<CLI::Option*> add_binding_options(CLI::App& cmd, extender_args& a) {
  return in_group(
      "Binding",
      {cmd.add_flag("--bind-verb", a.bind_verb.enabled,
                    "serve POST /bind: reserve the GPU per pod, annotate the pod, create its "
                    "Binding (needs --api-url)"),
       add_api_url_option(cmd, a.api_url, "for --bind-verb and discovery"),
       cmd.add_option("--reservation-ttl", a.bind_verb.reservation_ttl,
                      "how long a reservation waits for the pod's process to show (default 5m)")
           ->check(duration_check())});
}

}  // namespace

std::vector<CLI::Option*> add_extender_options(CLI::App& cmd, extender_args& a) {
  std::vector<CLI::Option*> all;
  for (auto group : {add_node_options(cmd, a.nodes), add_placement_options(cmd, a),
                     add_scrape_options(cmd, a.scrape), add_binding_options(cmd, a)})
    all.insert(all.end(), group.begin(), group.end());
  return all;
}

void add_extender_command(CLI::App& app, command_context& ctx) {
  auto a = std::make_shared<extender_args>();
  auto* sub = app.add_subcommand(
      "extender",
      "kube-scheduler extender (filter, prioritize, bind) over the nodes' vramkit serve exporters");
  add_extender_options(*sub, *a);
  sub->add_option("--port", a->port, "TCP port (0 picks a free one and prints it)")
      ->capture_default_str();
  add_bind_option(*sub, a->bind);
  sub->callback([a, &ctx] {
    run_extender(*a, "vramkit extender");
    ctx.exit_code = 0;
  });
}

}  // namespace vramkit::cli

// `vramkit serve`: the Prometheus exporter (/metrics), /healthz, /api/samples and the live page,
// fed by a background sampler. `serve --extender` is the former spelling of `vramkit extender`.
#include <cstdio>
#include <optional>
#include <vector>

#include "commands.hpp"
#include "vramkit/core/error.hpp"
#include "vramkit/monitor/exporter.hpp"
#include "vramkit/monitor/gpu_source.hpp"
#include "vramkit/monitor/http_server.hpp"
#include "vramkit/monitor/sampler.hpp"

namespace vramkit::cli {

namespace {

namespace mon = vramkit::monitor;

struct serve_args {
  std::optional<int> port;  // 9410 for the exporter, the extender's own default for --extender
  std::string bind = "127.0.0.1";
  std::string interval = "1s";
  std::string fake_gpus;
  std::string host_root = "/";
  std::size_t history = 600;
  bool extender = false;
  extender_args extender_options;
};

void run_serve(const serve_args& a) {
  if (!mon::exporter_built())
    throw error("built without libmicrohttpd: vramkit serve is not available in this build");
  const int port = a.port.value_or(9410);
  check_tcp_port("--port", port);
  auto interval = mon::parse_interval(a.interval);
  auto gpus = mon::open_gpu_source(a.fake_gpus);
  if (!gpus)
    std::fprintf(stderr, "vramkit: %s: exporting host memory only\n", gpus.error().reason.c_str());
  mon::sampler_options so;
  so.host_root = a.host_root;
  so.workload_of = workload_reader(a.host_root);

  stop_signals stop;
  mon::exporter_options eo;
  eo.bind_address = a.bind;
  eo.port = port;
  eo.interval = interval;
  eo.history_samples = a.history;
  mon::exporter server(std::make_unique<mon::sampler>(std::move(gpus), so), eo);
  const int bound = server.start();
  std::printf("vramkit serve: listening on %s (metrics at /metrics)\n",
              mon::http_url(a.bind, bound).c_str());
  std::fflush(stdout);
  stop.wait();
  server.stop();
}

void run_deprecated_extender(serve_args a) {
  std::fputs("vramkit: 'serve --extender' is deprecated: use 'vramkit extender' (same options)\n",
             stderr);
  if (a.port) a.extender_options.port = *a.port;
  a.extender_options.bind = a.bind;
  run_extender(a.extender_options, "vramkit serve --extender");
}

}  // namespace

void add_serve_command(CLI::App& app, command_context& ctx) {
  auto args = std::make_shared<serve_args>();
  auto* sub =
      app.add_subcommand("serve", "Prometheus exporter and live web page of GPU and host memory");
  sub->add_option("--port", args->port,
                  "TCP port (default 9410; 0 picks a free one and prints it)");
  add_bind_option(*sub, args->bind);
  const std::vector<CLI::Option*> exporter_only = {
      sub->add_option("--interval", args->interval, "Sampling interval (1s, 500ms)")
          ->capture_default_str(),
      add_fake_gpus_option(*sub, args->fake_gpus),
      sub->add_option("--history", args->history, "Samples kept for the live page (1-1000000)")
          ->check(CLI::Range(std::size_t{1}, std::size_t{1000000}))
          ->capture_default_str(),
      add_host_root_option(*sub, args->host_root),
  };
  // The former spelling of `vramkit extender`, kept working: its options need the flag, and the
  // exporter's own options are refused with it.
  auto* extender = sub->add_flag("--extender", args->extender,
                                 "deprecated: run `vramkit extender` (same options) instead");
  extender->group("Deprecated");
  for (auto* o : add_extender_options(*sub, args->extender_options))
    o->needs(extender)->group("Deprecated");
  for (auto* o : exporter_only) o->excludes(extender);
  sub->callback([args, &ctx] {
    if (args->extender)
      run_deprecated_extender(*args);
    else
      run_serve(*args);
    ctx.exit_code = 0;
  });
}

}  // namespace vramkit::cli

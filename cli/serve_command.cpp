// `vramkit serve`: the Prometheus exporter (/metrics), /healthz, /api/samples and the live page,
// fed by a background sampler. `--extender` hands over to the cluster scheduler extender.
#include <pthread.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>

#include "commands.hpp"
#include "vramkit/core/error.hpp"
#include "vramkit/monitor/exporter.hpp"
#include "vramkit/monitor/fake_nvml.hpp"
#include "vramkit/monitor/sampler.hpp"

namespace vramkit::cli {

namespace {

namespace mon = vramkit::monitor;

struct serve_args {
  int port = 9410;
  std::string bind = "127.0.0.1";
  std::string interval = "1s";
  std::string fake_gpus;
  std::string host_root = "/";
  std::size_t history = 600;
};

void run_serve(const serve_args& a) {
  if (!mon::exporter_built())
    throw error("built without cpp-httplib: vramkit serve is not available in this build");
  if (a.port < 0 || a.port > 65535)
    throw invalid_input("--port " + std::to_string(a.port) + " is not a TCP port (0-65535)");
  auto interval = mon::parse_interval(a.interval);
  result<std::shared_ptr<mon::nvml_api>> gpus = unavailable{};
  if (!a.fake_gpus.empty()) {
    gpus = std::shared_ptr<mon::nvml_api>(mon::fake_nvml::from_file(a.fake_gpus));
  } else {
    const char* lib = std::getenv("VRAMKIT_NVML_LIBRARY");
    gpus = mon::load_nvml(lib != nullptr && *lib != '\0' ? lib : "libnvidia-ml.so.1");
    if (!gpus)
      std::fprintf(stderr, "vramkit: %s: exporting host memory only\n",
                   gpus.error().reason.c_str());
  }
  mon::sampler_options so;
  so.host_root = a.host_root;

  // SIGINT/SIGTERM are taken synchronously by this thread; every thread started below inherits
  // the blocked mask, so the signal cannot land in a server thread.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  mon::exporter_options eo;
  eo.bind_address = a.bind;
  eo.port = a.port;
  eo.interval = interval;
  eo.history_samples = a.history;
  mon::exporter server(std::make_unique<mon::sampler>(std::move(gpus), so), eo);
  int port = server.start();
  std::printf("vramkit serve: listening on http://%s:%d/ (metrics at /metrics)\n", a.bind.c_str(),
              port);
  std::fflush(stdout);
  int sig = 0;
  sigwait(&stop_signals, &sig);
  server.stop();
}

}  // namespace

void add_serve_command(CLI::App& app, command_context& ctx) {
  auto args = std::make_shared<serve_args>();
  auto* serve_subcommand =
      app.add_subcommand("serve", "Prometheus exporter and live web page of GPU and host memory");
  auto run_extender = add_extender_options(*serve_subcommand, ctx);
  serve_subcommand->add_option("--port", args->port, "TCP port (0 picks a free one and prints it)")
      ->capture_default_str();
  serve_subcommand->add_option("--bind", args->bind, "Address to listen on")->capture_default_str();
  serve_subcommand->add_option("--interval", args->interval, "Sampling interval (1s, 500ms)")
      ->capture_default_str();
  serve_subcommand->add_option(
      "--fake-gpus", args->fake_gpus,
      "Read GPUs from a JSON fixture instead of the driver (reloaded when it changes)");
  serve_subcommand->add_option("--history", args->history, "Samples kept for the live page")
      ->capture_default_str();
  serve_subcommand
      ->add_option("--host-root", args->host_root,
                   "Read /proc and /sys under this directory (tests)")
      ->group("");
  serve_subcommand->callback([args, run_extender] {
    if (run_extender()) return;
    run_serve(*args);
  });
}

}  // namespace vramkit::cli

// The vramkit subcommands. Each add_*_command registers one subcommand on the app; its callback
// parses nothing further, calls the library and prints, and sets ctx.exit_code.
#pragma once

#include <csignal>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "vramkit/monitor/process_owner.hpp"

namespace vramkit {
class nvml_api;
}

namespace vramkit::cli {

/// Shared by the subcommands of one invocation.
struct command_context {
  int exit_code = 0;
};

void add_probe_command(CLI::App& app, command_context& ctx);
void add_plan_command(CLI::App& app, command_context& ctx);
void add_watch_command(CLI::App& app, command_context& ctx);
void add_serve_command(CLI::App& app, command_context& ctx);
void add_slurm_command(CLI::App& app, command_context& ctx);
/// `slurm report`, registered on the slurm subcommand (cli/slurm_report_command.cpp).
void add_slurm_report_command(CLI::App& slurm, command_context& ctx);
void add_extender_command(CLI::App& app, command_context& ctx);
void add_device_plugin_command(CLI::App& app, command_context& ctx);
void add_replay_command(CLI::App& app, command_context& ctx);
void add_texture_command(CLI::App& app, command_context& ctx);
/// Adds `textures` (the texture budget planner) under `vramkit plan`; plan's own callback must
/// return at once when this subcommand was parsed.
CLI::App* add_plan_textures_subcommand(CLI::App& plan, command_context& ctx);

/// The options of `vramkit extender` (extender_command.cpp), grouped by what they configure.
struct extender_args {
  /// Where the nodes' exporters are: a static map, or the exporter pods of a namespace.
  struct node_source {
    std::string map_file;                      ///< --nodes: node name -> exporter URL
    std::optional<std::string> pod_namespace;  ///< --discover-namespace: discovery instead
    std::optional<std::string> selector;       ///< --discover-selector
    std::optional<int> exporter_port;          ///< --exporter-port
    [[nodiscard]] bool discovered() const { return pod_namespace.has_value(); }
  };
  /// How the exporters are scraped: on request, or in the background.
  struct scraping {
    std::string timeout = "1s";
    std::optional<std::string> ttl;       ///< on-request scraping only; 2s when not given
    std::optional<std::string> interval;  ///< background scraping
    std::optional<std::string> max_sample_age;
  };
  /// How a pod's request is read and placed.
  struct placement {
    std::string policy = "pack";
    std::string headroom = "0";
    std::string resource = "vramkit.io/gpu-memory";
    std::string resource_unit = "1GiB";  ///< bytes per unit of the resource (the plugin's unit)
    std::string annotation = "vramkit.io/plan";
  };
  /// The bind verb: reservations, pod annotation and Binding.
  struct binding {
    bool enabled = false;  ///< --bind-verb
    std::optional<std::string> reservation_ttl;
  };

  node_source nodes;
  scraping scrape;
  placement place;
  binding bind_verb;
  std::optional<std::string> api_url;  ///< the Kubernetes API, for the bind verb and discovery
  int port = 9411;
  std::string bind = "127.0.0.1";

  /// Scraping runs in the background: asked for, or needed by the bind verb or discovery.
  [[nodiscard]] bool background() const {
    return scrape.interval || bind_verb.enabled || nodes.discovered();
  }
};

/// Adds the extender's options except --port and --bind to `cmd`, bound to `a`; returns them (the
/// deprecated `serve --extender` makes each need its flag).
std::vector<CLI::Option*> add_extender_options(CLI::App& cmd, extender_args& a);

/// Serves the kube-scheduler extender until SIGINT or SIGTERM; `command` names the command in the
/// line that says where it listens.
void run_extender(const extender_args& a, const std::string& command);

// Options that several subcommands take, with one spelling and one help text each.

/// --fake-gpus FILE: GPUs from a fixture (the format of testing::fake_nvml) instead of the driver.
CLI::Option* add_fake_gpus_option(CLI::App& cmd, std::string& path);
/// --host-root DIR: /proc and /sys read under DIR (tests); hidden from --help.
CLI::Option* add_host_root_option(CLI::App& cmd, std::string& dir);
/// --bind ADDRESS: the address a server listens on.
CLI::Option* add_bind_option(CLI::App& cmd, std::string& address);
/// --api-url URL: the Kubernetes API over plain HTTP (a kubectl proxy), with what it is used for.
CLI::Option* add_api_url_option(CLI::App& cmd, std::optional<std::string>& url,
                                const std::string& used_for);

// Checks of an option's text at parse time, by the parser the command later converts it with, so
// that a bad value is a usage error (exit 2) naming the option before the command does anything.

/// A byte size as parse_bytes reads it ("24GiB", "512MiB", "4096").
const CLI::Validator& byte_size_check();
/// A duration as parse_duration reads it ("500ms", "2s", "5m").
const CLI::Validator& duration_check();
/// GPU memory headroom as cluster::parse_headroom reads it: bytes ("2GiB") or a percentage ("5%").
const CLI::Validator& headroom_check();

/// Throws invalid_input unless `url` is unset or a plain http:// URL (what a kubectl proxy serves).
void check_api_url(const std::optional<std::string>& url);
/// Throws invalid_input "FLAG N is not a TCP port (LOWEST-65535)" outside that range.
void check_tcp_port(const char* flag, int port, int lowest = 0);

/// The GPUs of --fake-gpus `fake_gpus` or, when empty, the driver's. Throws error "cannot read the
/// GPUs: REASON (...pass --fake-gpus FILE)" when the driver is missing or unusable, invalid_input
/// for a bad fixture.
std::shared_ptr<nvml_api> open_gpus(const std::string& fake_gpus);

/// The text of the file at `path`; throws invalid_input "cannot read WHAT 'PATH'".
std::string read_input_file(const std::string& path, const char* what);

/// For sampler_options::workload_of: the pod, container, Slurm job and plan of a process, read
/// under `host_root` by cluster::process_attributor (cached by PID and start time); empty when
/// nothing names one.
std::function<monitor::process_owner(std::uint32_t)> workload_reader(const std::string& host_root);

/// Blocks SIGINT and SIGTERM in this thread and every thread it starts afterwards, so that the
/// signal cannot land in a server thread; wait() then takes one synchronously.
class stop_signals {
 public:
  stop_signals();
  void wait();

 private:
  sigset_t set_;
};

}  // namespace vramkit::cli

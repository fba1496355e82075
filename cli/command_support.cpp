// Helpers shared by the subcommands: the options several take, opening the GPUs, reading an input
// file, waiting for SIGINT/SIGTERM.
#include <pthread.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

#include <fmt/format.h>

#include "commands.hpp"
#include "vramkit/cluster/placement.hpp"
#include "vramkit/cluster/process_attribution.hpp"
#include "vramkit/core/error.hpp"
#include "vramkit/core/units.hpp"
#include "vramkit/monitor/gpu_source.hpp"

namespace vramkit::cli {

CLI::Option* add_fake_gpus_option(CLI::App& cmd, std::string& path) {
  return cmd.add_option(
      "--fake-gpus", path,
      "Read GPUs from a JSON fixture instead of the driver (reloaded when it changes)");
}

CLI::Option* add_host_root_option(CLI::App& cmd, std::string& dir) {
  return cmd.add_option("--host-root", dir, "Read /proc and /sys under this directory (tests)")
      ->group("");
}

CLI::Option* add_bind_option(CLI::App& cmd, std::string& address) {
  return cmd.add_option("--bind", address, "Address to listen on")->capture_default_str();
}

namespace {

// A check that runs `parse` on the text: no message when it parses, else its invalid_input's.
template <typename Parse>
CLI::Validator parsed_by(Parse parse, std::string name) {
  return CLI::Validator(
      [parse](std::string& text) -> std::string {
        try {
          parse(text);
          return {};
        } catch (const invalid_input& e) {
          return e.what();
        }
      },
      std::move(name));
}

}  // namespace

const CLI::Validator& byte_size_check() {
  static const CLI::Validator check =
      parsed_by([](const std::string& text) { (void)parse_bytes(text); }, "SIZE");
  return check;
}

const CLI::Validator& duration_check() {
  static const CLI::Validator check =
      parsed_by([](const std::string& text) { (void)parse_duration(text); }, "DURATION");
  return check;
}

const CLI::Validator& headroom_check() {
  static const CLI::Validator check =
      parsed_by([](const std::string& text) { (void)cluster::parse_headroom(text); }, "HEADROOM");
  return check;
}

CLI::Option* add_api_url_option(CLI::App& cmd, std::optional<std::string>& url,
                                const std::string& used_for) {
  return cmd.add_option("--api-url", url,
                        "Kubernetes API over plain HTTP (a kubectl proxy sidecar), " + used_for);
}

void check_api_url(const std::optional<std::string>& url) {
  if (url && url->rfind("http://", 0) != 0)
    throw invalid_input(
        fmt::format("--api-url '{}' must be a plain http:// URL (a kubectl proxy)", *url));
}

void check_tcp_port(const char* flag, int port, int lowest) {
  if (port < lowest || port > 65535)
    throw invalid_input(fmt::format("{} {} is not a TCP port ({}-65535)", flag, port, lowest));
}

std::shared_ptr<nvml_api> open_gpus(const std::string& fake_gpus) {
  auto source = monitor::open_gpu_source(fake_gpus);
  if (!source) {
    throw error(fmt::format(
        "cannot read the GPUs: {} (on a machine without the NVIDIA driver, pass --fake-gpus FILE)",
        source.error().reason));
  }
  return *source;
}

std::string read_input_file(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw invalid_input(fmt::format("cannot read {} '{}'", what, path));
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

stop_signals::stop_signals() : set_{} {
  sigemptyset(&set_);
  sigaddset(&set_, SIGINT);
  sigaddset(&set_, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set_, nullptr);
}

void stop_signals::wait() {
  int sig = 0;
  sigwait(&set_, &sig);
}

std::function<monitor::process_owner(std::uint32_t)> workload_reader(const std::string& host_root) {
  vramkit::cluster::attribution_options o;
  o.host_root = host_root;
  auto attributor = std::make_shared<vramkit::cluster::process_attributor>(o);
  return [attributor](std::uint32_t pid) { return attributor->owner_of(pid); };
}

}  // namespace vramkit::cli

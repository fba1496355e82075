// `vramkit device-plugin`: the kubelet device plugin advertising GPU memory (vramkit.io/gpu-memory,
// one device ID per unit) and giving each container the GPU the extender's bind verb chose, with
// its memory cap in the environment. Parses, builds the library objects, serves.
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>

#include <fmt/format.h>

#include "commands.hpp"
#include "vramkit/cluster/device_plugin.hpp"
#include "vramkit/cluster/gpu_state.hpp"
#include "vramkit/core/error.hpp"
#include "vramkit/core/units.hpp"
#if VRAMKIT_HAVE_GRPC
#include "vramkit/cluster/device_plugin_service.hpp"
#endif

namespace vramkit::cli {
namespace {

struct device_plugin_args {
  std::string fake_gpus;
  std::string node;
  std::optional<std::string> api_url;
  std::optional<std::string> pods_file;
  std::string unit = "1GiB";
  std::string resource = "vramkit.io/gpu-memory";
  std::string kubelet_socket = "/var/lib/kubelet/device-plugins/kubelet.sock";
  std::string endpoint = "vramkit-gpu-memory.sock";
  bool mps_limit = false;
};

void run_device_plugin(const device_plugin_args& a) {
  if (a.api_url.has_value() == a.pods_file.has_value())
    throw invalid_input(
        "the device plugin needs exactly one of --api-url URL and --pods-file FILE");
  check_api_url(a.api_url);
  if (a.endpoint.find('/') != std::string::npos)
    throw invalid_input(
        fmt::format("--endpoint '{}' must be a file name: it lives in the kubelet socket's folder",
                    a.endpoint));
  cluster::device_plugin_options o;
  o.resource_name = a.resource;
  o.unit_bytes = parse_bytes(a.unit);
  if (o.unit_bytes < (std::uint64_t{1} << 20))
    throw invalid_input(fmt::format("--unit {} is below 1MiB: too many device IDs", a.unit));
  o.mps_limit = a.mps_limit;
  o.node_name = a.node;
  if (o.node_name.empty()) {
    if (const char* n = std::getenv("NODE_NAME"); n != nullptr) o.node_name = n;
  }
  if (o.node_name.empty() && a.api_url)
    throw invalid_input("--api-url needs the node's name: --node NAME or $NODE_NAME");
#if VRAMKIT_HAVE_GRPC
  auto nvml = open_gpus(a.fake_gpus);
  auto nvml_mutex = std::make_shared<std::mutex>();
  cluster::device_plugin_sources sources;
  if (a.api_url) {
    sources = cluster::kube_api_pod_sources(*a.api_url, o.node_name, std::chrono::seconds(3));
  } else {
    sources.pod_list = [path = *a.pods_file] { return read_input_file(path, "--pods-file"); };
  }
  sources.gpus = [nvml, nvml_mutex] {
    std::lock_guard lock(*nvml_mutex);
    return cluster::gpus_from_nvml(*nvml);
  };
  const auto initial = sources.gpus();
  if (initial.empty()) throw error("no GPUs to advertise");
  const std::size_t ids = cluster::advertised_device_ids(initial, o.unit_bytes).size();

  // Before any thread starts, so that the server's threads inherit the blocked signals.
  stop_signals stop;
  cluster::device_plugin_service service(
      o, sources, cluster::kubelet_endpoint{a.kubelet_socket, a.endpoint},
      [](const std::string& line) {
        std::fprintf(stderr, "vramkit device-plugin: %s\n", line.c_str());
      });
  service.start();
  std::printf(
      "vramkit device-plugin: serving %s on %s (%zu device IDs of %s on %zu GPUs, node '%s'), "
      "registered with %s\n",
      o.resource_name.c_str(), service.socket_path().c_str(), ids,
      format_bytes(static_cast<double>(o.unit_bytes)).c_str(), initial.size(), o.node_name.c_str(),
      a.kubelet_socket.c_str());
  std::fflush(stdout);
  stop.wait();
  service.stop();
#else
  throw error("built without gRPC: vramkit device-plugin is not available in this build");
#endif
}

}  // namespace

void add_device_plugin_command(CLI::App& app, command_context& ctx) {
  auto a = std::make_shared<device_plugin_args>();
  auto* sub = app.add_subcommand(
      "device-plugin",
      "kubelet device plugin: advertises GPU memory and gives containers the extender's GPU");
  add_fake_gpus_option(*sub, a->fake_gpus);
  sub->add_option("--node", a->node, "this node's name (default $NODE_NAME)");
  add_api_url_option(*sub, a->api_url, "for the node's pods");
  sub->add_option("--pods-file", a->pods_file,
                  "read the node's pods from this v1 PodList file at each Allocate instead");
  sub->add_option("--unit", a->unit, "bytes per device ID (one unit of the resource)")
      ->check(byte_size_check())
      ->capture_default_str();
  sub->add_option("--resource-name", a->resource, "extended resource advertised")
      ->capture_default_str();
  sub->add_option("--kubelet-socket", a->kubelet_socket, "the kubelet's registration socket")
      ->capture_default_str();
  sub->add_option("--endpoint", a->endpoint, "this plugin's socket, next to the kubelet's")
      ->capture_default_str();
  sub->add_flag("--mps-limit", a->mps_limit,
                "also set CUDA_MPS_PINNED_DEVICE_MEM_LIMIT (containers under CUDA MPS)");
  sub->callback([a, &ctx] {
    run_device_plugin(*a);
    ctx.exit_code = 0;
  });
}

}  // namespace vramkit::cli

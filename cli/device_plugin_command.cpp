// `vramkit device-plugin`: the kubelet device plugin advertising GPU memory (vramkit.io/gpu-memory,
// one device ID per unit) and giving each container the GPU the extender's bind verb chose, with
// its memory cap in the environment. Parses, builds the library objects, serves.
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <mutex>
#include <thread>

#include <fmt/format.h>

#include "commands.hpp"
#include "vramkit/cluster/device_plugin.hpp"
#include "vramkit/cluster/gpu_state.hpp"
#include "vramkit/core/error.hpp"
#include "vramkit/core/units.hpp"
#include "vramkit/monitor/gpu_source.hpp"
#if VRAMKIT_HAVE_GRPC
#include "vramkit/cluster/device_plugin_server.hpp"
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
  if (a.api_url && a.api_url->rfind("http://", 0) != 0)
    throw invalid_input(
        fmt::format("--api-url '{}' must be a plain http:// URL (a kubectl proxy)", *a.api_url));
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
  auto source = monitor::open_gpu_source(a.fake_gpus);
  if (!source)
    throw error(fmt::format(
        "cannot read the GPUs: {} (on a machine without the NVIDIA driver, pass --fake-gpus FILE)",
        source.error().reason));
  auto nvml = *source;
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
  const std::string dir = std::filesystem::path(a.kubelet_socket).parent_path().string();
  const std::string socket = (std::filesystem::path(dir) / a.endpoint).string();

  stop_signals stop;
  std::mutex server_mutex;
  std::unique_ptr<cluster::device_plugin_server> server;
  auto start_and_register = [&] {
    auto s = std::make_unique<cluster::device_plugin_server>(o, sources);
    s->start(socket);
    s->register_with_kubelet(a.kubelet_socket, a.endpoint);
    std::lock_guard lock(server_mutex);
    server = std::move(s);
  };
  start_and_register();
  std::printf(
      "vramkit device-plugin: serving %s on %s (%zu device IDs of %s on %zu GPUs, node '%s'), "
      "registered with %s\n",
      o.resource_name.c_str(), socket.c_str(), ids, format_bytes(o.unit_bytes).c_str(),
      initial.size(), o.node_name.c_str(), a.kubelet_socket.c_str());
  std::fflush(stdout);
  // The kubelet removes every plugin socket when it restarts: then serve again and re-register.
  std::atomic<bool> stopping{false};
  std::thread watch([&] {
    while (!stopping.load()) {
      for (int i = 0; i < 20 && !stopping.load(); ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      if (stopping.load()) break;
      struct stat st {};
      if (::stat(socket.c_str(), &st) == 0) continue;
      std::fprintf(stderr, "vramkit device-plugin: %s is gone (kubelet restart?): re-registering\n",
                   socket.c_str());
      try {
        {
          std::lock_guard lock(server_mutex);
          if (server) server->stop();
        }
        start_and_register();
      } catch (const std::exception& e) {
        std::fprintf(stderr, "vramkit device-plugin: %s\n", e.what());
      }
    }
  });
  stop.wait();
  stopping.store(true);
  watch.join();
  std::lock_guard lock(server_mutex);
  if (server) server->stop();
  ::unlink(socket.c_str());
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
  sub->add_option("--fake-gpus", a->fake_gpus, "GPU fixture JSON instead of the NVIDIA driver");
  sub->add_option("--node", a->node, "this node's name (default $NODE_NAME)");
  sub->add_option("--api-url", a->api_url,
                  "Kubernetes API over plain HTTP (a kubectl proxy sidecar) for the node's pods");
  sub->add_option("--pods-file", a->pods_file,
                  "read the node's pods from this v1 PodList file at each Allocate instead");
  sub->add_option("--unit", a->unit, "bytes per device ID (one unit of the resource)")
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

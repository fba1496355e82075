// The kubelet device plugin over gRPC: see device_plugin_server.hpp.
#include "vramkit/cluster/device_plugin_server.hpp"

#include <unistd.h>

#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <set>

#include <fmt/format.h>
#include <grpcpp/grpcpp.h>
#include <nlohmann/json.hpp>

#include "deviceplugin_v1beta1.grpc.pb.h"
#include "vramkit/cluster/extender_bind.hpp"
#include "vramkit/config.hpp"
#include "vramkit/core/error.hpp"

#if VRAMKIT_HAVE_HTTPLIB
#include <httplib.h>
#endif

namespace vramkit::cluster {
namespace {

namespace dp = ::v1beta1;

// The health of every advertised ID given the GPUs present now.
std::vector<std::pair<std::string, bool>> device_list(const std::vector<gpu_state>& advertised,
                                                      const std::vector<gpu_state>& now,
                                                      std::uint64_t unit) {
  std::set<std::string> present;
  for (const gpu_state& g : now) present.insert(g.uuid);
  std::vector<std::pair<std::string, bool>> out;
  for (const gpu_state& g : advertised) {
    const bool healthy = present.count(g.uuid) != 0;
    for (const std::string& id : advertised_device_ids({g}, unit)) out.emplace_back(id, healthy);
  }
  return out;
}

}  // namespace

struct device_plugin_server::impl final : dp::DevicePlugin::Service {
  device_plugin_options options;
  device_plugin_sources sources;
  std::vector<gpu_state> advertised;  // the GPUs seen at start: their IDs never change
  std::unique_ptr<grpc::Server> server;
  mutable std::mutex mutex;
  std::condition_variable wake;
  bool stopping = false;
  std::set<std::string> allocated;  // "<pod uid>/<container>"
  std::size_t allocation_count = 0;

  grpc::Status GetDevicePluginOptions(grpc::ServerContext*, const dp::Empty*,
                                      dp::DevicePluginOptions* out) override {
    out->set_pre_start_required(false);
    out->set_get_preferred_allocation_available(true);
    return grpc::Status::OK;
  }

  grpc::Status ListAndWatch(grpc::ServerContext* ctx, const dp::Empty*,
                            grpc::ServerWriter<dp::ListAndWatchResponse>* writer) override {
    std::vector<std::pair<std::string, bool>> last;
    std::unique_lock lock(mutex);
    while (!stopping && !ctx->IsCancelled()) {
      lock.unlock();
      std::vector<std::pair<std::string, bool>> now;
      try {
        now = device_list(advertised, sources.gpus(), options.unit_bytes);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "vramkit device-plugin: cannot read the GPUs: %s\n", e.what());
        now = device_list(advertised, {}, options.unit_bytes);  // all unhealthy
      }
      if (now != last) {
        dp::ListAndWatchResponse r;
        for (const auto& [id, healthy] : now) {
          auto* d = r.add_devices();
          d->set_id(id);
          d->set_health(healthy ? "Healthy" : "Unhealthy");
        }
        if (!writer->Write(r)) return grpc::Status::OK;  // the kubelet went away
        last = std::move(now);
      }
      lock.lock();
      wake.wait_for(lock, std::chrono::seconds(5), [this] { return stopping; });
    }
    return grpc::Status::OK;
  }

  grpc::Status GetPreferredAllocation(grpc::ServerContext*,
                                      const dp::PreferredAllocationRequest* in,
                                      dp::PreferredAllocationResponse* out) override {
    for (const auto& c : in->container_requests()) {
      const std::vector<std::string> available(c.available_deviceids().begin(),
                                               c.available_deviceids().end());
      const std::vector<std::string> must(c.must_include_deviceids().begin(),
                                          c.must_include_deviceids().end());
      auto* r = out->add_container_responses();
      for (const std::string& id : preferred_device_ids(available, must, c.allocation_size()))
        r->add_deviceids(id);
    }
    return grpc::Status::OK;
  }

  grpc::Status Allocate(grpc::ServerContext*, const dp::AllocateRequest* in,
                        dp::AllocateResponse* out) override {
    try {
      for (const auto& c : in->container_requests()) {
        const std::uint64_t units = static_cast<std::uint64_t>(c.devices_ids_size());
        std::optional<allocation> a;
        {
          const std::string pods = sources.pod_list();
          std::lock_guard lock(mutex);
          a = find_allocation(pods, units, allocated, options);
          if (!a) {
            return grpc::Status(
                grpc::StatusCode::FAILED_PRECONDITION,
                fmt::format("no pod on node '{}' waits for {} unit(s) of {} with a {} annotation "
                            "(schedule it with the vramkit extender's bind verb)",
                            options.node_name, units, options.resource_name, annotation_gpu_uuid));
          }
          allocated.insert(a->pod_uid + "/" + a->container);
        }
        std::uint64_t total = 0;
        bool found = false;
        for (const gpu_state& g : sources.gpus()) {
          if (g.uuid == a->gpu_uuid) {
            total = g.total_bytes;
            found = true;
          }
        }
        if (!found) {
          std::lock_guard lock(mutex);
          allocated.erase(a->pod_uid + "/" + a->container);
          return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                              fmt::format("pod {}/{} was given GPU {}, which is not on this node",
                                          a->pod_namespace, a->pod_name, a->gpu_uuid));
        }
        auto* r = out->add_container_responses();
        for (const auto& [k, v] : allocation_environment(*a, total, options))
          (*r->mutable_envs())[k] = v;
        (*r->mutable_annotations())["vramkit.io/gpu-uuid"] = a->gpu_uuid;
        if (sources.mark_allocated) {
          const std::string err = sources.mark_allocated(*a);
          if (!err.empty())
            std::fprintf(stderr, "vramkit device-plugin: cannot annotate pod %s/%s: %s\n",
                         a->pod_namespace.c_str(), a->pod_name.c_str(), err.c_str());
        }
        std::lock_guard lock(mutex);
        ++allocation_count;
      }
    } catch (const std::exception& e) {
      return grpc::Status(grpc::StatusCode::INTERNAL, e.what());
    }
    return grpc::Status::OK;
  }

  grpc::Status PreStartContainer(grpc::ServerContext*, const dp::PreStartContainerRequest*,
                                 dp::PreStartContainerResponse*) override {
    return grpc::Status::OK;
  }
};

device_plugin_server::device_plugin_server(device_plugin_options options,
                                           device_plugin_sources sources)
    : impl_(std::make_unique<impl>()) {
  if (!sources.gpus || !sources.pod_list)
    throw invalid_input("the device plugin needs a GPU source and a pod source");
  impl_->options = std::move(options);
  impl_->sources = std::move(sources);
  impl_->advertised = impl_->sources.gpus();
  (void)advertised_device_ids(impl_->advertised, impl_->options.unit_bytes);  // validates
}

device_plugin_server::~device_plugin_server() { stop(); }

void device_plugin_server::start(const std::string& socket_path) {
  ::unlink(socket_path.c_str());
  grpc::ServerBuilder builder;
  builder.AddListeningPort("unix://" + socket_path, grpc::InsecureServerCredentials());
  builder.RegisterService(impl_.get());
  impl_->server = builder.BuildAndStart();
  if (!impl_->server) throw error(fmt::format("cannot listen on unix socket '{}'", socket_path));
}

void device_plugin_server::register_with_kubelet(const std::string& kubelet_socket,
                                                 const std::string& endpoint,
                                                 std::chrono::milliseconds timeout) {
  auto channel =
      grpc::CreateChannel("unix://" + kubelet_socket, grpc::InsecureChannelCredentials());
  auto stub = dp::Registration::NewStub(channel);
  dp::RegisterRequest req;
  req.set_version("v1beta1");
  req.set_endpoint(endpoint);
  req.set_resource_name(impl_->options.resource_name);
  req.mutable_options()->set_pre_start_required(false);
  req.mutable_options()->set_get_preferred_allocation_available(true);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + timeout);
  ctx.set_wait_for_ready(true);
  dp::Empty reply;
  const grpc::Status s = stub->Register(&ctx, req, &reply);
  if (!s.ok())
    throw error(fmt::format("the kubelet at '{}' refused the registration of {}: {}",
                            kubelet_socket, impl_->options.resource_name, s.error_message()));
}

void device_plugin_server::stop() noexcept {
  if (!impl_) return;
  {
    std::lock_guard lock(impl_->mutex);
    impl_->stopping = true;
  }
  impl_->wake.notify_all();
  if (impl_->server) {
    impl_->server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
    impl_->server.reset();
  }
}

std::size_t device_plugin_server::allocations() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->allocation_count;
}

device_plugin_sources kube_api_pod_sources(std::string api_url, std::string node,
                                           std::chrono::milliseconds timeout) {
  device_plugin_sources s;
#if VRAMKIT_HAVE_HTTPLIB
  auto client = [api_url, timeout] {
    auto c = std::make_unique<httplib::Client>(api_url);
    c->set_connection_timeout(timeout);
    c->set_read_timeout(timeout);
    c->set_write_timeout(timeout);
    return c;
  };
  s.pod_list = [client, node] {
    auto c = client();
    const std::string path = "/api/v1/pods?fieldSelector=spec.nodeName%3D" + node;
    auto r = c->Get(path);
    if (!r) throw error(fmt::format("GET {}: {}", path, httplib::to_string(r.error())));
    if (r->status != 200) throw error(fmt::format("GET {}: HTTP {}", path, r->status));
    return r->body;
  };
  s.mark_allocated = [client](const allocation& a) -> std::string {
    std::string list;
    for (const std::string& c : a.allocated_before) list += c + ",";
    list += a.container;
    const nlohmann::json patch = {
        {"metadata", {{"annotations", {{std::string(annotation_allocated_containers), list}}}}}};
    const std::string path =
        fmt::format("/api/v1/namespaces/{}/pods/{}", a.pod_namespace, a.pod_name);
    auto r = client()->Patch(path, patch.dump(), "application/merge-patch+json");
    if (!r) return fmt::format("PATCH {}: {}", path, httplib::to_string(r.error()));
    if (r->status != 200) return fmt::format("PATCH {}: HTTP {}", path, r->status);
    return "";
  };
#else
  (void)api_url;
  (void)node;
  (void)timeout;
  s.pod_list = []() -> std::string {
    throw error("built without cpp-httplib: the device plugin cannot read pods from the API");
  };
#endif
  return s;
}

}  // namespace vramkit::cluster

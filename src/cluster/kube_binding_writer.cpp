// Pod annotation + Binding through the Kubernetes API (plain HTTP to a credential-adding proxy).
#include "vramkit/cluster/kube_binding_writer.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "vramkit/config.hpp"

#if VRAMKIT_HAVE_HTTPLIB
#include <httplib.h>
#endif

namespace vramkit::cluster {

binding_writer kube_api_binding_writer(std::string api_url, std::chrono::milliseconds timeout) {
#if VRAMKIT_HAVE_HTTPLIB
  while (!api_url.empty() && api_url.back() == '/') api_url.pop_back();
  return [api_url, timeout](const bind_decision& d) -> std::string {
    using json = nlohmann::json;
    httplib::Client client(api_url);
    client.set_connection_timeout(timeout);
    client.set_read_timeout(timeout);
    client.set_write_timeout(timeout);
    const std::string pod_path =
        fmt::format("/api/v1/namespaces/{}/pods/{}", d.pod_namespace, d.pod_name);
    const auto assume_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                               std::chrono::system_clock::now().time_since_epoch())
                               .count();
    json patch = {{"metadata",
                   {{"annotations",
                     {{std::string(annotation_gpu_uuid), d.gpu_uuid},
                      {std::string(annotation_gpu_index), std::to_string(d.gpu_index)},
                      {std::string(annotation_gpu_bytes), std::to_string(d.bytes)},
                      {std::string(annotation_assume_time), std::to_string(assume_ns)}}}}}};
    auto patched = client.Patch(pod_path, patch.dump(), "application/merge-patch+json");
    if (!patched) return fmt::format("PATCH {}: {}", pod_path, httplib::to_string(patched.error()));
    if (patched->status != 200) return fmt::format("PATCH {}: HTTP {}", pod_path, patched->status);

    json binding = {
        {"apiVersion", "v1"},
        {"kind", "Binding"},
        {"metadata", {{"name", d.pod_name}, {"namespace", d.pod_namespace}, {"uid", d.pod_uid}}},
        {"target", {{"apiVersion", "v1"}, {"kind", "Node"}, {"name", d.node}}}};
    auto bound = client.Post(pod_path + "/binding", binding.dump(), "application/json");
    if (!bound) return fmt::format("POST binding: {}", httplib::to_string(bound.error()));
    if (bound->status == 200 || bound->status == 201) return "";
    if (bound->status == 409) {
      // An earlier attempt may have bound it and timed out replying: fine if it is on this node.
      auto pod = client.Get(pod_path);
      if (pod && pod->status == 200) {
        try {
          const json p = json::parse(pod->body);
          if (p.value("/spec/nodeName"_json_pointer, std::string()) == d.node) return "";
        } catch (const std::exception&) {
        }
      }
      return fmt::format("POST binding: HTTP 409 and the pod is not on {}", d.node);
    }
    return fmt::format("POST binding: HTTP {}", bound->status);
  };
#else
  (void)timeout;
  return [api_url](const bind_decision&) -> std::string {
    return fmt::format("binding through {} needs a build with cpp-httplib", api_url);
  };
#endif
}

}  // namespace vramkit::cluster

// The kubelet device plugin's decisions, without gRPC: GPU memory advertised as an extended
// resource of one device ID per unit (default 1 GiB), the pod an Allocate call is for (the one the
// extender's bind verb annotated with its GPU), and the environment that gives the container that
// GPU and its memory cap. Pure functions, thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "vramkit/cluster/gpu_state.hpp"

namespace vramkit::cluster {

/// Pod annotation the plugin writes after Allocate: the pod's containers it allocated,
/// comma-separated (so that a restarted plugin does not give a container's share twice).
inline constexpr std::string_view annotation_allocated_containers =
    "vramkit.io/allocated-containers";

/// Settings shared by the plugin's calls.
struct device_plugin_options {
  std::string resource_name = "vramkit.io/gpu-memory";
  std::uint64_t unit_bytes = std::uint64_t{1} << 30;  ///< bytes per device ID (and per unit)
  std::string node_name;                              ///< pods are matched on spec.nodeName
  bool mps_limit = false;                             ///< also set CUDA_MPS_PINNED_DEVICE_MEM_LIMIT
  std::string plan_annotation = "vramkit.io/plan";    ///< planner JSON: the plan passed on
};

/// The device IDs advertised for `gpus`: "<uuid>-<k>" for k in [0, floor(total / unit)), so that
/// the node's allocatable is its GPU memory in units. Throws invalid_input when unit_bytes is 0 or
/// a GPU has no UUID.
[[nodiscard]] std::vector<std::string> advertised_device_ids(const std::vector<gpu_state>& gpus,
                                                             std::uint64_t unit_bytes);

/// GetPreferredAllocation for one container: the must-include IDs, then IDs of the GPU with the
/// most available IDs (keeping the count on one GPU), in the order offered; `size` IDs in all, or
/// fewer when fewer are offered.
[[nodiscard]] std::vector<std::string> preferred_device_ids(
    const std::vector<std::string>& available, const std::vector<std::string>& must_include,
    int size);

/// What Allocate decided for one container.
struct allocation {
  std::string pod_namespace;
  std::string pod_name;
  std::string pod_uid;
  std::string container;
  int gpu_index = -1;
  std::string gpu_uuid;
  std::uint64_t cap_bytes = 0;  ///< units requested x unit_bytes
  /// The plan for drift (used / planned): the pod's plan annotation (device_peak_bytes, at most
  /// the cap) when this is its only container asking for the resource, else cap_bytes.
  std::uint64_t planned_bytes = 0;
  std::vector<std::string> allocated_before;  ///< the pod's containers allocated earlier
};

/// Finds the container an Allocate of `units` device IDs is for, in a v1 PodList of the node's
/// pods: a pod on options.node_name with the vramkit.io/gpu-uuid annotation (written by the bind
/// verb), not finished, with a container requesting exactly `units` of the resource that is neither
/// in `allocated` ("<pod uid>/<container>") nor in the pod's allocated-containers annotation; the
/// oldest vramkit.io/assume-time-ns first, as gpushare does. nullopt when none matches. Throws
/// invalid_input on text that is not a PodList.
[[nodiscard]] std::optional<allocation> find_allocation(std::string_view pod_list_json,
                                                        std::uint64_t units,
                                                        const std::set<std::string>& allocated,
                                                        const device_plugin_options& options);

/// The container's environment: CUDA_VISIBLE_DEVICES and NVIDIA_VISIBLE_DEVICES (the GPU's UUID),
/// VRAMKIT_POOL_MAXIMUM (the cap in bytes), VRAMKIT_PLANNED_BYTES (planned_bytes, read back by the
/// exporter's attribution for plan drift), PYTORCH_CUDA_ALLOC_CONF
/// (per_process_memory_fraction:<cap / gpu_total>, at most 1), and
/// with mps_limit CUDA_MPS_PINNED_DEVICE_MEM_LIMIT (0=<cap in MiB>M).
[[nodiscard]] std::map<std::string, std::string> allocation_environment(
    const allocation& a, std::uint64_t gpu_total_bytes, const device_plugin_options& options);

}  // namespace vramkit::cluster

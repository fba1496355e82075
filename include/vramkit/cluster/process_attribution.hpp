// Who runs a process on this node, read from the node's own files under a host root: the pod
// (UID, namespace, name) and container from /proc/<pid>/cgroup plus the kubelet's log directories
// (/var/log/pods, /var/log/containers) or the container runtime's state (containerd, CRI-O,
// Docker); the Slurm job from the cgroup path or the process's environment; the PID inside its
// PID namespace; and the planned bytes of its job from its environment (VRAMKIT_PLANNED_BYTES,
// set by the device plugin and the Slurm TaskProlog, else the cap VRAMKIT_POOL_MAXIMUM).
// The parsing helpers are pure functions; process_attributor is not thread-safe (one sampler
// thread calls it).
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "vramkit/cluster/workload_attribution.hpp"
#include "vramkit/monitor/process_owner.hpp"

namespace vramkit::cluster {

/// A pod or container as the kubelet or a runtime names it; empty fields are unknown.
struct kube_names {
  std::string pod_namespace;
  std::string pod;
  std::string pod_uid;
  std::string container;
};

/// A pod log directory name, `<namespace>_<pod>_<uid>` (kubelet BuildPodLogsDirectory; names
/// and namespaces cannot contain '_'). nullopt for anything else.
[[nodiscard]] std::optional<kube_names> pod_of_log_directory(std::string_view name);

/// A container log link name in /var/log/containers,
/// `<pod>_<namespace>_<container>-<64 hex ID>.log`: the names and the container ID, or nullopt
/// (also when the kubelet cut a long name at 255 bytes and the ID is incomplete).
[[nodiscard]] std::optional<std::pair<kube_names, std::string>> container_of_log_link(
    std::string_view name);

/// The names a runtime recorded for a container: an OCI config.json of containerd
/// (annotations io.kubernetes.cri.*) or CRI-O (io.kubernetes.pod.*, io.kubernetes.container.name),
/// or Docker's config.v2.json (Config.Labels io.kubernetes.*, else the container's Name). Empty
/// names for text that is not JSON or names none.
[[nodiscard]] kube_names names_of_runtime_config(std::string_view json_text);

/// The value of `name` in /proc/<pid>/environ text (NUL-separated NAME=value), or nullopt.
[[nodiscard]] std::optional<std::string> environ_value(std::string_view environ,
                                                       std::string_view name);

/// The innermost PID of /proc/<pid>/status's "NSpid:" line when the process is in a nested PID
/// namespace (the line has more than one PID), else nullopt.
[[nodiscard]] std::optional<std::uint32_t> namespace_pid_of_status(std::string_view status);

/// Where process_attributor looks, relative to its host root.
struct attribution_options {
  std::filesystem::path host_root = "/";
  /// How long a failed name look-up is trusted before the directories are read again (a pod's
  /// log directory appears a moment after its first process).
  std::chrono::milliseconds retry_after{5000};
  /// Milliseconds on a steady clock; tests inject a stepped one.
  std::function<std::int64_t()> clock_ms;
};

/// Names the owner of node processes, caching by PID and start time so that a sample of a busy
/// node reads each process's files once; a reused PID is read again.
class process_attributor {
 public:
  explicit process_attributor(attribution_options options = {});

  /// The owner of `pid`; empty when the process is not visible or belongs to no pod, container
  /// or job. Never throws for what the files say (unreadable or malformed files give less).
  monitor::process_owner owner_of(std::uint32_t pid);

 private:
  struct cached {
    std::uint64_t start_time = 0;
    std::string pid_namespace;
    monitor::process_owner owner;
    bool names_missing = false;
    std::int64_t read_at_ms = 0;
  };

  monitor::process_owner read_owner(std::uint32_t pid, const workload& w,
                                    const std::string& environ, const std::string& status);
  void fill_names(monitor::process_owner& o, const std::string& runtime);
  void rescan_logs(std::int64_t now);
  [[nodiscard]] std::int64_t now_ms() const;

  attribution_options options_;
  std::map<std::uint32_t, cached> cache_;
  std::map<std::string, kube_names> pods_by_uid_;       // from /var/log/pods
  std::map<std::string, kube_names> containers_by_id_;  // from /var/log/containers
  std::int64_t logs_read_at_ms_ = std::numeric_limits<std::int64_t>::min();
  std::string host_pid_namespace_;
};

}  // namespace vramkit::cluster

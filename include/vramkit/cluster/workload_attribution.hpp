// Which workload a process belongs to, from its /proc/<pid>/cgroup text: the Kubernetes pod (UID,
// QoS class, container ID and runtime) under the cgroupfs or systemd driver, a plain Docker
// container, or the Slurm job and step under cgroup v1 or v2. A pod's namespace and name are not in
// the path: map pod_uid through the API or the kubelet's pod-resources socket. Pure functions;
// thread-safe.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace vramkit::cluster {

/// What a cgroup path says about its process; empty fields are unknown.
struct workload {
  std::string pod_uid;       ///< with dashes, as the API server writes it
  std::string qos;           ///< guaranteed, burstable or besteffort
  std::string container_id;  ///< 64 hex digits
  std::string runtime;       ///< containerd, cri-o or docker, when the path names it
  std::string slurm_job;     ///< job id
  std::string slurm_step;    ///< a number, batch, extern or interactive
  std::string cgroup_path;   ///< the path the fields came from

  [[nodiscard]] bool empty() const noexcept {
    return pod_uid.empty() && slurm_job.empty() && container_id.empty();
  }
};

/// Reads one cgroup path (`/kubepods.slice/...`, `/slurm/uid_1000/job_42/step_0/task_0`).
[[nodiscard]] workload workload_of_cgroup_path(std::string_view path);

/// Reads the text of /proc/<pid>/cgroup (v1 "id:controllers:path" lines, v2 "0::path"): the first
/// line naming a pod or Slurm job wins, the unified (v2) line first. Malformed lines are skipped.
[[nodiscard]] workload workload_of_proc_cgroup(std::string_view text);

}  // namespace vramkit::cluster

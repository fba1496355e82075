// Who runs a GPU process: the Kubernetes pod and container or the Slurm job it belongs to, and the
// GPU memory its job planned, as cluster attribution reads them from the node (cgroup paths, PID
// namespace, the kubelet's and runtimes' files, the process's environment). Plain values and pure
// functions; thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace vramkit::monitor {

/// Where a planned figure came from.
enum class plan_source {
  none,     ///< no plan known
  planned,  ///< VRAMKIT_PLANNED_BYTES: the job's plan or request (pod annotation, Slurm comment)
  cap,      ///< VRAMKIT_POOL_MAXIMUM: the cap handed to the job (its request, rounded to units)
};
const char* to_string(plan_source s) noexcept;
plan_source plan_source_from_string(const std::string& text);  ///< throws invalid_input

/// The owner of one process; empty strings are unknown (or not in a pod / job).
struct process_owner {
  std::string pod;            ///< pod name
  std::string pod_namespace;  ///< the pod's Kubernetes namespace
  std::string pod_uid;        ///< with dashes, as the API server writes it
  std::string container;      ///< container name (Kubernetes, or a plain Docker container's)
  std::string container_id;   ///< 64 hex digits
  std::string slurm_job;      ///< Slurm job ID
  std::string slurm_step;     ///< a number, batch, extern or interactive
  /// The process's PID inside its own PID namespace (what `ps` shows in its container); empty when
  /// it runs in the host's namespace or /proc does not say.
  std::optional<std::uint32_t> namespace_pid;
  /// Device memory the job planned for one GPU, in bytes.
  std::optional<std::uint64_t> planned_bytes;
  plan_source planned_from = plan_source::none;

  [[nodiscard]] bool empty() const noexcept {
    return pod.empty() && pod_uid.empty() && container.empty() && container_id.empty() &&
           slurm_job.empty();
  }
};

/// The short name of the workload a process runs in, for grouping and display: "pod ns/name",
/// "pod <uid>" when the name is unknown, "slurm job 42", "container name"; "" for none.
[[nodiscard]] std::string workload_name(const process_owner& o);

/// used / planned, when both are known and the plan is not zero.
[[nodiscard]] std::optional<double> plan_use(std::optional<std::uint64_t> used_bytes,
                                             const process_owner& o);

}  // namespace vramkit::monitor

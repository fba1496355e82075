// Names and plan use of a process's owner (pod, container, Slurm job).
#include "vramkit/monitor/process_owner.hpp"

#include "vramkit/core/error.hpp"

namespace vramkit::monitor {

const char* to_string(plan_source s) noexcept {
  switch (s) {
    case plan_source::planned:
      return "planned";
    case plan_source::cap:
      return "cap";
    case plan_source::none:
      break;
  }
  return "none";
}

plan_source plan_source_from_string(const std::string& text) {
  if (text == "planned") return plan_source::planned;
  if (text == "cap") return plan_source::cap;
  if (text == "none" || text.empty()) return plan_source::none;
  throw invalid_input("plan source '" + text + "' is not planned, cap or none");
}

std::string workload_name(const process_owner& o) {
  if (!o.pod.empty())
    return "pod " + (o.pod_namespace.empty() ? o.pod : o.pod_namespace + "/" + o.pod);
  if (!o.pod_uid.empty()) return "pod " + o.pod_uid;
  if (!o.slurm_job.empty()) return "slurm job " + o.slurm_job;
  if (!o.container.empty()) return "container " + o.container;
  if (!o.container_id.empty()) return "container " + o.container_id.substr(0, 12);
  return {};
}

std::optional<double> plan_use(std::optional<std::uint64_t> used_bytes, const process_owner& o) {
  if (!used_bytes || !o.planned_bytes || *o.planned_bytes == 0) return std::nullopt;
  return static_cast<double>(*used_bytes) / static_cast<double>(*o.planned_bytes);
}

}  // namespace vramkit::monitor

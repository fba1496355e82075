// proc_workload_reader (proc_workload_reader.hpp): one file read and workload_of_proc_cgroup.
#include "vramkit/cluster/proc_workload_reader.hpp"

#include <fstream>
#include <iterator>
#include <string>
#include <utility>

#include "vramkit/cluster/workload_attribution.hpp"

namespace vramkit::cluster {

std::string workload_label(const std::filesystem::path& host_root, std::uint32_t pid) {
  std::ifstream in(host_root / "proc" / std::to_string(pid) / "cgroup");
  if (!in) return {};
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const workload w = workload_of_proc_cgroup(text);
  if (!w.pod_uid.empty()) return "pod " + w.pod_uid;
  if (!w.slurm_job.empty()) return "slurm job " + w.slurm_job;
  return {};
}

std::function<std::string(std::uint32_t pid)> proc_workload_reader(
    std::filesystem::path host_root) {
  return [root = std::move(host_root)](std::uint32_t pid) { return workload_label(root, pid); };
}

}  // namespace vramkit::cluster

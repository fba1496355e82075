// Pod and Slurm job attribution from /proc/<pid>/cgroup texts in tests/data/cluster/cgroup: the
// kubelet's systemd and cgroupfs layouts (containerd, CRI-O), Slurm's v1 and v2 hierarchies.
#include "vramkit/cluster/workload_attribution.hpp"

#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include <string>

namespace vramkit::cluster {
namespace {

std::string fixture(const std::string& name) {
  std::ifstream in(std::string(VRAMKIT_SOURCE_DIR) + "/tests/data/cluster/cgroup/" + name);
  EXPECT_TRUE(in) << name;
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// The pod, its QoS class and the container runtime a cgroup path names.
void expect_pod(const workload& w, const std::string& pod_uid, const std::string& qos,
                const std::string& runtime) {
  EXPECT_EQ(w.pod_uid, pod_uid);
  EXPECT_EQ(w.qos, qos);
  EXPECT_EQ(w.runtime, runtime);
}

TEST(WorkloadAttribution, SystemdDriverContainerdBurstable) {
  const workload w = workload_of_proc_cgroup(fixture("k8s-systemd-v2-containerd.txt"));
  expect_pod(w, "0c9d1e2f-3a4b-4c5d-8e6f-7a8b9c0d1e2f", "burstable", "containerd");
  EXPECT_EQ(w.container_id, "4f1c2b3a4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6e7f8");
  EXPECT_TRUE(w.slurm_job.empty());
}

TEST(WorkloadAttribution, CgroupfsDriverV1BestEffortBareId) {
  const workload w = workload_of_proc_cgroup(fixture("k8s-cgroupfs-v1.txt"));
  expect_pod(w, "5e8a1f3c-2b4d-4e6f-9a1b-3c5d7e9f1a2b", "besteffort", "");
  EXPECT_EQ(w.container_id, "9b8a7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f1a0b9c8d7e6f5a4b3c2d1e0f9a8b");
}

TEST(WorkloadAttribution, CrioGuaranteedInAChildCgroup) {
  const workload w = workload_of_proc_cgroup(fixture("k8s-systemd-v2-crio-guaranteed.txt"));
  expect_pod(w, "11111111-2222-3333-4444-555555555555", "guaranteed", "cri-o");
  EXPECT_EQ(w.container_id.size(), 64u);
}

TEST(WorkloadAttribution, ConmonIsThePodsButNoContainers) {
  const workload w = workload_of_proc_cgroup(fixture("k8s-crio-conmon.txt"));
  EXPECT_EQ(w.pod_uid, "0c9d1e2f-3a4b-4c5d-8e6f-7a8b9c0d1e2f");
  EXPECT_TRUE(w.container_id.empty());
}

TEST(WorkloadAttribution, SlurmJobsAndSteps) {
  const workload v2 = workload_of_proc_cgroup(fixture("slurm-v2.txt"));
  EXPECT_EQ(v2.slurm_job, "4242");
  EXPECT_EQ(v2.slurm_step, "0");
  EXPECT_TRUE(v2.pod_uid.empty());
  const workload v1 = workload_of_proc_cgroup(fixture("slurm-v1.txt"));
  EXPECT_EQ(v1.slurm_job, "77");
  EXPECT_EQ(v1.slurm_step, "batch");
  const workload multi = workload_of_proc_cgroup(fixture("slurm-v2-multiple-slurmd.txt"));
  EXPECT_EQ(multi.slurm_job, "9");
  EXPECT_EQ(multi.slurm_step, "extern");
}

TEST(WorkloadAttribution, OrdinaryProcessesAndLookalikesAreNobodys) {
  EXPECT_TRUE(workload_of_proc_cgroup(fixture("plain-session.txt")).empty());
  EXPECT_TRUE(workload_of_proc_cgroup("").empty());
  EXPECT_TRUE(workload_of_cgroup_path("/user.slice/job_12x/step_0").empty());
  // "pod" outside a kubepods hierarchy is not a pod.
  EXPECT_TRUE(
      workload_of_cgroup_path("/system.slice/pod0c9d1e2f-3a4b-4c5d-8e6f-7a8b9c0d1e2f").empty());
  // A malformed UID is not taken.
  EXPECT_TRUE(workload_of_cgroup_path("/kubepods/burstable/pod1234/abc").pod_uid.empty());
}

}  // namespace
}  // namespace vramkit::cluster

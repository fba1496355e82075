// Process owners read from a node tree laid out as the kubelet, containerd, CRI-O, Docker and
// slurmstepd leave it (tests/data/cluster/node): cgroup v1 and v2, systemd and cgroupfs drivers,
// /var/log/pods and /var/log/containers, the runtimes' state files, /proc/<pid>/{stat,status,
// environ,ns/pid}.
#include "vramkit/cluster/process_attribution.hpp"

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include <string>

namespace vramkit::cluster {
namespace {

namespace fs = std::filesystem;
using monitor::plan_source;
using monitor::process_owner;

const fs::path node = fs::path(VRAMKIT_SOURCE_DIR) / "tests/data/cluster/node";

process_attributor attributor(const fs::path& root = node) {
  attribution_options o;
  o.host_root = root;
  return process_attributor(o);
}

TEST(ProcessAttribution, ContainerdSystemdV2PodFromTheKubeletsLogLinks) {
  auto a = attributor();
  const process_owner o = a.owner_of(1001);
  EXPECT_EQ(o.pod_namespace, "ml");
  EXPECT_EQ(o.pod, "llama-ft-0");
  EXPECT_EQ(o.container, "trainer");
  EXPECT_EQ(o.pod_uid, "7d3c2a1b-5e6f-4a8b-9c0d-1e2f3a4b5c6d");
  std::string id;
  for (int i = 0; i < 32; ++i) id += "a1";
  EXPECT_EQ(o.container_id, id);
  EXPECT_EQ(o.namespace_pid, 1U);
  EXPECT_EQ(o.planned_bytes, 23622320128U);  // VRAMKIT_PLANNED_BYTES wins over the cap
  EXPECT_EQ(o.planned_from, plan_source::planned);
  EXPECT_TRUE(o.slurm_job.empty());
  EXPECT_EQ(monitor::workload_name(o), "pod ml/llama-ft-0");
  // A second process of the container: its own PID in the namespace, the same owner.
  const process_owner worker = a.owner_of(1002);
  EXPECT_EQ(worker.container, "trainer");
  EXPECT_EQ(worker.namespace_pid, 23U);
}

TEST(ProcessAttribution, HiddenCgroupPathFallsBackToThePidNamespace) {
  auto a = attributor();
  (void)a.owner_of(1001);
  const process_owner o = a.owner_of(1003);  // cgroup "0::/", same PID namespace as 1001
  EXPECT_EQ(o.pod, "llama-ft-0");
  EXPECT_EQ(o.container, "trainer");
  EXPECT_EQ(o.namespace_pid, 40U);
  // Its own environment names no plan: the container's is kept.
  EXPECT_EQ(o.planned_bytes, 23622320128U);
  // Asked first, before any process of that namespace is known, it is nobody's yet.
  auto fresh = attributor();
  EXPECT_TRUE(fresh.owner_of(1003).empty());
}

// The Kubernetes names an owner was attributed to.
void expect_names(const process_owner& o, const std::string& pod_namespace, const std::string& pod,
                  const std::string& container) {
  EXPECT_EQ(o.pod_namespace, pod_namespace);
  EXPECT_EQ(o.pod, pod);
  EXPECT_EQ(o.container, container);
}

TEST(ProcessAttribution, CrioGuaranteedNamesFromTheRuntimesStateAndTheCapAsPlan) {
  auto a = attributor();
  const process_owner o = a.owner_of(2001);
  expect_names(o, "serving", "vllm-7f9c8d-x2k4q", "server");
  EXPECT_EQ(o.pod_uid, "11111111-2222-3333-4444-555555555555");
  EXPECT_EQ(o.planned_bytes, 42949672960U);
  EXPECT_EQ(o.planned_from, plan_source::cap);
}

TEST(ProcessAttribution, DockerSystemdV1LabelsOfTheKubelet) {
  auto a = attributor();
  const process_owner o = a.owner_of(3001);
  expect_names(o, "research", "nb-0", "notebook");
  EXPECT_FALSE(o.planned_bytes);
  EXPECT_EQ(o.planned_from, plan_source::none);
}

TEST(ProcessAttribution, CgroupfsV1PodFromItsLogDirectoryWhenTheContainerIsUnknown) {
  auto a = attributor();
  const process_owner o = a.owner_of(3501);
  expect_names(o, "batch", "etl-28411230-7xk2p", "");
  EXPECT_EQ(o.container_id.size(), 64U);
  EXPECT_FALSE(o.planned_bytes) << "VRAMKIT_PLANNED_BYTES=garbage is no plan";
}

TEST(ProcessAttribution, SlurmJobsFromCgroupsOrTheEnvironment) {
  auto a = attributor();
  const process_owner v2 = a.owner_of(4001);
  EXPECT_EQ(v2.slurm_job, "4242");
  EXPECT_EQ(v2.slurm_step, "0");
  EXPECT_EQ(v2.planned_bytes, 6442450944U);
  EXPECT_FALSE(v2.namespace_pid) << "slurmstepd tasks share the host's PID namespace";
  EXPECT_EQ(monitor::workload_name(v2), "slurm job 4242");
  const process_owner v1 = a.owner_of(4101);
  EXPECT_EQ(v1.slurm_job, "77");
  EXPECT_EQ(v1.slurm_step, "batch");
  EXPECT_EQ(v1.planned_bytes, 4294967296U);  // "4GiB"
  EXPECT_EQ(v1.planned_from, plan_source::cap);
  const process_owner linuxproc = a.owner_of(4201);
  EXPECT_EQ(linuxproc.slurm_job, "99");
  EXPECT_EQ(linuxproc.slurm_step, "0");
}

TEST(ProcessAttribution, PlainDockerContainerAndHostProcesses) {
  auto a = attributor();
  const process_owner d = a.owner_of(5001);
  EXPECT_EQ(d.container, "ollama");
  EXPECT_TRUE(d.pod.empty());
  EXPECT_EQ(monitor::workload_name(d), "container ollama");
  EXPECT_TRUE(a.owner_of(6001).empty());
  EXPECT_TRUE(a.owner_of(999999).empty()) << "no such process";
}

TEST(ProcessAttribution, ReusedPidIsReadAgainAndLateLogDirectoriesAreFound) {
  const fs::path root = fs::path(::testing::TempDir()) / "vramkit-attribution-reuse";
  fs::remove_all(root);
  fs::create_directories(root);
  fs::copy(node, root, fs::copy_options::recursive | fs::copy_options::copy_symlinks);
  std::int64_t now = 0;
  attribution_options opt;
  opt.host_root = root;
  opt.clock_ms = [&] { return now; };
  opt.retry_after = std::chrono::milliseconds(5000);
  process_attributor a(opt);
  // The pod's log directory is created after its first process was seen.
  const std::string uid = "9f8e7d6c-5b4a-4392-8170-6f5e4d3c2b1a";
  fs::remove_all(root / "var/log/pods" / ("batch_etl-28411230-7xk2p_" + uid));
  EXPECT_TRUE(a.owner_of(3501).pod.empty());
  EXPECT_EQ(a.owner_of(3501).pod_uid, uid);
  fs::create_directories(root / "var/log/pods" / ("batch_etl-28411230-7xk2p_" + uid) / "etl");
  now = 1000;
  EXPECT_TRUE(a.owner_of(3501).pod.empty()) << "not read again before retry_after";
  now = 6000;
  EXPECT_EQ(a.owner_of(3501).pod, "etl-28411230-7xk2p");
  // PID 6001 ends and the number is reused by a Slurm task (another start time in stat).
  EXPECT_TRUE(a.owner_of(6001).empty());
  fs::copy_file(root / "proc/4001/cgroup", root / "proc/6001/cgroup",
                fs::copy_options::overwrite_existing);
  EXPECT_TRUE(a.owner_of(6001).empty()) << "same start time: the cached owner stands";
  {
    std::ofstream stat(root / "proc/6001/stat");
    stat << "6001 (torch run) S 1 6001 6001 0 -1 4194560 1 0 0 0 1 1 0 0 20 0 1 0 777777 1 1\n";
  }
  EXPECT_EQ(a.owner_of(6001).slurm_job, "4242");
  // A /proc without stat files (some sandboxes trim it): the cgroup file alone still names it.
  fs::remove(root / "proc/6001/stat");
  EXPECT_EQ(a.owner_of(6001).slurm_job, "4242");
  fs::remove_all(root / "proc/6001");
  EXPECT_TRUE(a.owner_of(6001).empty()) << "the process ended";
  fs::remove_all(root);
}

TEST(ProcessAttribution, KubeletAndRuntimeNameFormats) {
  auto pod = pod_of_log_directory(
      "kube-system_coredns-5d78c9869d-x7x2s_0c9d1e2f-3a4b-4c5d-8e6f-"
      "7a8b9c0d1e2f");
  ASSERT_TRUE(pod);
  EXPECT_EQ(pod->pod_namespace, "kube-system");
  EXPECT_EQ(pod->pod, "coredns-5d78c9869d-x7x2s");
  EXPECT_FALSE(pod_of_log_directory("0c9d1e2f-3a4b-4c5d-8e6f-7a8b9c0d1e2f"))
      << "the pre-1.14 layout: a bare UID names no pod";
  EXPECT_FALSE(pod_of_log_directory("ns_name_notauid"));

  const std::string id(64, 'f');
  auto c = container_of_log_link("web-0_default_nginx-sidecar-" + id + ".log");
  ASSERT_TRUE(c);
  EXPECT_EQ(c->first.pod, "web-0");
  EXPECT_EQ(c->first.pod_namespace, "default");
  EXPECT_EQ(c->first.container, "nginx-sidecar");
  EXPECT_EQ(c->second, id);
  // Names cut at 255 bytes by the kubelet lose the end of the ID: not taken.
  EXPECT_FALSE(container_of_log_link("web-0_default_nginx-" + id.substr(0, 40) + ".log"));
  EXPECT_FALSE(container_of_log_link("web-0_default_nginx-" + id));

  EXPECT_EQ(names_of_runtime_config("not json").container, "");
  const kube_names containerd = names_of_runtime_config(
      R"({"annotations":{"io.kubernetes.cri.container-type":"container",
          "io.kubernetes.cri.container-name":"trainer","io.kubernetes.cri.sandbox-name":"p",
          "io.kubernetes.cri.sandbox-namespace":"ml","io.kubernetes.cri.sandbox-uid":"u"}})");
  EXPECT_EQ(containerd.container, "trainer");
  EXPECT_EQ(containerd.pod, "p");
  EXPECT_EQ(containerd.pod_namespace, "ml");

  const std::string env("A=1\0SLURM_JOB_ID=12\0SLURM_JOB_IDX=3\0", 36);
  EXPECT_EQ(environ_value(env, "SLURM_JOB_ID"), "12");
  EXPECT_EQ(environ_value(env, "SLURM_JOB"), std::nullopt);
  EXPECT_EQ(environ_value(env, "A"), "1");

  EXPECT_EQ(namespace_pid_of_status("Name:\tx\nNSpid:\t4242\t17\nVmRSS:\t1 kB\n"), 17U);
  EXPECT_EQ(namespace_pid_of_status("Name:\tx\nNSpid:\t4242\n"), std::nullopt);
  EXPECT_EQ(namespace_pid_of_status("Name:\tx\n"), std::nullopt);
}

}  // namespace
}  // namespace vramkit::cluster

// proc_workload_reader: the workload label of a process under a /proc tree built from the cgroup
// files of real nodes (tests/data/cluster/cgroup).
#include "vramkit/cluster/proc_workload_reader.hpp"

#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace vramkit::cluster {
namespace {

namespace fs = std::filesystem;

// A /proc tree of three processes: a pod's (101), a Slurm job's (102) and a login shell's (103),
// removed after the test.
struct proc_tree {
  proc_tree()
      : root(fs::temp_directory_path() / ("vramkit-proc-workload-" + std::to_string(::getpid()))) {
    fs::remove_all(root);  // a crashed run's
    const fs::path data = fs::path(VRAMKIT_SOURCE_DIR) / "tests/data/cluster/cgroup";
    add(101, data / "k8s-systemd-v2-containerd.txt");
    add(102, data / "slurm-v2.txt");
    fs::create_directories(root / "proc" / "103");
    std::ofstream(root / "proc" / "103" / "cgroup") << "0::/user.slice/user-1000.slice\n";
  }
  ~proc_tree() { fs::remove_all(root); }
  proc_tree(const proc_tree&) = delete;
  proc_tree& operator=(const proc_tree&) = delete;

  void add(std::uint32_t pid, const fs::path& cgroup) const {
    const fs::path dir = root / "proc" / std::to_string(pid);
    fs::create_directories(dir);
    fs::copy_file(cgroup, dir / "cgroup");
  }

  fs::path root;
};

TEST(ProcWorkloadReader, LabelsAPodByItsUid) {
  const proc_tree tree;
  EXPECT_EQ(workload_label(tree.root, 101), "pod 0c9d1e2f-3a4b-4c5d-8e6f-7a8b9c0d1e2f");
}

TEST(ProcWorkloadReader, LabelsASlurmJobByItsId) {
  const proc_tree tree;
  EXPECT_EQ(workload_label(tree.root, 102), "slurm job 4242");
}

TEST(ProcWorkloadReader, NeitherOrNoFileIsNoLabel) {
  const proc_tree tree;
  EXPECT_EQ(workload_label(tree.root, 103), "");
  EXPECT_EQ(workload_label(tree.root, 104), "");
  EXPECT_EQ(workload_label(tree.root / "missing", 101), "");
}

TEST(ProcWorkloadReader, TheReaderIsBoundToItsRoot) {
  const proc_tree tree;
  const auto reader = proc_workload_reader(tree.root);
  EXPECT_EQ(reader(102), "slurm job 4242");
  EXPECT_EQ(reader(104), "");
}

}  // namespace
}  // namespace vramkit::cluster

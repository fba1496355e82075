// Helpers shared by the subcommands: reading an input file, waiting for SIGINT/SIGTERM.
#include <pthread.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "commands.hpp"
#include "vramkit/cluster/workload_attribution.hpp"
#include "vramkit/core/error.hpp"

namespace vramkit::cli {

std::string read_input_file(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw invalid_input(fmt::format("cannot read {} '{}'", what, path));
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

stop_signals::stop_signals() : set_{} {
  sigemptyset(&set_);
  sigaddset(&set_, SIGINT);
  sigaddset(&set_, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set_, nullptr);
}

void stop_signals::wait() {
  int sig = 0;
  sigwait(&set_, &sig);
}

std::function<std::string(std::uint32_t)> workload_reader(const std::string& host_root) {
  return [root = std::filesystem::path(host_root)](std::uint32_t pid) -> std::string {
    std::ifstream in(root / "proc" / std::to_string(pid) / "cgroup");
    if (!in) return {};
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    auto w = vramkit::cluster::workload_of_proc_cgroup(text);
    if (!w.pod_uid.empty()) return "pod " + w.pod_uid;
    if (!w.slurm_job.empty()) return "slurm job " + w.slurm_job;
    return {};
  };
}

}  // namespace vramkit::cli

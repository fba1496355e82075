// Helpers shared by the subcommands: reading an input file, waiting for SIGINT/SIGTERM.
#include <pthread.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

#include <fmt/format.h>

#include "commands.hpp"
#include "vramkit/cluster/process_attribution.hpp"
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

std::function<monitor::process_owner(std::uint32_t)> workload_reader(const std::string& host_root) {
  vramkit::cluster::attribution_options o;
  o.host_root = host_root;
  auto attributor = std::make_shared<vramkit::cluster::process_attributor>(o);
  return [attributor](std::uint32_t pid) { return attributor->owner_of(pid); };
}

}  // namespace vramkit::cli

// process_signal: ownership from the owner of /proc/<pid> (the process's real uid as the kernel
// shows it), then kill(2).
#include "vramkit/monitor/process_signal.hpp"

#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>

namespace vramkit::monitor {

std::string signal_name(int sig) {
  switch (sig) {
    case SIGTERM:
      return "SIGTERM";
    case SIGKILL:
      return "SIGKILL";
    case SIGINT:
      return "SIGINT";
    default:
      return fmt::format("signal {}", sig);
  }
}

std::string signal_refusal(std::uint32_t pid) {
  if (pid == 0) return "no process selected";
  struct stat st {};
  if (stat(fmt::format("/proc/{}", pid).c_str(), &st) != 0)
    return fmt::format("pid {} is not visible here (gone, or in another pid namespace)", pid);
  uid_t me = geteuid();
  if (me != 0 && st.st_uid != me)
    return fmt::format("pid {} belongs to uid {}: only your own processes (or as root)", pid,
                       st.st_uid);
  return {};
}

signal_outcome send_process_signal(std::uint32_t pid, int sig) {
  if (auto why = signal_refusal(pid); !why.empty()) return {false, why};
  if (kill(static_cast<pid_t>(pid), sig) != 0)
    return {false,
            fmt::format("{} to pid {} failed: {}", signal_name(sig), pid, std::strerror(errno))};
  return {true, fmt::format("sent {} to pid {}", signal_name(sig), pid)};
}

}  // namespace vramkit::monitor

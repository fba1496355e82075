// process_signal: sending a signal to a GPU process from the live view, with the rule nvitop
// follows: a user may signal only processes of their own effective uid; root may signal any.
// Never throws; thread-safe.
#pragma once

#include <cstdint>
#include <string>

namespace vramkit::monitor {

struct signal_outcome {
  bool sent = false;
  std::string message;  ///< one line for the status bar: what was sent, or why not
};

/// Why the caller may not signal `pid` (it does not exist, or another user owns it); empty when
/// it may.
std::string signal_refusal(std::uint32_t pid);

/// Sends `sig` to `pid` when signal_refusal(pid) is empty; says what happened either way.
signal_outcome send_process_signal(std::uint32_t pid, int sig);

/// "SIGTERM", "SIGKILL", "SIGINT", else "signal N".
std::string signal_name(int sig);

}  // namespace vramkit::monitor

// terminal_view: the live ncurses view of `vramkit watch` (GPU panels with memory bars and history
// graphs of memory, utilization, temperature, power and PCIe, the process table with selection,
// filter, grouping and signals, host memory, a help screen, replay controls) and the plain
// snapshot table of `--once`. The live view owns the terminal while it runs and restores it on
// every exit path. Not thread-safe: run it on one thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "vramkit/monitor/process_signal.hpp"
#include "vramkit/monitor/sample.hpp"

namespace vramkit::monitor {

/// Process-table ordering, switched with the keys m, p and c.
enum class process_sort { memory, pid, command };

/// Renders one sample as a plain-text table (GPUs, processes, host), as `watch --once` prints it.
std::string format_snapshot(const sample& s);

/// Where the live view gets samples: called once per refresh; nullopt means the source is done:
/// the last frame stays on screen until q.
using sample_source = std::function<std::optional<sample>()>;

struct terminal_view_options {
  std::chrono::milliseconds interval{1000};
  std::string title = "vramkit watch";
  std::string notice;  ///< one line shown under the title (e.g. "no NVIDIA driver found ...")
  /// Replay: the whole recording, oldest first. When set, `source` is not called: the view steps
  /// through it at the recording's pace times `speed`, with pause, seek and speed keys.
  std::shared_ptr<const std::vector<sample>> recording;
  double speed = 1.0;
  /// Longest wait between two replayed samples (before `speed`): a longer gap in the recording is
  /// skipped, and the view says so.
  std::chrono::milliseconds max_gap{5000};
  /// Sends a signal to a process (keys T, K, I after confirmation); unset = send_process_signal.
  std::function<signal_outcome(std::uint32_t pid, int sig)> send_signal;
  /// Checked before asking for confirmation; unset = signal_refusal.
  std::function<std::string(std::uint32_t pid)> refusal;
};

/// True when this build contains the ncurses view.
bool terminal_view_built() noexcept;

/// The help screen's text: every key of the live view, one per line (also in docs/monitor.md).
std::vector<std::string> terminal_view_keys();

/// Runs the live view until q or Ctrl-C; returns normally in every case with the
/// terminal restored. Throws vramkit::error when the build has no ncurses or stdout is not a
/// terminal.
void run_terminal_view(const sample_source& source, const terminal_view_options& options);

}  // namespace vramkit::monitor

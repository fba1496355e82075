// terminal_view: the live ncurses view of `vramkit watch` (GPU panels with memory bars and history
// graphs, the process table, host memory) and the plain snapshot table of `--once`. The live view
// owns the terminal while it runs and restores it on every exit path. Not thread-safe: run it on
// one thread.
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "vramkit/monitor/sample.hpp"

namespace vramkit::monitor {

/// Process-table ordering, switched with the keys m, p and c.
enum class process_sort { memory, pid, command };

/// Renders one sample as a plain-text table (GPUs, processes, host), as `watch --once` prints it.
std::string format_snapshot(const sample& s);

/// Where the live view gets samples: called once per refresh; nullopt means the source is done
/// (replay): the last frame stays on screen until q.
using sample_source = std::function<std::optional<sample>()>;

struct terminal_view_options {
  std::chrono::milliseconds interval{1000};
  std::string title = "vramkit watch";
  std::string notice;  ///< one line shown under the title (e.g. "no NVIDIA driver found ...")
  /// Time to wait after showing `current` before asking for the next sample; unset = interval.
  /// Replay uses it to keep the recording's pace.
  std::function<std::chrono::milliseconds(const sample& current)> delay_after;
};

/// True when this build contains the ncurses view.
bool terminal_view_built() noexcept;

/// Runs the live view until q or Ctrl-C; returns normally in every case with the
/// terminal restored. Throws vramkit::error when the build has no ncurses or stdout is not a
/// terminal.
void run_terminal_view(const sample_source& source, const terminal_view_options& options);

}  // namespace vramkit::monitor

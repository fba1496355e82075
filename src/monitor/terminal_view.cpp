// The ncurses live view of `vramkit watch`. One thread: it polls keys every 100 ms, asks the
// source for a sample when one is due, and redraws. SIGINT sets a flag the loop checks, so Ctrl-C
// leaves through the same path as q and the terminal is always restored (endwin).
#include "vramkit/monitor/terminal_view.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <deque>
#include <map>

#include "vramkit/core/error.hpp"
#include "vramkit/core/units.hpp"
#include "vramkit/monitor/recording.hpp"

#if defined(VRAMKIT_MONITOR_CURSES)
#include <curses.h>
#include <langinfo.h>

#include <clocale>
#endif

namespace vramkit::monitor {

bool terminal_view_built() noexcept {
#if defined(VRAMKIT_MONITOR_CURSES)
  return true;
#else
  return false;
#endif
}

#if !defined(VRAMKIT_MONITOR_CURSES)

void run_terminal_view(const sample_source&, const terminal_view_options&) {
  throw error("built without ncurses: use vramkit watch --once or --json");
}

#else

namespace {

volatile std::sig_atomic_t g_interrupted = 0;
void on_sigint(int) { g_interrupted = 1; }

constexpr std::size_t k_history_points = 600;

struct view_state {
  process_sort sort = process_sort::memory;
  int selected = -1;                                   // -1 = all devices
  std::map<std::string, std::deque<double> > history;  // uuid/index -> used fraction per sample
  bool utf8 = false;
};

std::string key_of(const gpu_sample& g) {
  return g.uuid.empty() ? fmt::format("#{}", g.index) : g.uuid;
}

std::string fit(const std::string& s, int width) {
  if (width <= 0) return {};
  if (static_cast<int>(s.size()) <= width) return s;
  return s.substr(0, static_cast<std::size_t>(width));
}

void put(int y, int x, const std::string& s, int attr = 0) {
  if (y < 0 || y >= LINES || x >= COLS) return;
  if (attr != 0) attron(attr);
  mvaddnstr(y, x, s.c_str(), COLS - x);
  if (attr != 0) attroff(attr);
}

// A memory bar: used (solid) with the reserved part marked, then free, over `width` cells.
void draw_bar(int y, int x, int width, double used_frac, double reserved_frac) {
  if (width < 3) return;
  int inner = width - 2;
  int used = std::clamp(static_cast<int>(used_frac * inner + 0.5), 0, inner);
  int reserved = std::clamp(static_cast<int>(reserved_frac * inner + 0.5), 0, used);
  put(y, x, "[");
  for (int i = 0; i < inner; ++i) {
    char c = i < reserved ? 'r' : i < used ? '#' : '.';
    int attr = i < reserved ? COLOR_PAIR(3) : i < used ? COLOR_PAIR(used_frac > 0.9 ? 2 : 1) : 0;
    if (attr != 0) attron(attr);
    mvaddch(y, x + 1 + i, c);
    if (attr != 0) attroff(attr);
  }
  put(y, x + width - 1, "]");
}

// The history graph: one column per sample (newest at the right), `height` rows, 8 levels per row
// with block characters where the terminal speaks UTF-8, '#' otherwise.
void draw_graph(int y, int x, int width, int height, const std::deque<double>& points, bool utf8) {
  static const char* blocks[] = {" ",      "\u2581", "\u2582", "\u2583", "\u2584",
                                 "\u2585", "\u2586", "\u2587", "\u2588"};
  int n = std::min<int>(width, static_cast<int>(points.size()));
  for (int col = 0; col < n; ++col) {
    double v = std::clamp(
        points[points.size() - static_cast<std::size_t>(n) + static_cast<std::size_t>(col)], 0.0,
        1.0);
    int eighths = static_cast<int>(v * height * 8 + 0.5);
    for (int row = 0; row < height; ++row) {
      int level = std::clamp(eighths - row * 8, 0, 8);
      int yy = y + height - 1 - row;
      if (utf8) {
        attron(COLOR_PAIR(1));
        mvaddstr(yy, x + width - n + col, blocks[level]);
        attroff(COLOR_PAIR(1));
      } else if (level >= 4) {
        mvaddch(yy, x + width - n + col, '#');
      }
    }
  }
}

std::string bytes(const std::optional<std::uint64_t>& v) {
  return v ? format_bytes(static_cast<double>(*v)) : "-";
}

void draw(const sample& s, view_state& st, const terminal_view_options& opt) {
  erase();
  int y = 0;
  const char* sort_name = st.sort == process_sort::memory ? "memory"
                          : st.sort == process_sort::pid ? "pid"
                                                         : "command";
  std::string dev_name = st.selected < 0 ? "all" : std::to_string(st.selected);
  put(y++, 0,
      fit(fmt::format("{}  {}  sort: {}  device: {}", opt.title, format_iso8601_ms(s.timestamp_ms),
                      sort_name, dev_name),
          COLS),
      A_BOLD);
  if (!opt.notice.empty()) put(y++, 0, fit(opt.notice, COLS), COLOR_PAIR(2));
  if (s.gpus.empty() && !s.gpu_unavailable_reason.empty() && opt.notice.empty())
    put(y++, 0, fit(s.gpu_unavailable_reason, COLS), COLOR_PAIR(2));

  // Rows: keep 2 for the key help and host lines (2-4), the rest shared by GPUs and processes.
  int host_rows =
      2 + static_cast<int>(std::min<std::size_t>(s.host.numa.size(), 4)) + (s.host.cgroup ? 1 : 0);
  int avail = LINES - y - host_rows - 1;
  int gpus = static_cast<int>(s.gpus.size());
  std::size_t proc_count = 0;
  for (const auto& g : s.gpus) proc_count += g.processes.size();
  // The process table gets what it needs up to half the space; graphs share the rest.
  int proc_rows = std::min(static_cast<int>(proc_count) + 2, std::max(4, avail / 2));
  int per_gpu = gpus == 0 ? 0 : std::max(1, (avail - proc_rows) / gpus);
  int graph_h = per_gpu >= 5 ? std::min(8, per_gpu - 2) : 0;
  for (const auto& g : s.gpus) {
    if (y >= LINES - host_rows - 2) break;
    bool sel = st.selected == static_cast<int>(g.index);
    std::string head = fmt::format("GPU {} {}", g.index, g.name);
    if (g.state != device_state::ok) {
      put(y++, 0, fit(head + "  [" + to_string(g.state) + "] " + g.state_reason, COLS),
          COLOR_PAIR(2) | (sel ? A_REVERSE : 0));
      continue;
    }
    std::string figures;
    if (g.utilization_gpu_percent)
      figures += fmt::format("  util {:.0f}%", *g.utilization_gpu_percent);
    if (g.temperature_celsius) figures += fmt::format("  {:.0f}C", *g.temperature_celsius);
    if (g.power_watts) figures += fmt::format("  {:.0f}W", *g.power_watts);
    if (g.sm_clock_mhz) figures += fmt::format("  SM {} MHz", *g.sm_clock_mhz);
    if (g.pcie_rx_bytes_per_second)
      figures += "  PCIe rx " + format_bandwidth(*g.pcie_rx_bytes_per_second) + " tx " +
                 format_bandwidth(g.pcie_tx_bytes_per_second.value_or(0));
    put(y++, 0, fit(head + figures, COLS), A_BOLD | (sel ? A_REVERSE : 0));
    double total = static_cast<double>(g.memory_total_bytes.value_or(0));
    double used = total > 0 ? static_cast<double>(g.memory_used_bytes.value_or(0)) / total : 0;
    double reserved =
        total > 0 ? static_cast<double>(g.memory_reserved_bytes.value_or(0)) / total : 0;
    std::string label = fmt::format(
        " {} / {}{}", bytes(g.memory_used_bytes), bytes(g.memory_total_bytes),
        g.memory_reserved_bytes ? " (reserved " + bytes(g.memory_reserved_bytes) + ")" : "");
    int bar_w = std::max(10, COLS - static_cast<int>(label.size()) - 6);
    put(y, 0, "mem");
    draw_bar(y, 4, bar_w, used, reserved);
    put(y++, 4 + bar_w, label);
    if (graph_h > 0 && y + graph_h < LINES - host_rows - 2) {
      draw_graph(y, 4, COLS - 5, graph_h, st.history[key_of(g)], st.utf8);
      put(y, 0, "100%");
      put(y + graph_h - 1, 0, "  0%");
      y += graph_h;
    }
  }

  // Process table.
  struct row {
    unsigned dev;
    const gpu_process* p;
  };
  std::vector<row> rows;
  for (const auto& g : s.gpus) {
    if (st.selected >= 0 && static_cast<int>(g.index) != st.selected) continue;
    for (const auto& p : g.processes) rows.push_back({g.index, &p});
  }
  std::stable_sort(rows.begin(), rows.end(), [&](const row& a, const row& b) {
    switch (st.sort) {
      case process_sort::memory:
        return a.p->used_bytes.value_or(0) > b.p->used_bytes.value_or(0);
      case process_sort::pid:
        return a.p->pid < b.p->pid;
      case process_sort::command:
        return a.p->command < b.p->command;
    }
    return false;
  });
  y++;
  if (y < LINES - host_rows - 1) {
    put(y++, 0,
        fit(fmt::format("{:>8} {:<10} {:>3} {:>11} {:>11}  {}", "PID", "USER", "GPU", "GPU MEM",
                        "HOST RSS", "COMMAND"),
            COLS),
        A_REVERSE);
  }
  for (const auto& r : rows) {
    if (y >= LINES - host_rows - 1) break;
    put(y++, 0,
        fit(fmt::format(
                "{:>8} {:<10} {:>3} {:>11} {:>11}  {}", r.p->pid, fit(r.p->user, 10), r.dev,
                r.p->used_bytes ? format_bytes(static_cast<double>(*r.p->used_bytes)) : "n/a",
                bytes(r.p->host_rss_bytes), r.p->command),
            COLS));
  }
  if (rows.empty() && y < LINES - host_rows - 1)
    put(y++, 0, s.gpus.empty() ? "" : "no GPU processes");

  // Host panel at the bottom.
  y = LINES - host_rows - 1;
  if (s.host.memory) {
    const auto& m = *s.host.memory;
    double total = static_cast<double>(m.total_bytes);
    double in_use =
        total - static_cast<double>(m.available_bytes.value_or(m.free_bytes.value_or(0)));
    std::string label =
        fmt::format(" in use {} / {}  available {}  cached {}  mlocked {}", format_bytes(in_use),
                    format_bytes(total), bytes(m.available_bytes), bytes(m.cached_bytes),
                    bytes(m.mlocked_bytes));
    int bar_w = std::max(10, COLS / 3);
    put(y, 0, "host");
    draw_bar(y, 5, bar_w, total > 0 ? in_use / total : 0, 0);
    put(y++, 5 + bar_w, fit(label, COLS - 5 - bar_w));
  } else {
    put(y++, 0, "host memory: /proc/meminfo not readable");
  }
  for (std::size_t i = 0; i < s.host.numa.size() && i < 4; ++i) {
    const auto& n = s.host.numa[i];
    put(y++, 0,
        fit(fmt::format("  NUMA {}: free {} of {}", n.node,
                        format_bytes(static_cast<double>(n.free_bytes)),
                        format_bytes(static_cast<double>(n.total_bytes))),
            COLS));
  }
  if (s.host.cgroup) {
    put(y++, 0,
        fit(fmt::format("  cgroup v{}: usage {}  limit {}", s.host.cgroup->version,
                        bytes(s.host.cgroup->usage_bytes),
                        s.host.cgroup->limit_bytes ? bytes(s.host.cgroup->limit_bytes) : "none"),
            COLS));
  }
  put(LINES - 1, 0, fit("q quit  m/p/c sort by memory/pid/command  d/Tab device", COLS), A_DIM);
  refresh();
}

void remember(const sample& s, view_state& st) {
  for (const auto& g : s.gpus) {
    auto& h = st.history[key_of(g)];
    double total = static_cast<double>(g.memory_total_bytes.value_or(0));
    h.push_back(total > 0 ? static_cast<double>(g.memory_used_bytes.value_or(0)) / total : 0);
    while (h.size() > k_history_points) h.pop_front();
  }
}

// Restores the terminal and the previous SIGINT handler on every way out of the view.
struct curses_session {
  struct sigaction old {};
  curses_session() {
    std::setlocale(LC_ALL, "");
    struct sigaction sa {};
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old);
    g_interrupted = 0;
    initscr();
    cbreak();
    noecho();
    keypad(stdscr, TRUE);
    curs_set(0);
    timeout(100);
    if (has_colors()) {
      start_color();
      use_default_colors();
      init_pair(1, COLOR_GREEN, -1);
      init_pair(2, COLOR_RED, -1);
      init_pair(3, COLOR_YELLOW, -1);
    }
  }
  ~curses_session() {
    endwin();
    sigaction(SIGINT, &old, nullptr);
  }
};

}  // namespace

void run_terminal_view(const sample_source& source, const terminal_view_options& options) {
  if (isatty(STDOUT_FILENO) == 0 || isatty(STDIN_FILENO) == 0) {
    throw error("the live view needs a terminal: use --once, --json or --csv FILE");
  }
  curses_session session;
  view_state st;
  const char* codeset = nl_langinfo(CODESET);
  st.utf8 = codeset != nullptr && std::string(codeset) == "UTF-8";
  std::optional<sample> current;
  auto next_due = std::chrono::steady_clock::now();
  while (g_interrupted == 0) {
    auto now = std::chrono::steady_clock::now();
    bool dirty = false;
    if (now >= next_due) {
      auto s = source();
      if (!s) {
        // The recording is over: keep its last frame on screen until q.
        next_due = std::chrono::steady_clock::time_point::max();
        if (current) {
          draw(*current, st, options);
          move(LINES - 1, 0);
          clrtoeol();
          put(LINES - 1, 0, "end of recording: q to quit", A_BOLD);
          refresh();
        } else {
          return;
        }
        continue;
      }
      remember(*s, st);
      current = std::move(s);
      auto delay = options.delay_after ? options.delay_after(*current) : options.interval;
      next_due = now + delay;
      dirty = true;
    }
    int ch = getch();
    switch (ch) {
      case 'q':
      case 'Q':
        return;
      case 'm':
        st.sort = process_sort::memory;
        dirty = true;
        break;
      case 'p':
        st.sort = process_sort::pid;
        dirty = true;
        break;
      case 'c':
        st.sort = process_sort::command;
        dirty = true;
        break;
      case 'd':
      case '\t': {
        int n = current ? static_cast<int>(current->gpus.size()) : 0;
        if (n == 0) {
          st.selected = -1;
        } else {
          // all -> first device -> ... -> last device -> all
          int pos = -1;
          for (int i = 0; i < n; ++i) {
            if (static_cast<int>(current->gpus[static_cast<std::size_t>(i)].index) == st.selected)
              pos = i;
          }
          pos = pos + 1 >= n ? -1 : pos + 1;
          st.selected =
              pos < 0 ? -1 : static_cast<int>(current->gpus[static_cast<std::size_t>(pos)].index);
        }
        dirty = true;
        break;
      }
      case KEY_RESIZE:
        clear();
        dirty = true;
        break;
      default:
        break;
    }
    if (dirty && current) {
      draw(*current, st, options);
      if (next_due == std::chrono::steady_clock::time_point::max()) {
        move(LINES - 1, 0);
        clrtoeol();
        put(LINES - 1, 0, "end of recording: q to quit", A_BOLD);
        refresh();
      }
    }
  }
}

#endif

}  // namespace vramkit::monitor

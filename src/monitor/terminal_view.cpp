// The ncurses live view of `vramkit watch`. One thread: it polls keys every 100 ms, asks the
// source for a sample when one is due (or steps through the recording in replay), and redraws.
// SIGINT sets a flag the loop checks, so Ctrl-C leaves through the same path as q and the terminal
// is always restored (endwin).
#include "vramkit/monitor/terminal_view.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <ctime>
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

std::vector<std::string> terminal_view_keys() {
  return {
      "q          quit (Ctrl-C too)",
      "h ?        this help (any key closes it)",
      "m p c      sort processes by GPU memory / pid / command",
      "d Tab      show one device after the other, then all (the selected one is highlighted)",
      "Up Down    select a process; PgUp PgDn a page; Home End the first / last (live view)",
      // One entry split over two lines, not two entries.
      // NOLINTNEXTLINE(bugprone-suspicious-missing-comma)
      "/          filter processes: type text (pid, user, command, workload), Enter keeps, Esc "
      "clears",
      "g          group processes by workload (Kubernetes pod or Slurm job)",
      "T K I      send SIGTERM / SIGKILL / SIGINT to the selected process (asks y/n first;",
      "           only your own processes unless you are root)",
      "Space      replay: pause / resume",
      "Left Right replay: seek 10 s back / forward (Shift: 60 s); Home End: first / last sample",
      "+ -        replay: twice / half the speed",
  };
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

// One row of the process table.
struct proc_row {
  unsigned dev = 0;
  gpu_process p;
};

struct pending_signal {
  std::uint32_t pid = 0;
  int sig = 0;
  std::string command;
};

struct view_state {
  process_sort sort = process_sort::memory;
  int selected = -1;           // device index, -1 = all devices
  std::deque<sample> history;  // newest last
  bool utf8 = false;
  bool help = false;
  bool group = false;
  bool editing_filter = false;
  std::string filter;
  std::uint32_t selected_pid = 0;  // the selected process, kept across refreshes
  unsigned selected_pid_dev = 0;
  int selected_row = 0;
  int scroll = 0;
  int page_rows = 10;
  std::optional<pending_signal> confirm;
  std::string message;  // one-line status (signal sent, refused, gap skipped)
  // replay
  bool replay = false;
  std::size_t pos = 0;
  bool paused = false;
  double speed = 1.0;
  bool at_end = false;
  std::vector<proc_row> rows;  // as last drawn, filtered and ordered
};

std::string key_of(const gpu_sample& g) {
  return g.uuid.empty() ? fmt::format("#{}", g.index) : g.uuid;
}

// Display width in cells of UTF-8 text (one cell per code point; the view draws no wide glyphs).
int cells(const std::string& s) {
  int n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80 ? 1 : 0;
  return n;
}

std::string fit(const std::string& s, int width) {
  if (width <= 0) return {};
  if (cells(s) <= width) return s;
  std::string out;
  int n = 0;
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if ((c & 0xC0) != 0x80 && n++ == width) break;
    out += ch;
  }
  return out;
}

void put(int y, int x, const std::string& s, int attr = 0) {
  if (y < 0 || y >= LINES || x >= COLS || x < 0) return;
  if (attr != 0) attron(attr);
  mvaddstr(y, x, fit(s, COLS - x).c_str());
  if (attr != 0) attroff(attr);
}

std::string bytes(const std::optional<std::uint64_t>& v) {
  return v ? format_bytes(static_cast<double>(*v)) : "-";
}

std::string clock_hms(std::int64_t epoch_ms) {
  const auto t = static_cast<std::time_t>(epoch_ms / 1000);
  std::tm tm{};
  gmtime_r(&t, &tm);
  return fmt::format("{:02}:{:02}:{:02}", tm.tm_hour, tm.tm_min, tm.tm_sec);
}

std::string duration_text(std::int64_t ms) {
  auto s = ms / 1000;
  if (s >= 3600) return fmt::format("{}h{:02}m", s / 3600, (s / 60) % 60);
  if (s >= 60) return fmt::format("{}m{:02}s", s / 60, s % 60);
  return fmt::format("{:.1f}s", static_cast<double>(ms) / 1000);
}

// A memory bar: used (solid) with the reserved part marked, then free, over `width` cells.
void draw_bar(int y, int x, int width, double used_frac, double reserved_frac) {
  if (width < 3) return;
  int inner = width - 2;
  int used = std::clamp(static_cast<int>(std::lround(used_frac * inner)), 0, inner);
  int reserved = std::clamp(static_cast<int>(std::lround(reserved_frac * inner)), 0, used);
  put(y, x, "[");
  for (int i = 0; i < inner; ++i) {
    char c = i < reserved ? 'r' : i < used ? '#' : '.';
    const int attr = static_cast<int>(i < reserved ? COLOR_PAIR(3)
                                      : i < used ? COLOR_PAIR(used_frac > 0.9 ? 2 : 1)
                                                 : 0);
    if (attr != 0) attron(attr);
    mvaddch(y, x + 1 + i, c);
    if (attr != 0) attroff(attr);
  }
  put(y, x + width - 1, "]");
}

// One figure of one GPU over the history, oldest first; empty where the sample has no value.
using series = std::vector<std::optional<double> >;

series series_of(const std::deque<sample>& h, const std::string& key,
                 const std::function<std::optional<double>(const gpu_sample&)>& get) {
  series out;
  out.reserve(h.size());
  for (const auto& s : h) {
    std::optional<double> v;
    for (const auto& g : s.gpus) {
      if (key_of(g) == key && g.state == device_state::ok) v = get(g);
    }
    out.push_back(v);
  }
  return out;
}

// A graph of the last `width` points of `points` scaled to [0, top], `height` rows, newest at the
// right, 8 levels per row with block characters where the terminal speaks UTF-8, ASCII otherwise.
void draw_graph(int y, int x, int width, int height, const series& points, double top, bool utf8,
                int color) {
  static const char* blocks[] = {" ",      "\u2581", "\u2582", "\u2583", "\u2584",
                                 "\u2585", "\u2586", "\u2587", "\u2588"};
  static const char ascii[] = {' ', ' ', '.', '.', '-', '-', '=', '=', '#'};
  int n = std::min<int>(width, static_cast<int>(points.size()));
  for (int col = 0; col < n; ++col) {
    const auto& p =
        points[points.size() - static_cast<std::size_t>(n) + static_cast<std::size_t>(col)];
    int xx = x + width - n + col;
    if (!p) {
      if (height == 1) put(y, xx, utf8 ? "\u00b7" : " ", A_DIM);
      continue;
    }
    double v = top > 0 ? std::clamp(*p / top, 0.0, 1.0) : 0.0;
    int eighths = static_cast<int>(std::lround(v * height * 8));
    if (*p > 0 && eighths == 0) eighths = 1;  // a non-zero value is never drawn as nothing
    for (int row = 0; row < height; ++row) {
      int level = std::clamp(eighths - row * 8, 0, 8);
      int yy = y + height - 1 - row;
      attron(COLOR_PAIR(color));
      if (utf8)
        mvaddstr(yy, xx, blocks[level]);
      else
        mvaddch(yy, xx, ascii[level]);
      attroff(COLOR_PAIR(color));
    }
  }
}

double max_of(const series& s, double floor_value) {
  double m = floor_value;
  for (const auto& v : s)
    if (v) m = std::max(m, *v);
  return m;
}

// The wall-clock axis under a graph of `width` columns ending at the newest sample: tick marks
// with HH:MM:SS (UTC) of the samples under them, labels never overlapping.
void draw_time_axis(int y, int x, int width, const std::deque<sample>& h) {
  int n = std::min<int>(width, static_cast<int>(h.size()));
  if (n <= 0) return;
  auto t_at = [&](int col) {  // col in [0, n)
    return h[h.size() - static_cast<std::size_t>(n) + static_cast<std::size_t>(col)].timestamp_ms;
  };
  const int label_w = 8;
  int left = x + width - n;
  // Ticks every 20 columns back from the newest sample (whose time is always shown), then the
  // oldest; labels placed right to left, one skipped where it would touch its right neighbour.
  std::vector<int> ticks;
  for (int col = n - 1; col >= 0; col -= 20) ticks.push_back(col);
  if (ticks.back() != 0) ticks.push_back(0);
  int limit = x + width;  // labels end before this column
  for (int col : ticks) {
    int xx = left + col;
    int lx = std::max(std::min(xx - label_w / 2, x + width - label_w), x);
    if (lx + label_w > limit) continue;
    mvaddstr(y, xx, "|");
    put(y + 1, lx, clock_hms(t_at(col)), A_DIM);
    limit = lx - 2;
  }
  put(y, x + width + 1, "UTC", A_DIM);
}

// Rows of one GPU panel: compact = header + memory bar; full adds the memory graph (mem_h rows),
// five one-row graphs and the two-row time axis.
constexpr int k_compact_rows = 2;
constexpr int k_detail_rows = 2 + 5 + 2;

// One labelled one-row graph: "label value | graph | scale".
void draw_spark(int y, const std::string& label, const std::string& value, const series& s,
                double top, const std::string& scale, bool utf8, int color, int graph_x,
                int graph_w) {
  put(y, 0, fmt::format("{:<6}{:>12}", label, value));
  draw_graph(y, graph_x, graph_w, 1, s, top, utf8, color);
  put(y, graph_x + graph_w + 1, scale, A_DIM);
}

std::string opt_fmt(const std::optional<double>& v, const char* pattern) {
  return v ? fmt::format(fmt::runtime(pattern), *v) : std::string("n/a");
}

int draw_gpu(int y, const gpu_sample& g, view_state& st, int rows) {
  bool sel = st.selected == static_cast<int>(g.index);
  std::string head = fmt::format("{}GPU {} {}", sel ? "> " : "", g.index, g.name);
  if (g.state != device_state::ok) {
    put(y, 0, fit(head + "  [" + to_string(g.state) + "] " + g.state_reason, COLS),
        COLOR_PAIR(2) | (sel ? A_REVERSE : 0));
    return 1;
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
  std::string line = head + figures;
  if (sel) line += std::string(static_cast<std::size_t>(std::max(0, COLS - cells(line))), ' ');
  put(y, 0, fit(line, COLS), A_BOLD | (sel ? A_REVERSE : 0));
  double total = static_cast<double>(g.memory_total_bytes.value_or(0));
  double used = total > 0 ? static_cast<double>(g.memory_used_bytes.value_or(0)) / total : 0;
  double reserved =
      total > 0 ? static_cast<double>(g.memory_reserved_bytes.value_or(0)) / total : 0;
  std::string label = fmt::format(
      " {} / {}{}", bytes(g.memory_used_bytes), bytes(g.memory_total_bytes),
      g.memory_reserved_bytes ? " (reserved " + bytes(g.memory_reserved_bytes) + ")" : "");
  int bar_w = std::max(10, COLS - cells(label) - 6);
  put(y + 1, 0, "mem");
  draw_bar(y + 1, 4, bar_w, used, reserved);
  put(y + 1, 4 + bar_w, label);
  if (rows < k_detail_rows) return k_compact_rows;

  // History graphs: one column per sample, newest at the right, all sharing the time axis.
  const int graph_x = 19, scale_w = 16;
  int graph_w = std::max(10, COLS - graph_x - scale_w - 1);
  std::string key = key_of(g);
  int mem_h = std::clamp(rows - k_detail_rows, 0, 6);
  int yy = y + 2;
  auto mem = series_of(st.history, key, [](const gpu_sample& x) -> std::optional<double> {
    if (!x.memory_used_bytes) return std::nullopt;
    return static_cast<double>(*x.memory_used_bytes);
  });
  double mem_top = total > 0 ? total : max_of(mem, 1);
  if (mem_h >= 2) {
    draw_graph(yy, graph_x, graph_w, mem_h, mem, mem_top, st.utf8, 1);
    put(yy, 0, fmt::format("{:<6}{:>12}", "mem", format_bytes(mem_top)));
    if (mem_h >= 4) put(yy + mem_h / 2, 0, fmt::format("{:>18}", format_bytes(mem_top / 2)));
    put(yy + mem_h - 1, 0, fmt::format("{:>18}", "0 B"));
    put(yy, graph_x + graph_w + 1, "used, bytes", A_DIM);
    put(yy + 1, graph_x + graph_w + 1, "y: 0 - total", A_DIM);
    yy += mem_h;
  } else {
    draw_spark(yy++, "mem", bytes(g.memory_used_bytes), mem, mem_top, "0-" + format_bytes(mem_top),
               st.utf8, 1, graph_x, graph_w);
  }
  auto util =
      series_of(st.history, key, [](const gpu_sample& x) { return x.utilization_gpu_percent; });
  draw_spark(yy++, "util", opt_fmt(g.utilization_gpu_percent, "{:.0f} %"), util, 100, "0-100 %",
             st.utf8, 1, graph_x, graph_w);
  auto temp = series_of(st.history, key, [](const gpu_sample& x) { return x.temperature_celsius; });
  double temp_top = std::ceil(max_of(temp, 100) / 10) * 10;
  draw_spark(yy++, "temp", opt_fmt(g.temperature_celsius, "{:.0f} C"), temp, temp_top,
             fmt::format("0-{:.0f} C", temp_top), st.utf8, 3, graph_x, graph_w);
  auto power = series_of(st.history, key, [](const gpu_sample& x) { return x.power_watts; });
  double power_top = std::max(100.0, std::ceil(max_of(power, 0) / 100) * 100);
  draw_spark(yy++, "power", opt_fmt(g.power_watts, "{:.0f} W"), power, power_top,
             fmt::format("0-{:.0f} W", power_top), st.utf8, 3, graph_x, graph_w);
  auto rx =
      series_of(st.history, key, [](const gpu_sample& x) { return x.pcie_rx_bytes_per_second; });
  auto tx =
      series_of(st.history, key, [](const gpu_sample& x) { return x.pcie_tx_bytes_per_second; });
  double pcie_top = std::max({max_of(rx, 0), max_of(tx, 0), 1.0});
  bool any_pcie = std::any_of(rx.begin(), rx.end(), [](const auto& v) { return v.has_value(); });
  std::string pcie_scale = any_pcie ? "0-" + format_bandwidth(pcie_top) : "";
  draw_spark(yy++, "rx",
             g.pcie_rx_bytes_per_second ? format_bandwidth(*g.pcie_rx_bytes_per_second) : "n/a", rx,
             pcie_top, pcie_scale, st.utf8, 4, graph_x, graph_w);
  draw_spark(yy++, "tx",
             g.pcie_tx_bytes_per_second ? format_bandwidth(*g.pcie_tx_bytes_per_second) : "n/a", tx,
             pcie_top, pcie_scale, st.utf8, 4, graph_x, graph_w);
  put(yy, 0, "time (1 col = 1 sample)", A_DIM);
  draw_time_axis(yy, graph_x, graph_w, st.history);
  return yy + 2 - y;
}

std::string sort_name(process_sort s) {
  return s == process_sort::memory ? "memory" : s == process_sort::pid ? "pid" : "command";
}

bool matches(const proc_row& r, const std::string& filter) {
  if (filter.empty()) return true;
  auto lower = [](std::string s) {
    std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
    return s;
  };
  std::string hay = lower(fmt::format("{} {} {} {}", r.p.pid, r.p.user, r.p.command, r.p.workload));
  return hay.find(lower(filter)) != std::string::npos;
}

std::vector<proc_row> process_rows(const sample& s, const view_state& st) {
  std::vector<proc_row> rows;
  for (const auto& g : s.gpus) {
    if (st.selected >= 0 && static_cast<int>(g.index) != st.selected) continue;
    for (const auto& p : g.processes) {
      proc_row r{g.index, p};
      if (matches(r, st.filter)) rows.push_back(std::move(r));
    }
  }
  std::stable_sort(rows.begin(), rows.end(), [&](const proc_row& a, const proc_row& b) {
    if (st.group && a.p.workload != b.p.workload) {
      if (a.p.workload.empty() != b.p.workload.empty()) return b.p.workload.empty();
      return a.p.workload < b.p.workload;
    }
    switch (st.sort) {
      case process_sort::memory:
        return a.p.used_bytes.value_or(0) > b.p.used_bytes.value_or(0);
      case process_sort::pid:
        return a.p.pid < b.p.pid;
      case process_sort::command:
        return a.p.command < b.p.command;
    }
    return false;
  });
  return rows;
}

// Keeps the selection on the same process across refreshes, else at the same row.
void settle_selection(view_state& st) {
  int n = static_cast<int>(st.rows.size());
  if (n == 0) {
    st.selected_row = 0;
    st.selected_pid = 0;
    return;
  }
  for (int i = 0; i < n; ++i) {
    const auto& r = st.rows[static_cast<std::size_t>(i)];
    if (r.p.pid == st.selected_pid && r.dev == st.selected_pid_dev) {
      st.selected_row = i;
      return;
    }
  }
  st.selected_row = std::clamp(st.selected_row, 0, n - 1);
  st.selected_pid = st.rows[static_cast<std::size_t>(st.selected_row)].p.pid;
  st.selected_pid_dev = st.rows[static_cast<std::size_t>(st.selected_row)].dev;
}

void move_selection(view_state& st, int delta) {
  int n = static_cast<int>(st.rows.size());
  if (n == 0) return;
  st.selected_row = std::clamp(st.selected_row + delta, 0, n - 1);
  st.selected_pid = st.rows[static_cast<std::size_t>(st.selected_row)].p.pid;
  st.selected_pid_dev = st.rows[static_cast<std::size_t>(st.selected_row)].dev;
}

void draw_processes(int y, int bottom, view_state& st) {
  bool any_workload = std::any_of(st.rows.begin(), st.rows.end(),
                                  [](const proc_row& r) { return !r.p.workload.empty(); });
  bool workload_col = any_workload && !st.group;
  // Used / planned (cluster attribution's plan of the process's job), when any row has a plan.
  bool plan_col = std::any_of(st.rows.begin(), st.rows.end(), [](const proc_row& r) {
    return r.p.owner.planned_bytes.has_value();
  });
  auto plan_cell = [&](const proc_row& r) -> std::string {
    if (!plan_col) return "";
    auto use = plan_use(r.p.used_bytes, r.p.owner);
    return fmt::format("{:>5} ", use ? fmt::format("{:.0f}%", 100.0 * *use) : "-");
  };
  auto line_of = [&](const proc_row& r) {
    return fmt::format(
        "{:>8} {:<10} {:>3} {:>11} {:>11}  {}{}{}", r.p.pid, fit(r.p.user, 10), r.dev,
        r.p.used_bytes ? format_bytes(static_cast<double>(*r.p.used_bytes)) : "n/a",
        bytes(r.p.host_rss_bytes), plan_cell(r),
        workload_col ? fmt::format("{:<24} ", fit(r.p.workload.empty() ? "-" : r.p.workload, 24))
                     : "",
        r.p.command);
  };
  if (y >= bottom) return;
  std::string head = fmt::format("{:>8} {:<10} {:>3} {:>11} {:>11}  {}{}COMMAND", "PID", "USER",
                                 "GPU", "GPU MEM", "HOST RSS", plan_col ? "PLAN  " : "",
                                 workload_col ? fmt::format("{:<24} ", "WORKLOAD") : "");
  head += std::string(static_cast<std::size_t>(std::max(0, COLS - cells(head))), ' ');
  put(y++, 0, fit(head, COLS), A_REVERSE);
  // Lines: group headings (-1 - group number) and rows (index).
  std::vector<int> lines;
  std::vector<std::string> headings;
  for (std::size_t i = 0; i < st.rows.size(); ++i) {
    if (st.group && (i == 0 || st.rows[i].p.workload != st.rows[i - 1].p.workload)) {
      std::uint64_t sum = 0;
      int count = 0;
      for (std::size_t j = i; j < st.rows.size() && st.rows[j].p.workload == st.rows[i].p.workload;
           ++j) {
        sum += st.rows[j].p.used_bytes.value_or(0);
        ++count;
      }
      headings.push_back(
          fmt::format("{} {}: {} process{}, {}", st.utf8 ? "\u25be" : "-",
                      st.rows[i].p.workload.empty() ? "no workload (host)" : st.rows[i].p.workload,
                      count, count == 1 ? "" : "es", format_bytes(static_cast<double>(sum))));
      lines.push_back(-static_cast<int>(headings.size()));
    }
    lines.push_back(static_cast<int>(i));
  }
  int visible = std::max(1, bottom - y);
  const int first_y = y;
  st.page_rows = visible;
  int sel_line = 0;
  for (std::size_t i = 0; i < lines.size(); ++i)
    if (lines[i] == st.selected_row) sel_line = static_cast<int>(i);
  if (sel_line < st.scroll) st.scroll = sel_line;
  if (sel_line >= st.scroll + visible) st.scroll = sel_line - visible + 1;
  st.scroll = std::clamp(st.scroll, 0, std::max(0, static_cast<int>(lines.size()) - visible));
  for (int i = st.scroll; i < static_cast<int>(lines.size()) && y < bottom; ++i) {
    int l = lines[static_cast<std::size_t>(i)];
    if (l < 0) {
      put(y++, 0, fit(headings[static_cast<std::size_t>(-l - 1)], COLS), A_BOLD | COLOR_PAIR(4));
      continue;
    }
    std::string text = line_of(st.rows[static_cast<std::size_t>(l)]);
    bool sel = l == st.selected_row;
    if (sel) text += std::string(static_cast<std::size_t>(std::max(0, COLS - cells(text))), ' ');
    put(y++, 0, fit(text, COLS), sel ? A_REVERSE : 0);
  }
  if (st.scroll > 0) put(first_y, COLS - 8, " more ^ ", A_DIM);
  if (st.scroll + visible < static_cast<int>(lines.size()))
    put(bottom - 1, COLS - 8, " more v ", A_DIM);
  if (st.rows.empty() && y < bottom)
    put(y++, 0,
        st.filter.empty() ? "no GPU processes"
                          : "no process matches the filter \"" + st.filter + "\"");
}

void draw_host(int y, const sample& s) {
  if (s.host.memory) {
    const auto& m = *s.host.memory;
    const auto total = static_cast<double>(m.total_bytes);
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
        fmt::format("  NUMA {}: free {} of {}", n.node,
                    format_bytes(static_cast<double>(n.free_bytes)),
                    format_bytes(static_cast<double>(n.total_bytes))));
  }
  if (s.host.cgroup) {
    put(y++, 0,
        fmt::format("  cgroup v{}: usage {}  limit {}", s.host.cgroup->version,
                    bytes(s.host.cgroup->usage_bytes),
                    s.host.cgroup->limit_bytes ? bytes(s.host.cgroup->limit_bytes) : "none"));
  }
}

void draw_help(const view_state& st) {
  erase();
  put(0, 0, "vramkit watch: keys", A_BOLD);
  int y = 2;
  for (const auto& k : terminal_view_keys()) put(y++, 2, k);
  y++;
  put(y++, 2, "Graphs: one column per sample, newest at the right; times under them are UTC.");
  put(y++, 2, "mem is drawn in bytes from 0 to the device's total; util 0-100 %; temp, power and");
  put(y++, 2, "PCIe from 0 to the scale shown at the right of each graph.");
  if (st.replay)
    put(y++, 2, "Replay: gaps longer than the longest wait are skipped (the status line says so).");
  y++;
  put(y, 2, "press any key to close this help", A_DIM);
  refresh();
}

std::string footer_text(const view_state& st) {
  if (st.editing_filter) return "filter: " + st.filter + "_   (Enter keeps, Esc clears)";
  std::string keys =
      "q quit  h help  m/p/c sort  d/Tab device  Up/Down select  / filter  g group  T/K/I signal";
  if (st.replay)
    keys = "q quit  h help  Space pause  Left/Right seek  +/- speed  " + keys.substr(14);
  return keys;
}

void draw(const sample& s, view_state& st, const terminal_view_options& opt) {
  if (st.help) {
    draw_help(st);
    return;
  }
  erase();
  int y = 0;
  std::string dev_name = st.selected < 0 ? "all" : std::to_string(st.selected);
  std::string title = fmt::format("{}  {}  sort: {}  device: {}", opt.title,
                                  format_iso8601_ms(s.timestamp_ms), sort_name(st.sort), dev_name);
  if (st.replay && opt.recording) {
    title +=
        fmt::format("  sample {}/{}  speed {:g}x{}", st.pos + 1, opt.recording->size(), st.speed,
                    st.at_end ? "  end"
                    : st.paused ? "  paused"
                                : "");
  }
  if (!st.filter.empty()) title += "  filter: " + st.filter;
  if (st.group) title += "  grouped by workload";
  put(y++, 0, title, A_BOLD);
  if (!opt.notice.empty()) put(y++, 0, opt.notice, COLOR_PAIR(2));
  if (s.gpus.empty() && !s.gpu_unavailable_reason.empty() && opt.notice.empty())
    put(y++, 0, s.gpu_unavailable_reason, COLOR_PAIR(2));

  int host_rows =
      1 + static_cast<int>(std::min<std::size_t>(s.host.numa.size(), 4)) + (s.host.cgroup ? 1 : 0);
  int host_y = LINES - host_rows - 1;
  int avail = host_y - y - 1;
  int gpus = static_cast<int>(s.gpus.size());
  st.rows = process_rows(s, st);
  settle_selection(st);
  int proc_rows =
      std::min(static_cast<int>(st.rows.size()) + 3 + (st.group ? 4 : 0), std::max(4, avail / 3));
  int gpu_space = avail - proc_rows;
  // The selected device gets the detail; with all devices shown they share the space.
  for (const auto& g : s.gpus) {
    if (y >= host_y - 2) break;
    int rows = k_compact_rows;
    if (st.selected < 0)
      rows = gpus == 0 ? 0 : gpu_space / gpus;
    else if (static_cast<int>(g.index) == st.selected)
      rows = gpu_space - (gpus - 1) * k_compact_rows;
    rows = std::min(rows, host_y - 2 - y);
    y += draw_gpu(y, g, st, rows);
  }
  draw_processes(y + 1, host_y, st);
  draw_host(host_y, s);
  if (!st.message.empty() && !st.editing_filter)
    put(LINES - 1, 0, st.message, A_BOLD);
  else
    put(LINES - 1, 0, footer_text(st), A_DIM);
  if (st.confirm) {
    std::string q =
        fmt::format(" Send {} to pid {} ({})?  y = send, any other key = cancel ",
                    signal_name(st.confirm->sig), st.confirm->pid, fit(st.confirm->command, 30));
    int w = std::min(COLS, cells(q) + 2);
    int cy = LINES / 2 - 1, cx = std::max(0, (COLS - w) / 2);
    std::string blank(static_cast<std::size_t>(w), ' ');
    put(cy - 1, cx, blank, A_REVERSE);
    put(cy, cx, fit(" " + q + blank, w), A_REVERSE | A_BOLD);
    put(cy + 1, cx, blank, A_REVERSE);
  }
  refresh();
}

void remember(const sample& s, view_state& st) {
  st.history.push_back(s);
  while (st.history.size() > k_history_points) st.history.pop_front();
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
    set_escdelay(50);
    curs_set(0);
    timeout(100);
    if (has_colors()) {
      start_color();
      use_default_colors();
      init_pair(1, COLOR_GREEN, -1);
      init_pair(2, COLOR_RED, -1);
      init_pair(3, COLOR_YELLOW, -1);
      init_pair(4, COLOR_CYAN, -1);
    }
  }
  ~curses_session() {
    endwin();
    sigaction(SIGINT, &old, nullptr);
  }
  curses_session(const curses_session&) = delete;
  curses_session& operator=(const curses_session&) = delete;
};

// The replay's clock: where it is in the recording and when the next sample is due.
class replay_clock {
 public:
  replay_clock(const std::vector<sample>& rec, std::chrono::milliseconds max_gap)
      : rec_(rec), max_gap_ms_(max_gap.count()) {
    std::vector<std::int64_t> steps;
    for (std::size_t i = 1; i < rec.size(); ++i)
      steps.push_back(std::max<std::int64_t>(0, rec[i].timestamp_ms - rec[i - 1].timestamp_ms));
    if (!steps.empty()) {
      std::nth_element(steps.begin(), steps.begin() + static_cast<std::ptrdiff_t>(steps.size() / 2),
                       steps.end());
      typical_ms_ = std::min(steps[steps.size() / 2], max_gap_ms_);
    }
  }
  /// Wall time to wait after showing sample `pos`, at `speed`; `skipped` set when the gap to the
  /// next sample is longer than the longest wait.
  std::chrono::milliseconds wait_after(std::size_t pos, double speed, bool& skipped) const {
    skipped = false;
    if (pos + 1 >= rec_.size()) return std::chrono::milliseconds(0);
    auto gap = std::max<std::int64_t>(0, rec_[pos + 1].timestamp_ms - rec_[pos].timestamp_ms);
    if (gap > max_gap_ms_) {
      skipped = true;
      gap = typical_ms_;
    }
    return std::chrono::milliseconds(static_cast<std::int64_t>(static_cast<double>(gap) / speed));
  }
  /// The sample `delta_ms` of recording time from `pos`: the first at or after the target going
  /// forward, the last at or before it going back.
  [[nodiscard]] std::size_t seek(std::size_t pos, std::int64_t delta_ms) const {
    auto target = rec_[pos].timestamp_ms + delta_ms;
    auto by_time = [](const sample& s, std::int64_t t) { return s.timestamp_ms < t; };
    if (delta_ms >= 0) {
      auto it = std::lower_bound(rec_.begin(), rec_.end(), target, by_time);
      auto i = static_cast<std::size_t>(it - rec_.begin());
      return std::max(pos + 1 < rec_.size() ? pos + 1 : pos, std::min(i, rec_.size() - 1));
    }
    auto it = std::upper_bound(rec_.begin(), rec_.end(), target,
                               [](std::int64_t t, const sample& s) { return t < s.timestamp_ms; });
    auto i = it == rec_.begin() ? std::size_t{0} : static_cast<std::size_t>(it - rec_.begin()) - 1;
    return std::min(i, pos > 0 ? pos - 1 : 0);
  }

 private:
  const std::vector<sample>& rec_;
  std::int64_t max_gap_ms_;
  std::int64_t typical_ms_ = 1000;
};

constexpr const char* k_end_of_recording = "end of recording: q to quit, Left/Home to go back";

// What one step of the loop (a sample due, a key) did: nothing to redraw, a redraw, or leave.
enum class step { unchanged, changed, quit };

// The live view's loop: the drawn state, where samples come from and when the next one is due,
// and what each key does. The terminal is the caller's (curses_session).
class live_view {
 public:
  live_view(const sample_source& source, const terminal_view_options& options)
      : source_(source),
        options_(options),
        send_(options.send_signal ? options.send_signal : send_process_signal),
        refusal_(options.refusal ? options.refusal : signal_refusal) {
    // After setlocale (curses_session), so that the terminal's code set is known.
    const char* codeset = nl_langinfo(CODESET);
    st_.utf8 = codeset != nullptr && std::string(codeset) == "UTF-8";
    st_.replay = options.recording != nullptr;
    st_.speed = options.speed > 0 ? options.speed : 1.0;
    if (st_.replay) {
      replay_clock_.emplace(*options.recording, options.max_gap);
      show_replay(0, true);
    }
  }

  /// Polls keys, takes or steps to the samples that are due and redraws, until q, Ctrl-C, or a
  /// source that ends before its first sample.
  void run() {
    bool dirty = true;
    while (g_interrupted == 0) {
      const auto now = clock::now();
      const step sampled = st_.replay ? step_replay(now) : step_live(now);
      if (sampled == step::quit) return;
      const bool expired = update_message(now);
      if ((dirty || sampled == step::changed || expired) && current_)
        draw(*current_, st_, options_);
      const int ch = getch();
      if (ch == ERR) {
        dirty = false;
        continue;
      }
      const step keyed = on_key(ch);
      if (keyed == step::quit) return;
      dirty = keyed == step::changed;
    }
  }

 private:
  using clock = std::chrono::steady_clock;

  // A status line that stays five seconds.
  void say(std::string m) {
    st_.message = std::move(m);
    message_until_ = clock::now() + std::chrono::seconds(5);
  }

  // The status line until the next key.
  void say_until_key(std::string m) {
    st_.message = std::move(m);
    message_until_ = clock::time_point::max();
  }

  // Replay: show sample `pos`, the history being the samples up to it.
  void show_replay(std::size_t pos, bool rebuild) {
    const auto& rec = *options_.recording;
    st_.pos = pos;
    if (rebuild) {
      st_.history.clear();
      for (std::size_t i = pos + 1 > k_history_points ? pos + 1 - k_history_points : 0; i <= pos;
           ++i)
        remember(rec[i], st_);
    } else {
      remember(rec[pos], st_);
    }
    current_ = rec[pos];
    st_.at_end = pos + 1 >= rec.size();
    bool skipped = false;
    next_due_ = clock::now() + replay_clock_->wait_after(pos, st_.speed, skipped);
    if (skipped && !st_.at_end)
      say(fmt::format("gap of {} in the recording skipped ({} -> {} UTC)",
                      duration_text(rec[pos + 1].timestamp_ms - rec[pos].timestamp_ms),
                      clock_hms(rec[pos].timestamp_ms), clock_hms(rec[pos + 1].timestamp_ms)));
  }

  // Replay: the next sample is due one wait (at the current speed) from now.
  void reschedule_replay() {
    bool skipped = false;
    next_due_ = clock::now() + replay_clock_->wait_after(st_.pos, st_.speed, skipped);
  }

  step step_replay(clock::time_point now) {
    if (st_.paused || st_.at_end || now < next_due_) return step::unchanged;
    show_replay(st_.pos + 1, false);
    return step::changed;
  }

  step step_live(clock::time_point now) {
    if (st_.at_end || now < next_due_) return step::unchanged;
    auto s = source_();
    if (!s) {
      st_.at_end = true;
      if (!current_) return step::quit;
      say_until_key("no more samples: q to quit");
    } else {
      remember(*s, st_);
      current_ = std::move(s);
      next_due_ = now + options_.interval;
    }
    return step::changed;
  }

  // Clears an expired status line (true: redraw) and puts up the end-of-recording one.
  bool update_message(clock::time_point now) {
    bool expired = false;
    if (!st_.message.empty() && now > message_until_) {
      st_.message.clear();
      expired = true;
    }
    if (st_.replay && st_.at_end && st_.message.empty()) say_until_key(k_end_of_recording);
    return expired;
  }

  // A key: first to an open dialog (confirmation, help, filter), else a command.
  step on_key(int ch) {
    if (ch == KEY_RESIZE) {
      clear();
      return step::changed;
    }
    if (st_.confirm) {
      answer_confirmation(ch);
      return step::changed;
    }
    if (st_.help) {
      st_.help = false;
      clear();
      return step::changed;
    }
    if (st_.editing_filter) {
      edit_filter(ch);
      return step::changed;
    }
    if (st_.message == k_end_of_recording || message_until_ != clock::time_point::max())
      st_.message.clear();
    if (ch == 'q' || ch == 'Q') return step::quit;
    const bool known = view_key(ch) || selection_key(ch) || signal_key(ch) || replay_key(ch);
    return known ? step::changed : step::unchanged;
  }

  void answer_confirmation(int ch) {
    const auto c = *st_.confirm;
    st_.confirm.reset();
    if (ch == 'y' || ch == 'Y') {
      say(send_(c.pid, c.sig).message);
    } else {
      say(fmt::format("{} to pid {} cancelled", signal_name(c.sig), c.pid));
    }
  }

  void edit_filter(int ch) {
    if (ch == '\n' || ch == '\r' || ch == KEY_ENTER) {
      st_.editing_filter = false;
    } else if (ch == 27) {
      st_.editing_filter = false;
      st_.filter.clear();
    } else if (ch == KEY_BACKSPACE || ch == 127 || ch == 8) {
      if (!st_.filter.empty()) st_.filter.pop_back();
    } else if (ch >= 32 && ch < 127) {
      st_.filter += static_cast<char>(ch);
    }
    st_.scroll = 0;
  }

  // Help, sort order, grouping, the filter and the device shown.
  bool view_key(int ch) {
    switch (ch) {
      case 'h':
      case '?':
        st_.help = true;
        return true;
      case 'm':
        st_.sort = process_sort::memory;
        return true;
      case 'p':
        st_.sort = process_sort::pid;
        return true;
      case 'c':
        st_.sort = process_sort::command;
        return true;
      case 'g':
        st_.group = !st_.group;
        return true;
      case '/':
        st_.editing_filter = true;
        return true;
      case 27:
        st_.filter.clear();
        return true;
      case 'd':
      case '\t':
        next_device();
        return true;
      default:
        return false;
    }
  }

  // all -> first device -> ... -> last device -> all
  void next_device() {
    const int n = current_ ? static_cast<int>(current_->gpus.size()) : 0;
    if (n == 0) {
      st_.selected = -1;
      return;
    }
    int pos = -1;
    for (int i = 0; i < n; ++i) {
      if (static_cast<int>(current_->gpus[static_cast<std::size_t>(i)].index) == st_.selected)
        pos = i;
    }
    pos = pos + 1 >= n ? -1 : pos + 1;
    st_.selected =
        pos < 0 ? -1 : static_cast<int>(current_->gpus[static_cast<std::size_t>(pos)].index);
  }

  // The selected process; Home and End go to the first and last sample in a replay.
  bool selection_key(int ch) {
    switch (ch) {
      case KEY_UP:
        move_selection(st_, -1);
        return true;
      case KEY_DOWN:
        move_selection(st_, 1);
        return true;
      case KEY_PPAGE:
        move_selection(st_, -st_.page_rows);
        return true;
      case KEY_NPAGE:
        move_selection(st_, st_.page_rows);
        return true;
      case KEY_HOME:
        if (st_.replay)
          show_replay(0, true);
        else
          move_selection(st_, -1 << 20);
        return true;
      case KEY_END:
        if (st_.replay)
          show_replay(options_.recording->size() - 1, true);
        else
          move_selection(st_, 1 << 20);
        return true;
      default:
        return false;
    }
  }

  // T, K, I: asks to confirm a signal to the selected process, unless it would be refused.
  bool signal_key(int ch) {
    if (ch != 'T' && ch != 'K' && ch != 'I') return false;
    const int sig = ch == 'T' ? SIGTERM : ch == 'K' ? SIGKILL : SIGINT;
    if (st_.rows.empty()) {
      say("no process selected");
      return true;
    }
    const auto& r = st_.rows[static_cast<std::size_t>(
        std::clamp<int>(st_.selected_row, 0, static_cast<int>(st_.rows.size()) - 1))];
    if (auto why = refusal_(r.p.pid); !why.empty()) {
      say(why);
      return true;
    }
    st_.confirm = pending_signal{r.p.pid, sig, r.p.command};
    return true;
  }

  // Pause, seek and speed; outside a replay they only say what they are for.
  bool replay_key(int ch) {
    const bool pause = ch == ' ';
    const bool seek = ch == KEY_RIGHT || ch == KEY_SRIGHT || ch == KEY_LEFT || ch == KEY_SLEFT;
    const bool speed = ch == '+' || ch == '=' || ch == '-' || ch == '_';
    if (!pause && !seek && !speed) return false;
    if (!st_.replay) {
      say("Space, Left/Right and +/- control a replay (vramkit watch --replay FILE)");
      return true;
    }
    if (pause) {
      st_.paused = !st_.paused;
      if (!st_.paused) reschedule_replay();
    } else if (seek) {
      std::int64_t step_ms = (ch == KEY_SRIGHT || ch == KEY_SLEFT) ? 60000 : 10000;
      if (ch == KEY_LEFT || ch == KEY_SLEFT) step_ms = -step_ms;
      show_replay(replay_clock_->seek(st_.pos, step_ms), true);
    } else {
      st_.speed = (ch == '+' || ch == '=') ? std::min(st_.speed * 2, 1024.0)
                                           : std::max(st_.speed / 2, 1.0 / 64);
      reschedule_replay();
    }
    return true;
  }

  const sample_source& source_;
  const terminal_view_options& options_;
  std::function<signal_outcome(std::uint32_t, int)> send_;
  std::function<std::string(std::uint32_t)> refusal_;
  view_state st_;
  std::optional<sample> current_;
  std::optional<replay_clock> replay_clock_;
  clock::time_point next_due_ = clock::now();
  clock::time_point message_until_ = clock::time_point::min();
};

}  // namespace

void run_terminal_view(const sample_source& source, const terminal_view_options& options) {
  if (isatty(STDOUT_FILENO) == 0 || isatty(STDIN_FILENO) == 0) {
    throw error("the live view needs a terminal: use --once, --json or --csv FILE");
  }
  if (options.recording && options.recording->empty())
    throw invalid_input("the recording holds no sample");
  curses_session session;
  live_view(source, options).run();
}

#endif

}  // namespace vramkit::monitor

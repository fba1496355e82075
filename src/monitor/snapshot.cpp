// The plain-text snapshot of `vramkit watch --once`: GPUs, processes, host memory.
#include <fmt/format.h>

#include <algorithm>

#include "vramkit/core/units.hpp"
#include "vramkit/monitor/recording.hpp"
#include "vramkit/monitor/safe_text.hpp"
#include "vramkit/monitor/terminal_view.hpp"

namespace vramkit::monitor {

namespace {

template <typename T>
std::string bytes_or_dash(const std::optional<T>& v) {
  return v ? format_bytes(static_cast<double>(*v)) : "-";
}
template <typename T>
std::string num_or_dash(const std::optional<T>& v, const char* fmt_spec) {
  return v ? fmt::format(fmt::runtime(fmt_spec), *v) : "-";
}

}  // namespace

std::string format_snapshot(const sample& s) {
  std::string out;
  auto add = [&out](const std::string& line) { out += line + "\n"; };
  add(fmt::format("vramkit watch  {}  source: {}{}", format_iso8601_ms(s.timestamp_ms),
                  s.gpu_source.empty() ? "none" : printable(s.gpu_source),
                  s.driver_version.empty() ? "" : "  driver " + printable(s.driver_version)));
  if (!s.gpu_unavailable_reason.empty())
    add(printable(s.gpu_unavailable_reason) + ": showing host memory only");
  if (!s.gpus.empty()) {
    add("");
    add(fmt::format(
        "{:>3} {:<24} {:<6} {:>11} {:>11} {:>11} {:>11} {:>5} {:>5} {:>7} {:>12} {:>12}", "GPU",
        "NAME", "STATE", "USED", "RESERVED", "FREE", "TOTAL", "UTIL%", "TEMP", "POWER", "PCIE RX",
        "PCIE TX"));
    for (const auto& g : s.gpus) {
      add(fmt::format(
          "{:>3} {:<24} {:<6} {:>11} {:>11} {:>11} {:>11} {:>5} {:>5} {:>7} {:>12} {:>12}", g.index,
          printable(g.name.substr(0, 24)), to_string(g.state), bytes_or_dash(g.memory_used_bytes),
          bytes_or_dash(g.memory_reserved_bytes), bytes_or_dash(g.memory_free_bytes),
          bytes_or_dash(g.memory_total_bytes), num_or_dash(g.utilization_gpu_percent, "{:.0f}"),
          num_or_dash(g.temperature_celsius, "{:.0f}C"), num_or_dash(g.power_watts, "{:.1f}W"),
          g.pcie_rx_bytes_per_second ? format_bandwidth(*g.pcie_rx_bytes_per_second) : "-",
          g.pcie_tx_bytes_per_second ? format_bandwidth(*g.pcie_tx_bytes_per_second) : "-"));
      if (g.state != device_state::ok) add(fmt::format("    {}", printable(g.state_reason)));
      for (const auto& m : g.mig) {
        add(fmt::format("    MIG gi {} ci {} {}  used {} of {}", m.gpu_instance_id,
                        m.compute_instance_id, printable(m.uuid),
                        bytes_or_dash(m.memory_used_bytes), bytes_or_dash(m.memory_total_bytes)));
      }
    }
    std::vector<std::pair<unsigned, const gpu_process*>> procs;
    for (const auto& g : s.gpus) {
      for (const auto& p : g.processes) procs.emplace_back(g.index, &p);
    }
    std::stable_sort(procs.begin(), procs.end(), [](const auto& a, const auto& b) {
      return a.second->used_bytes.value_or(0) > b.second->used_bytes.value_or(0);
    });
    add("");
    if (procs.empty()) {
      bool hidden = std::any_of(s.gpus.begin(), s.gpus.end(), [](const gpu_sample& g) {
        return g.unavailable.count("processes") != 0;
      });
      add(hidden ? "processes: not reported by the driver" : "no GPU processes");
    } else {
      // The workload and plan columns appear when cluster attribution named any.
      const bool owners = std::any_of(procs.begin(), procs.end(),
                                      [](const auto& e) { return !e.second->workload.empty(); });
      const bool plans = std::any_of(procs.begin(), procs.end(), [](const auto& e) {
        return e.second->owner.planned_bytes.has_value();
      });
      auto owner_cols = [&](const std::string& workload, const std::string& container,
                            const std::string& plan) {
        std::string out;
        if (owners) out += fmt::format("{:<32} {:<16} ", workload, container);
        if (plans) out += fmt::format("{:>16} ", plan);
        return out;
      };
      add(fmt::format("{:>8} {:<10} {:>3} {:>11} {:>11}  {}{}", "PID", "USER", "GPU", "GPU MEM",
                      "HOST RSS", owner_cols("WORKLOAD", "CONTAINER", "PLAN (USED)"), "COMMAND"));
      for (const auto& [dev, p] : procs) {
        std::string plan = "-";
        if (p->owner.planned_bytes) {
          plan = format_bytes(static_cast<double>(*p->owner.planned_bytes));
          if (auto use = plan_use(p->used_bytes, p->owner))
            plan += fmt::format(" ({:.0f}%)", 100.0 * *use);
        }
        add(fmt::format(
            "{:>8} {:<10} {:>3} {:>11} {:>11}  {}{}", p->pid, printable(p->user.substr(0, 10)), dev,
            p->used_bytes ? format_bytes(static_cast<double>(*p->used_bytes)) : "n/a",
            bytes_or_dash(p->host_rss_bytes),
            owner_cols(
                p->workload.empty() ? "-" : printable(p->workload.substr(0, 32)),
                p->owner.container.empty() ? "-" : printable(p->owner.container.substr(0, 16)),
                plan),
            printable(p->command.substr(0, 80))));
      }
    }
  }
  add("");
  if (s.host.memory) {
    const auto& m = *s.host.memory;
    add(fmt::format("host memory: total {}  available {}  cached {}  mlocked {}  hugepages {}/{}",
                    format_bytes(static_cast<double>(m.total_bytes)),
                    bytes_or_dash(m.available_bytes), bytes_or_dash(m.cached_bytes),
                    bytes_or_dash(m.mlocked_bytes), num_or_dash(m.hugepages_free, "{}"),
                    num_or_dash(m.hugepages_total, "{}")));
  } else {
    add("host memory: /proc/meminfo not readable");
  }
  for (const auto& n : s.host.numa) {
    add(fmt::format("  NUMA node {}: free {} of {}", n.node,
                    format_bytes(static_cast<double>(n.free_bytes)),
                    format_bytes(static_cast<double>(n.total_bytes))));
  }
  if (s.host.cgroup) {
    add(fmt::format("  cgroup v{} {}: usage {}, limit {}", s.host.cgroup->version,
                    printable(s.host.cgroup->path), bytes_or_dash(s.host.cgroup->usage_bytes),
                    s.host.cgroup->limit_bytes
                        ? format_bytes(static_cast<double>(*s.host.cgroup->limit_bytes))
                        : "none"));
  }
  return out;
}

}  // namespace vramkit::monitor

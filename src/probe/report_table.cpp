// Terminal table of a probe report.
#include "vramkit/probe/report_table.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include <fmt/format.h>

#include "vramkit/core/units.hpp"
#include "vramkit/probe/hierarchy.hpp"

namespace vramkit::probe {

std::string format_figure(double v) {
  const double a = std::fabs(v);
  if (!std::isfinite(v)) return "-";
  if (a >= 1000) return fmt::format("{:.0f}", v);
  if (a >= 100) return fmt::format("{:.1f}", v);
  if (a >= 1) return fmt::format("{:.2f}", v);
  if (a == 0) return "0";
  return fmt::format("{:.3f}", v);
}

std::string summary_table(const probe_report& report) {
  const auto levels = hierarchy(report);
  if (levels.empty()) return {};
  std::string out = "memory hierarchy at a glance (median of each figure):\n";
  const std::string row = "  {:<6} {:<34} {:>11} {:>12} {:>11} {:>6}  {}\n";
  out += fmt::format(fmt::runtime(row), "device", "level", "size", "bandwidth", "latency", "%peak",
                     "verdict");
  for (const auto& l : levels) {
    out += fmt::format(
        fmt::runtime(row), l.device, l.name,
        l.size_bytes ? format_bytes(static_cast<double>(*l.size_bytes)) : "-",
        l.bandwidth_gbps ? format_figure(*l.bandwidth_gbps) + " GB/s" : "-",
        l.latency_ns ? format_figure(*l.latency_ns) + " ns" : "-",
        l.percent_of_peak ? fmt::format("{:.1f}", *l.percent_of_peak) : "-",
        std::string(to_string(l.verdict)) + (l.note.empty() ? "" : " (" + l.note + ")"));
  }
  return out;
}

std::string to_table(const probe_report& report) {
  std::string out;
  out += "vramkit probe\n";
  if (const auto s = summary_table(report); !s.empty()) out += "\n" + s + "\n";
  for (const auto& [k, v] : report.header) out += fmt::format("  {:<28} {}\n", k, v);

  // Sections in the order they first appear.
  std::vector<std::string> sections;
  for (const auto& m : report.results) {
    if (std::find(sections.begin(), sections.end(), m.section) == sections.end()) {
      sections.push_back(m.section);
    }
  }
  const std::string row = "{:<44} {:>11} {:>9} {:>19} {:<5} {:<17} {:>6} {}\n";
  for (const auto& section : sections) {
    out += fmt::format("\n[{}]\n", section);
    out += fmt::format(fmt::runtime(row), "test", "size", "median", "min-max", "unit", "convention",
                       "%peak", "verdict");
    for (const auto& m : report.results) {
      if (m.section != section) continue;
      const auto pct = m.percent_of_peak();
      out += fmt::format(fmt::runtime(row), m.key,
                         m.size_bytes ? format_bytes(static_cast<double>(m.size_bytes)) : "-",
                         format_figure(m.stats.median),
                         format_figure(m.stats.min) + "-" + format_figure(m.stats.max), m.unit,
                         to_string(m.convention), pct ? fmt::format("{:.1f}", *pct) : "-",
                         to_string(m.verdict));
    }
  }
  bool any_flag = false;
  for (const auto& m : report.results) {
    if (m.verdict != verdict_kind::low && m.verdict != verdict_kind::high) continue;
    if (!any_flag) out += "\nnot normal:\n";
    any_flag = true;
    out += fmt::format("  {} ({}): {}\n", m.key, to_string(m.verdict), m.verdict_reason);
  }
  if (!report.levels.empty()) {
    out += "\nmemory levels read off the latency curves:\n";
    for (const auto& l : report.levels) {
      out += fmt::format("  {:<6} {:<5} {:>8} ns", l.device, l.name, format_figure(l.latency_ns));
      if (l.measured_size_bytes) {
        out += fmt::format("  steps up after {}",
                           format_bytes(static_cast<double>(l.measured_size_bytes)));
      }
      if (l.reported_size_bytes) {
        out += fmt::format("  (reported {})",
                           format_bytes(static_cast<double>(*l.reported_size_bytes)));
      }
      out += "\n";
    }
  }
  if (!report.skips.empty()) {
    out += "\n";
    for (const auto& s : report.skips) {
      if (s.key == "gpu" && !s.failed) {
        out += "no GPU: " + s.reason + "\n";
      } else {
        out += fmt::format("{} {}: {}\n", s.failed ? "FAILED" : "skipped", s.key, s.reason);
      }
    }
  }
  return out;
}

}  // namespace vramkit::probe

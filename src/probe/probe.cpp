// run_probe: header + host + GPU + verdicts (see probe.hpp).
#include "vramkit/probe/probe.hpp"

#include <algorithm>
#include <exception>

#include <fmt/format.h>

#include "vramkit/core/error.hpp"
#include "vramkit/core/units.hpp"
#include "vramkit/probe/gpu_probe.hpp"
#include "vramkit/probe/host_probe.hpp"
#include "vramkit/probe/memory_budget.hpp"
#include "vramkit/probe/verdict.hpp"

namespace vramkit::probe {

std::vector<std::string> probe_sections() {
  auto all = host_probe_sections();
  for (auto& s : gpu_probe_sections()) {
    if (std::find(all.begin(), all.end(), s) == all.end()) all.push_back(s);
  }
  return all;
}

void check_sections(const std::set<std::string>& only) {
  const auto valid = probe_sections();
  for (const auto& s : only) {
    if (std::find(valid.begin(), valid.end(), s) != valid.end()) continue;
    std::string list;
    for (const auto& v : valid) list.append(list.empty() ? "" : ", ").append(v);
    throw invalid_input("--only: unknown section '" + s + "' (valid: " + list + ")");
  }
}

std::vector<std::pair<std::string, std::string>> probe_keys() {
  auto keys = host_probe_keys();
  for (auto& k : gpu_probe_keys()) keys.push_back(std::move(k));
  return keys;
}

namespace {

// Refuses, before anything runs, a requested host size that cannot fit in what is available.
void check_requested_sizes(const probe_options& o, const memory_budget& budget) {
  const auto avail = budget.available_bytes();
  if (!avail) return;
  auto refuse = [&](const char* flag, std::uint64_t each, int count, const char* what) {
    const double need = static_cast<double>(each) * count;
    if (need <= 0.9 * static_cast<double>(*avail)) return;
    const auto most = fit_in_budget(avail, each, count, 0.9, 0, 64 * KiB);
    throw invalid_input(fmt::format(
        "{} {}: {} need {}, but this process has {}{}", flag,
        format_bytes(static_cast<double>(each)), what, format_bytes(need), budget.describe(),
        most > 0 ? "; at most " + format_bytes(static_cast<double>(most)) + " fits" : ""));
  };
  if (o.host_buffer_bytes > 0 && o.wants("host"))
    refuse("--size", o.host_buffer_bytes, 3, "the three bandwidth arrays");
  if (o.max_latency_bytes > 0 && o.wants("latency"))
    refuse("--latency-size", o.max_latency_bytes, 1, "the pointer-chase buffer");
}

}  // namespace

probe_report run_probe(const probe_options& given) {
  check_sections(given.only);
  memory_budget budget;
  if (given.host_memory_bytes) {
    budget.limits.push_back({"set by the caller", *given.host_memory_bytes, 0});
  } else {
    budget = current_memory_budget();
  }
  check_requested_sizes(given, budget);
  probe_options options = given;
  options.host_memory_bytes = budget.available_bytes();
  probe_report report;
  fill_host_header(options, report);
  report.header["host.memory.available"] = budget.describe();
  report.header["host.memory.limits"] = budget.describe_all();
  run_host_probe(options, report);
  try {
    run_gpu_probe(options, report);
  } catch (const std::exception& e) {
    report.skips.push_back({"gpu", std::string("GPU probe failed: ") + e.what(), true});
  }
  apply_verdicts(report);
  return report;
}

bool has_failures(const probe_report& report) {
  return std::any_of(report.skips.begin(), report.skips.end(),
                     [](const skipped& s) { return s.failed; });
}

std::optional<std::string> unmeasured_section(const probe_report& report,
                                              const std::set<std::string>& only) {
  const auto gpu_sections = gpu_probe_sections();
  for (const auto& skip : report.skips) {
    if (skip.failed) continue;
    const auto dot = skip.key.rfind('.');
    const std::string tail = dot == std::string::npos ? skip.key : skip.key.substr(dot + 1);
    for (const auto& section : only) {
      const bool gpu_section =
          std::find(gpu_sections.begin(), gpu_sections.end(), section) != gpu_sections.end();
      if (tail == section || (skip.key == "gpu" && gpu_section))
        return "section '" + section + "' was skipped: " + skip.reason;
    }
  }
  if (report.results.empty() && report.curves.empty()) return std::string("the probe");
  return std::nullopt;
}

}  // namespace vramkit::probe

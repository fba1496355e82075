// The probe report as the terminal table `vramkit probe` prints: a one-screen summary of the
// hierarchy, the header, then one block per section (test, size, median, min-max, unit,
// convention, % of peak, verdict), the causes of the figures that are not normal, the memory
// levels and what was skipped. Pure; thread-safe.
#pragma once

#include <string>

#include "vramkit/probe/measurement.hpp"

namespace vramkit::probe {

/// Plain text, lines of at most ~130 columns, ending in a newline: the hierarchy at a glance
/// first (summary_table), then the header and one block per section.
std::string to_table(const probe_report& report);

/// The one-screen summary: one line per level of hierarchy(report) with its size, bandwidth,
/// latency, % of peak and verdict; empty when the report has no level.
std::string summary_table(const probe_report& report);

/// "12.3", "1234", "0.456": a figure with about four significant digits, never in e-notation.
std::string format_figure(double v);

}  // namespace vramkit::probe

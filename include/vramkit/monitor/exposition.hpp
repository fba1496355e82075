// Prometheus text exposition (format 0.0.4) of a sample: one # HELP and # TYPE per family, base
// units, label values escaped per the format. Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "vramkit/monitor/sample.hpp"

namespace vramkit::monitor {

/// Content-Type of render_metrics' output.
inline constexpr const char* exposition_content_type = "text/plain; version=0.0.4; charset=utf-8";

/// The exporter's own counters, rendered with the sample.
struct exporter_stats {
  std::uint64_t scrapes_total = 0;
  std::uint64_t samples_total = 0;
};

/// Escapes a label value: backslash, double quote and newline.
std::string escape_label_value(std::string_view value);
/// Escapes HELP text: backslash and newline.
std::string escape_help(std::string_view text);
/// Formats a sample value: integers without exponent where exact, "NaN", "+Inf", "-Inf".
std::string format_metric_value(double value);

/// Renders every metric family of `s` (see docs/monitor.md for the list), ending in a newline:
/// render_sample_metrics followed by render_scrape_counter.
std::string render_metrics(const sample& s, const exporter_stats& stats);

/// Every family that depends only on the sample and the sample count: what the exporter renders
/// once per sample and serves to every scrape.
std::string render_sample_metrics(const sample& s, std::uint64_t samples_total);

/// The vramkit_exporter_scrapes_total family, the one figure that changes with every scrape.
std::string render_scrape_counter(std::uint64_t scrapes_total);

}  // namespace vramkit::monitor

// The probe report as one self-contained HTML page: inline CSS and a little inline JavaScript, no
// external URL of any kind, every chart an inline SVG drawn here (bandwidth vs size with a log x
// axis, latency vs working set with the memory levels marked), the results table and the header.
// Pure; thread-safe.
#pragma once

#include <string>

#include "vramkit/probe/measurement.hpp"

namespace vramkit::probe {

/// A complete HTML5 document.
std::string to_html(const probe_report& report);

/// `text` with &, <, >, " and ' escaped for HTML text and attribute values.
std::string html_escape(const std::string& text);

}  // namespace vramkit::probe

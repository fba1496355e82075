// The probe report as JSON (schema in docs/probe-schema.md, versioned by `schema_version`) and
// back. Pure functions; thread-safe.
#pragma once

#include <nlohmann/json.hpp>

#include "vramkit/probe/measurement.hpp"

namespace vramkit::probe {

/// Every field of `report`: header, measurements (unit, convention, size, repetitions, raw
/// samples, min/median/max, peak, verdict), curves, levels and skips, plus "schema_version".
nlohmann::json to_json(const probe_report& report);

/// The inverse of to_json: to_json(report_from_json(to_json(r))) == to_json(r). Throws
/// vramkit::invalid_input naming the field when the document is not a probe report or has a
/// schema_version newer than this build knows.
probe_report report_from_json(const nlohmann::json& doc);

/// Parses "copied_once", "read_plus_written", ...; throws invalid_input on anything else.
byte_convention byte_convention_from_string(const std::string& text);

}  // namespace vramkit::probe

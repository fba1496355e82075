// Verdicts: each measurement of a probe report compared with a reference table of GPU models
// (datasheet peaks and known-good measured ranges, data/probe/reference.json, embedded at build
// time), giving normal / low / high and, when not normal, the likely cause read from the report's
// header (PCIe link below its max, far NUMA node, pageable memory, clocks below max).
// The table is immutable once built; apply_verdicts is thread-safe on distinct reports.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "vramkit/probe/measurement.hpp"

namespace vramkit::probe {

/// A known-good range for the measurements whose key matches `key_pattern` ({N}, {A}, {B} match
/// device numbers, `*` anything). `unit` "%" compares the median's percentage of its peak (or of
/// the datasheet field named by `of_datasheet` when the measurement has no peak); any other unit
/// compares the median itself.
struct reference_range {
  std::string key_pattern;
  std::string unit;
  double min = 0, max = 0;
  std::string of_datasheet;
  std::string kind;    ///< "datasheet", "measured" or "expectation"
  std::string source;  ///< where the numbers come from
};

/// One GPU model: how to recognise it by device name, its datasheet figures, its ranges.
struct reference_model {
  std::string name;
  /// Alternatives; the model matches a device name containing every string (case-insensitive)
  /// of at least one alternative.
  std::vector<std::vector<std::string>> match;
  std::map<std::string, double> datasheet;  ///< e.g. memory_bandwidth_gbs, pcie_gen, nvlink_gbs
  std::string datasheet_source;
  std::vector<reference_range> ranges;
};

/// The reference table.
struct reference_table {
  std::vector<reference_model> models;

  /// The table shipped with this build (data/probe/reference.json).
  static const reference_table& embedded();
  /// Parses a table; throws invalid_input naming the field when it is malformed.
  static reference_table from_json(const nlohmann::json& doc);
  /// The first model (in table order) that matches `device_name`, or nullptr.
  [[nodiscard]] const reference_model* find(const std::string& device_name) const;
};

/// True when `key` matches `pattern` ({N}, {A}, {B} = decimal numbers, {level} = a word, * = any).
bool key_matches(const std::string& pattern, const std::string& key);

/// Sets verdict and verdict_reason of every measurement in `report` against `table`. A GPU figure
/// whose device name has no model gets unknown with "no reference for <name>".
void apply_verdicts(probe_report& report, const reference_table& table);
/// The same against the embedded table.
void apply_verdicts(probe_report& report);

}  // namespace vramkit::probe

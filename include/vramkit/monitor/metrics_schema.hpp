// The wire schema of one GPU's figures, shared by everything that writes or reads them: the
// Prometheus exposition (exposition.hpp), the JSON and CSV recordings (recording.hpp) and the
// cluster's reader of exporter metrics. One row per field: its key in JSON and CSV, its Prometheus
// family, the family's help, the factor to the family's base unit, and the gpu_sample member.
// Constant data; thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>

#include "vramkit/monitor/sample.hpp"

namespace vramkit::monitor {

/// The gpu_sample member a field reads and writes; its type is the field's value type.
using gpu_member =
    std::variant<std::optional<std::uint64_t> gpu_sample::*, std::optional<unsigned> gpu_sample::*,
                 std::optional<double> gpu_sample::*>;

/// One GPU figure on the wire.
struct gpu_field {
  std::string_view key;  ///< JSON key and CSV column, with the sample's unit: "sm_clock_mhz"
  std::string_view
      metric;             ///< Prometheus gauge family, in base units: "vramkit_gpu_sm_clock_hertz"
  std::string_view help;  ///< the family's HELP text
  double to_base_unit;    ///< metric value = sample value * to_base_unit (MHz -> Hz: 1e6)
  int csv_column;         ///< position among the CSV's GPU figure columns; -1: not in the CSV
  gpu_member member;
};

/// Every GPU figure, in the exposition's family order.
[[nodiscard]] std::span<const gpu_field> gpu_fields() noexcept;

/// The fields that are CSV columns, in column order.
[[nodiscard]] std::span<const gpu_field* const> gpu_csv_fields();

/// The field of `member`; every optional figure of gpu_sample has one (logic_error otherwise).
[[nodiscard]] const gpu_field& gpu_field_of(gpu_member member);

/// The field whose Prometheus family is `metric`, or nullptr.
[[nodiscard]] const gpu_field* gpu_field_by_metric(std::string_view metric) noexcept;

/// Family of the per-GPU liveness gauge (1 ok, 0 lost or in error); not a gpu_sample figure.
inline constexpr std::string_view gpu_up_metric = "vramkit_gpu_up";

/// The field's value in `g`, as a double in the sample's unit; empty when unknown.
[[nodiscard]] std::optional<double> field_value(const gpu_sample& g, const gpu_field& f);

/// The field's value in `g` as text that reads back exactly: integers as integers, other numbers
/// in the shortest form that round-trips; "" when unknown.
[[nodiscard]] std::string field_text(const gpu_sample& g, const gpu_field& f);

/// Sets the field in `g` from text written by field_text ("" clears it). Throws invalid_input
/// naming the key when the text is not a number of the field's type.
void set_field_text(gpu_sample& g, const gpu_field& f, const std::string& text);

/// Sets the field in `g` from a metric value in base units (the inverse of to_base_unit); integer
/// fields round to the nearest integer, NaN and negatives read as 0, values past the type's range
/// as its maximum.
void set_field_from_metric(gpu_sample& g, const gpu_field& f, double metric_value);

namespace detail {
/// Reads all of `text` as a T (std::uint64_t, std::int64_t, unsigned or double); "" gives nothing.
/// Throws invalid_input "column KEY: 'TEXT' is not a number".
template <typename T>
std::optional<T> parse_number(const std::string& text, std::string_view key);
}  // namespace detail

}  // namespace vramkit::monitor

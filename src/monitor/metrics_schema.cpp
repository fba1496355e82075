// The GPU field table and the typed access to gpu_sample through it.
#include "vramkit/monitor/metrics_schema.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <vector>

#include <fmt/format.h>

#include "vramkit/core/error.hpp"

namespace vramkit::monitor {
namespace {

using g = gpu_sample;

// Family order is the exposition's; csv_column keeps the CSV's column order of schema 1.
constexpr std::array<gpu_field, 17> k_fields{{
    {"memory_total_bytes", "vramkit_gpu_memory_total_bytes", "Total device memory in bytes.", 1.0,
     1, &g::memory_total_bytes},
    {"memory_used_bytes", "vramkit_gpu_memory_used_bytes",
     "Device memory allocated on the GPU in bytes; driver-reserved memory is reported separately "
     "where the driver gives it (total = used + reserved + free).",
     1.0, 0, &g::memory_used_bytes},
    {"memory_free_bytes", "vramkit_gpu_memory_free_bytes", "Device memory free in bytes.", 1.0, 2,
     &g::memory_free_bytes},
    {"memory_reserved_bytes", "vramkit_gpu_memory_reserved_bytes",
     "Device memory reserved by the driver and firmware in bytes.", 1.0, 3,
     &g::memory_reserved_bytes},
    {"utilization_gpu_percent", "vramkit_gpu_utilization_ratio",
     "Fraction of the last sample period during which a kernel ran (0-1).", 0.01, 4,
     &g::utilization_gpu_percent},
    {"utilization_memory_percent", "vramkit_gpu_memory_utilization_ratio",
     "Fraction of the last sample period during which device memory was read or written (0-1).",
     0.01, 5, &g::utilization_memory_percent},
    {"pcie_rx_bytes_per_second", "vramkit_gpu_pcie_rx_bytes_per_second",
     "PCIe receive throughput in bytes per second, over the driver's short window.", 1.0, 6,
     &g::pcie_rx_bytes_per_second},
    {"pcie_tx_bytes_per_second", "vramkit_gpu_pcie_tx_bytes_per_second",
     "PCIe transmit throughput in bytes per second, over the driver's short window.", 1.0, 7,
     &g::pcie_tx_bytes_per_second},
    {"nvlink_rx_bytes_per_second", "vramkit_gpu_nvlink_rx_bytes_per_second",
     "NVLink receive throughput summed over links, in bytes per second between samples.", 1.0, -1,
     &g::nvlink_rx_bytes_per_second},
    {"nvlink_tx_bytes_per_second", "vramkit_gpu_nvlink_tx_bytes_per_second",
     "NVLink transmit throughput summed over links, in bytes per second between samples.", 1.0, -1,
     &g::nvlink_tx_bytes_per_second},
    {"sm_clock_mhz", "vramkit_gpu_sm_clock_hertz", "SM clock in hertz.", 1e6, 10, &g::sm_clock_mhz},
    {"memory_clock_mhz", "vramkit_gpu_memory_clock_hertz", "Memory clock in hertz.", 1e6, 11,
     &g::memory_clock_mhz},
    {"temperature_celsius", "vramkit_gpu_temperature_celsius",
     "GPU die temperature in degrees Celsius.", 1.0, 8, &g::temperature_celsius},
    {"power_watts", "vramkit_gpu_power_watts", "Power draw in watts.", 1.0, 9, &g::power_watts},
    {"ecc_corrected_errors", "vramkit_gpu_ecc_corrected_errors",
     "Corrected ECC errors since the counters were last cleared (aggregate).", 1.0, -1,
     &g::ecc_corrected_errors},
    {"ecc_uncorrected_errors", "vramkit_gpu_ecc_uncorrected_errors",
     "Uncorrected ECC errors since the counters were last cleared (aggregate).", 1.0, -1,
     &g::ecc_uncorrected_errors},
    {"retired_pages", "vramkit_gpu_retired_pages",
     "Retired pages, or remapped rows on GPUs that remap rows.", 1.0, -1, &g::retired_pages},
}};

}  // namespace

template <typename T>
std::optional<T> detail::parse_number(const std::string& text, std::string_view key) {
  if (text.empty()) return std::nullopt;
  try {
    std::size_t used = 0;
    T v{};
    if constexpr (std::is_floating_point_v<T>) {
      v = static_cast<T>(std::stod(text, &used));
    } else if constexpr (std::is_signed_v<T>) {
      v = static_cast<T>(std::stoll(text, &used));
    } else {
      // stoull reads "-5" as 2^64-5: a negative count is refused, not wrapped.
      if (text.find('-') != std::string::npos)
        throw invalid_input(fmt::format("column {}: '{}' is negative", key, text));
      const unsigned long long u = std::stoull(text, &used);
      if (u > std::numeric_limits<T>::max()) throw std::out_of_range(text);
      v = static_cast<T>(u);
    }
    if (used != text.size()) throw std::invalid_argument(text);
    return v;
  } catch (const invalid_input&) {
    throw;
  } catch (const std::exception&) {
    throw invalid_input(fmt::format("column {}: '{}' is not a number", key, text));
  }
}

template std::optional<std::uint64_t> detail::parse_number(const std::string&, std::string_view);
template std::optional<std::int64_t> detail::parse_number(const std::string&, std::string_view);
template std::optional<unsigned> detail::parse_number(const std::string&, std::string_view);
template std::optional<double> detail::parse_number(const std::string&, std::string_view);

std::span<const gpu_field> gpu_fields() noexcept { return k_fields; }

std::span<const gpu_field* const> gpu_csv_fields() {
  static const std::vector<const gpu_field*> columns = [] {
    std::vector<const gpu_field*> out;
    for (const auto& f : k_fields) {
      if (f.csv_column >= 0) out.push_back(&f);
    }
    std::sort(out.begin(), out.end(),
              [](const gpu_field* a, const gpu_field* b) { return a->csv_column < b->csv_column; });
    return out;
  }();
  return columns;
}

const gpu_field& gpu_field_of(gpu_member member) {
  for (const auto& f : k_fields) {
    if (f.member == member) return f;
  }
  throw logic_error("gpu_field_of: a gpu_sample member without a field");
}

const gpu_field* gpu_field_by_metric(std::string_view metric) noexcept {
  for (const auto& f : k_fields) {
    if (f.metric == metric) return &f;
  }
  return nullptr;
}

std::optional<double> field_value(const gpu_sample& s, const gpu_field& f) {
  return std::visit(
      [&](auto member) -> std::optional<double> {
        const auto& v = s.*member;
        if (!v) return std::nullopt;
        return static_cast<double>(*v);
      },
      f.member);
}

std::string field_text(const gpu_sample& s, const gpu_field& f) {
  return std::visit(
      [&](auto member) -> std::string {
        const auto& v = s.*member;
        if (!v) return {};
        // fmt's default is the shortest text that reads back to the same value.
        return fmt::format("{}", *v);
      },
      f.member);
}

void set_field_text(gpu_sample& s, const gpu_field& f, const std::string& text) {
  std::visit(
      [&](auto member) {
        using T = typename std::remove_reference_t<decltype(s.*member)>::value_type;
        s.*member = detail::parse_number<T>(text, f.key);
      },
      f.member);
}

void set_field_from_metric(gpu_sample& s, const gpu_field& f, double metric_value) {
  std::visit(
      [&](auto member) {
        using T = typename std::remove_reference_t<decltype(s.*member)>::value_type;
        const double v = metric_value / f.to_base_unit;
        if constexpr (std::is_floating_point_v<T>) {
          s.*member = static_cast<T>(v);
        } else if (!(v > 0)) {
          s.*member = T{0};
        } else if (v >= static_cast<double>(std::numeric_limits<T>::max())) {
          s.*member = std::numeric_limits<T>::max();
        } else {
          s.*member = static_cast<T>(std::round(v));
        }
      },
      f.member);
}

}  // namespace vramkit::monitor

// fake_nvml: a scripted implementation of core's nvml_api whose devices are described by code or
// by a JSON fixture file, for tests and for `--fake-gpus FILE` (watch, serve, slurm). Devices can
// appear and disappear, figures can change, and any query of any device can be made to fail with a
// chosen status. The fixture is parsed here and nowhere else. Thread-safe (one mutex).
//
// Fixture format (byte counts are non-negative integers; total = used + reserved + free, as the
// driver's v2 memory query reports it):
//   {"gpus": [{"name": "NVIDIA H200", "uuid": "GPU-...", "memory_total_bytes": N,
//              "memory_used_bytes": N, "memory_reserved_bytes": N, "utilization_gpu": 0-100,
//              "processes": [{"pid": N, "used_bytes": N, "name": "python3"}]}, ...]}
// Optional per-GPU keys beyond the agreed ones: utilization_memory, temperature_celsius,
// power_watts, pcie_rx_bytes_per_second, pcie_tx_bytes_per_second, sm_clock_mhz,
// memory_clock_mhz, sm_clock_max_mhz, memory_clock_max_mhz, memory_bus_width_bits, pci_bus_id,
// pcie_link_generation, pcie_link_width, pcie_link_generation_max, pcie_link_width_max,
// "lost": true, "fail": {"memory": "not_supported", ...}.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "vramkit/core/nvml_api.hpp"

namespace vramkit::testing {

/// One scripted device.
struct fake_gpu {
  std::string name = "Fake GPU";
  std::string uuid;
  std::uint64_t memory_total_bytes = 0;
  std::uint64_t memory_used_bytes = 0;
  std::optional<std::uint64_t> memory_reserved_bytes;
  // What each query answers, as the NVML struct or value it reads; an empty one answers
  // not_supported.
  std::optional<nvml_utilization> utilization;    ///< nvmlDeviceGetUtilizationRates
  std::optional<double> temperature_celsius;      ///< nvmlDeviceGetTemperature (GPU sensor)
  std::optional<double> power_watts;              ///< nvmlDeviceGetPowerUsage, in watts
  std::optional<nvml_pcie> pcie_throughput;       ///< nvmlDeviceGetPcieThroughput, as rates
  std::optional<nvml_clocks> clocks;              ///< nvmlDeviceGetClockInfo (SM, memory)
  std::optional<nvml_clocks> max_clocks;          ///< nvmlDeviceGetMaxClockInfo
  std::optional<unsigned> memory_bus_width_bits;  ///< nvmlDeviceGetMemoryBusWidth
  std::string pci_bus_id;                       ///< "0000:65:00.0"; matched without regard to case
  std::optional<nvml_pcie_link> pcie_link;      ///< nvmlDeviceGetCurrPcieLink{Generation,Width}
  std::optional<nvml_pcie_link> max_pcie_link;  ///< nvmlDeviceGetMaxPcieLink{Generation,Width}
  std::vector<nvml_process> processes;
  bool lost = false;  ///< every query answers gpu_lost, as a GPU that fell off the bus
  /// Query name ("name", "uuid", "memory", "processes", "utilization", "pcie", "nvlink",
  /// "clocks", "max_clocks", "bus_width", "pcie_link", "max_pcie_link", "temperature", "power",
  /// "ecc", "mig") -> the status it fails with.
  std::map<std::string, nvml_status> failures;
};

class fake_nvml final : public nvml_api {
 public:
  fake_nvml() = default;
  explicit fake_nvml(std::vector<fake_gpu> gpus);

  /// Parses a fixture (format above); throws invalid_input naming `origin`, the GPU and the
  /// problem.
  static std::vector<fake_gpu> parse(std::string_view json_text,
                                     std::string_view origin = "fake GPU fixture");
  /// A fake that reads `path` now and again whenever its modification time changes (checked at
  /// most once per device_count call). Throws invalid_input when the file is unreadable or invalid
  /// at start; later bad edits are reported on stderr and the previous figures kept.
  static std::shared_ptr<fake_nvml> from_file(const std::filesystem::path& path);

  void set_gpus(std::vector<fake_gpu> gpus);
  void add_gpu(fake_gpu gpu);
  /// Removes the device at `index`; the later devices move down one index, as NVML renumbers.
  void remove_gpu(unsigned index);
  /// Runs `edit` on the device at `index` under the lock.
  template <typename F>
  void edit_gpu(unsigned index, F&& edit) {
    std::lock_guard lock(mutex_);
    edit(gpus_.at(index));
  }
  /// Makes every query fail with `status` (as when the driver is unloaded), or work again.
  void fail_all(std::optional<nvml_status> status);
  [[nodiscard]] std::size_t calls() const;

  [[nodiscard]] std::string name() const override { return "fake"; }
  nvml_value<std::string> driver_version() override;
  nvml_value<unsigned> device_count() override;
  nvml_value<unsigned> device_index_by_pci_bus_id(const std::string& pci_bus_id) override;
  nvml_value<std::string> device_name(unsigned index) override;
  nvml_value<std::string> device_uuid(unsigned index) override;
  nvml_value<nvml_memory> memory(unsigned index) override;
  nvml_value<std::vector<nvml_process>> processes(unsigned index) override;
  nvml_value<nvml_utilization> utilization(unsigned index) override;
  nvml_value<nvml_pcie> pcie_throughput(unsigned index) override;
  nvml_value<nvml_pcie_counters> pcie_counters(unsigned index) override;
  nvml_value<nvml_nvlink> nvlink_counters(unsigned index) override;
  nvml_value<nvml_clocks> clocks(unsigned index, nvml_reading which) override;
  nvml_value<unsigned> memory_bus_width_bits(unsigned index) override;
  nvml_value<nvml_pcie_link> pcie_link(unsigned index, nvml_reading which) override;
  nvml_value<double> temperature_celsius(unsigned index) override;
  nvml_value<double> power_watts(unsigned index) override;
  nvml_value<nvml_ecc> ecc(unsigned index) override;
  nvml_value<std::vector<nvml_mig_instance>> mig_instances(unsigned index) override;

 private:
  // Looks up the device for `query`; on failure returns the status to answer with.
  std::optional<nvml_status> check(unsigned index, const char* query, const fake_gpu** gpu);
  // A query whose answer a fake_gpu field scripts: the field's value, `missing` (not_supported)
  // when it is empty, or the failure `query` is scripted to give.
  template <typename T>
  nvml_value<T> answer(unsigned index, const char* query, std::optional<T> fake_gpu::*field,
                       const char* missing);
  void reload_if_changed();

  mutable std::mutex mutex_;
  std::vector<fake_gpu> gpus_;
  std::optional<nvml_status> fail_all_;
  std::size_t calls_ = 0;
  std::filesystem::path file_;
  std::filesystem::file_time_type file_mtime_{};
  std::uintmax_t file_size_ = 0;
};

}  // namespace vramkit::testing

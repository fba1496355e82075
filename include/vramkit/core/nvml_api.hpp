// nvml_api: the NVML queries of the monitor and the probe, declared with vramkit's own types (no
// NVML header). `load_nvml` opens libnvidia-ml.so.1 with dlopen at run time: vramkit's one NVML
// loader; core/testing/fake_nvml.hpp provides a scripted implementation for tests. Every query
// returns its value with a status, so "not supported", "no permission" and "GPU is lost" are
// values, never exceptions. Implementations are thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "vramkit/core/result.hpp"

namespace vramkit {

/// Outcome of one NVML query, mapped from nvmlReturn_t.
enum class nvml_status {
  ok,
  not_supported,  ///< NVML_ERROR_NOT_SUPPORTED: the device or driver has no such counter
  no_permission,  ///< NVML_ERROR_NO_PERMISSION
  gpu_lost,       ///< NVML_ERROR_GPU_IS_LOST: the device fell off the bus
  not_found,      ///< NVML_ERROR_NOT_FOUND / GPU_NOT_FOUND: no such device (any more)
  uninitialized,  ///< the library is not (or no longer) initialised
  error,          ///< any other failure
};
const char* to_string(nvml_status s) noexcept;

/// A queried value and its status; `value` is meaningful only when `status == ok`.
template <typename T>
struct nvml_value {
  T value{};
  nvml_status status = nvml_status::error;
  std::string detail;  ///< the driver's error string when status != ok

  [[nodiscard]] bool ok() const noexcept { return status == nvml_status::ok; }
  /// The value, or nothing when the query failed (for callers that only need "known or not").
  [[nodiscard]] std::optional<T> to_optional() const {
    return ok() ? std::optional<T>(value) : std::nullopt;
  }
  static nvml_value success(T v) { return nvml_value{std::move(v), nvml_status::ok, {}}; }
  static nvml_value failure(nvml_status s, std::string why) {
    return nvml_value{T{}, s, std::move(why)};
  }
};

/// Device memory in bytes. With the v2 query `reserved` is known and total = used + reserved + free
/// (measured with driver 580 on an H200: used 3.25 MiB, reserved 615 MiB on an idle device); the
/// v1 query has no reserved figure and counts it in `used`.
struct nvml_memory {
  std::uint64_t total = 0;
  std::uint64_t used = 0;
  std::uint64_t free = 0;
  std::optional<std::uint64_t> reserved;
};

enum class nvml_process_kind { compute, graphics, compute_and_graphics };

/// One process with a context on the device; `used_bytes` is empty when the driver does not
/// report it (NVML_VALUE_NOT_AVAILABLE, e.g. some virtualised GPUs or Windows WDDM).
struct nvml_process {
  std::uint32_t pid = 0;
  std::optional<std::uint64_t> used_bytes;
  nvml_process_kind kind = nvml_process_kind::compute;
  std::string name;  ///< only from fakes; the real driver gives no name (read /proc instead)
};

struct nvml_utilization {
  unsigned gpu_percent = 0;     ///< time a kernel ran, over the driver's sample period
  unsigned memory_percent = 0;  ///< time device memory was read or written
};

/// PCIe throughput in bytes per second, as the driver measures it over a short (20 ms) window.
struct nvml_pcie {
  std::uint64_t rx_bytes_per_second = 0;
  std::uint64_t tx_bytes_per_second = 0;
};

/// Cumulative PCIe byte counters since the driver loaded; the sampler differentiates them. Cheaper
/// than nvml_pcie, whose query blocks for its 20 ms window.
struct nvml_pcie_counters {
  std::uint64_t rx_bytes = 0;
  std::uint64_t tx_bytes = 0;
};

/// Cumulative NVLink data counters summed over all links, in bytes; the sampler differentiates.
struct nvml_nvlink {
  unsigned link_count = 0;
  std::uint64_t rx_bytes = 0;
  std::uint64_t tx_bytes = 0;
};

/// Which reading of a quantity a query asks for: its value now, or the most the device (and, for
/// its PCIe link, its slot) supports. NVML answers each through a function of its own.
enum class nvml_reading { current, max };

struct nvml_clocks {
  unsigned sm_mhz = 0;
  unsigned memory_mhz = 0;
  bool operator==(const nvml_clocks&) const = default;
};

/// A PCIe link: generation (1 to 6) and width in lanes.
struct nvml_pcie_link {
  unsigned generation = 0;
  unsigned width = 0;
  bool operator==(const nvml_pcie_link&) const = default;
};

/// ECC error counts since the driver loaded the device (aggregate), and retired/remapped pages.
struct nvml_ecc {
  std::optional<std::uint64_t> corrected;
  std::optional<std::uint64_t> uncorrected;
  std::optional<std::uint64_t> retired_pages;  ///< retired pages, or remapped rows on newer GPUs
};

/// One MIG device (GPU instance + compute instance) of a parent GPU.
struct nvml_mig_instance {
  unsigned gpu_instance_id = 0;
  unsigned compute_instance_id = 0;
  std::string uuid;
  std::optional<nvml_memory> memory;
};

/// The NVML queries of the monitor and the probe, addressed by NVML device index (which need not
/// be the CUDA ordinal: find it with device_index_by_pci_bus_id). A device that has disappeared
/// answers gpu_lost or not_found; the caller keeps going with the others.
class nvml_api {
 public:
  virtual ~nvml_api() = default;

  /// "nvml" for the driver library, "fake" for fake_nvml.
  [[nodiscard]] virtual std::string name() const = 0;
  /// The driver's version string ("580.65.06"); fails as every query does without a driver.
  virtual nvml_value<std::string> driver_version() = 0;
  /// How many devices NVML sees now; indexes run from 0 to the count less one.
  virtual nvml_value<unsigned> device_count() = 0;
  /// The index of the device at `pci_bus_id` ("0000:65:00.0", as cudaDeviceGetPCIBusId gives it);
  /// not_found when NVML has no device there.
  virtual nvml_value<unsigned> device_index_by_pci_bus_id(const std::string& pci_bus_id) = 0;
  /// The product name ("NVIDIA H200").
  virtual nvml_value<std::string> device_name(unsigned index) = 0;
  /// The device's UUID ("GPU-" and 36 hex digits and dashes), stable across reboots and indexes.
  virtual nvml_value<std::string> device_uuid(unsigned index) = 0;
  /// Memory in bytes: the v2 query (with `reserved`) where the driver has it, else v1.
  virtual nvml_value<nvml_memory> memory(unsigned index) = 0;
  /// Compute and graphics processes merged by pid.
  virtual nvml_value<std::vector<nvml_process>> processes(unsigned index) = 0;
  /// Busy percentages over the driver's last sample period (1/6 s to 1 s, by product).
  virtual nvml_value<nvml_utilization> utilization(unsigned index) = 0;
  /// Blocks for the driver's measuring window (20 ms per direction).
  virtual nvml_value<nvml_pcie> pcie_throughput(unsigned index) = 0;
  /// Byte counters (NVML field values), not rates: not_supported on drivers without them.
  virtual nvml_value<nvml_pcie_counters> pcie_counters(unsigned index) = 0;
  /// Byte counters summed over all links (NVML field values, scope all); fails without NVLink.
  virtual nvml_value<nvml_nvlink> nvlink_counters(unsigned index) = 0;
  /// SM and memory clocks in MHz: now, or the highest the device runs at.
  virtual nvml_value<nvml_clocks> clocks(unsigned index, nvml_reading which) = 0;
  /// The memory bus width in bits.
  virtual nvml_value<unsigned> memory_bus_width_bits(unsigned index) = 0;
  /// The PCIe link: as trained now (an idle link may train down to save power), or the fastest
  /// the device and its slot support.
  virtual nvml_value<nvml_pcie_link> pcie_link(unsigned index, nvml_reading which) = 0;
  /// The GPU die's temperature in degrees Celsius.
  virtual nvml_value<double> temperature_celsius(unsigned index) = 0;
  /// The board's power draw now, in watts (the driver reports milliwatts).
  virtual nvml_value<double> power_watts(unsigned index) = 0;
  /// ECC counts and retired pages; a field the device does not count stays empty.
  virtual nvml_value<nvml_ecc> ecc(unsigned index) = 0;
  /// The MIG devices of `index`; an empty list when MIG is disabled.
  virtual nvml_value<std::vector<nvml_mig_instance>> mig_instances(unsigned index) = 0;
};

/// Loads the NVIDIA driver's NVML with dlopen and initialises it. Unavailable (no_driver) with the
/// dlopen/dlsym/nvmlInit reason when the library is missing or unusable; never throws. `library`
/// is the file name or path to open (tests pass a path to a stand-in library).
result<std::shared_ptr<nvml_api>> load_nvml(const std::string& library = "libnvidia-ml.so.1");

}  // namespace vramkit

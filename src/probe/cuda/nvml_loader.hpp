// Reads what the CUDA runtime does not say about a GPU (PCIe link generation and width, clocks,
// UUID, driver version) through NVML, loaded at run time with dlopen("libnvidia-ml.so.1") and its
// own declarations, so vramkit never links NVML. Every field is optional: a missing library, an
// unsupported query or a failed call leaves it empty. Thread-safe (loads once).
#pragma once

#include <optional>
#include <string>

#include "vramkit/core/result.hpp"

namespace vramkit::probe::detail {

/// What NVML reports for one GPU; empty optionals are unsupported or failed queries.
struct nvml_gpu_info {
  std::optional<std::string> uuid;
  std::optional<unsigned> pcie_gen_current, pcie_gen_max;
  std::optional<unsigned> pcie_width_current, pcie_width_max;
  std::optional<unsigned> memory_clock_mhz, memory_clock_max_mhz;
  std::optional<unsigned> sm_clock_mhz, sm_clock_max_mhz;
  std::optional<unsigned> bus_width_bits;
};

/// NVML's view of the GPU at `pci_bus_id` ("0000:65:00.0"), or why there is none.
result<nvml_gpu_info> nvml_query(const std::string& pci_bus_id);

/// The NVIDIA driver version ("580.65.06"), or why there is none.
result<std::string> nvml_driver_version();

}  // namespace vramkit::probe::detail

// The GPU catalogue: capacity, memory bandwidth, host link and compute rate of common data-centre
// and desktop GPUs, each with its source (data/plan/gpus.json, compiled in). Immutable after
// first use; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace vramkit::plan {

/// One catalogue entry.
struct gpu_spec {
  std::string name;
  std::vector<std::string> aliases;
  std::uint64_t memory_bytes = 0;  ///< capacity (memory.total as nvidia-smi reports it, or nominal)
  std::string memory_basis;        ///< "smi" or "nominal"
  double hbm_bytes_per_s = 0;
  int pcie_gen = 0, pcie_width = 0;
  double nvlink_bytes_per_s = 0;  ///< per GPU, one direction; 0 = none
  double bf16_flops = 0;          ///< dense tensor-core rate (FP16 on GPUs without BF16)
  double fp32_flops = 0;          ///< non-tensor FP32 rate
  int sm = 0;                     ///< compute capability x10
  std::string source;

  /// One-direction PCIe bandwidth the link can carry in practice (~80% of the raw rate).
  [[nodiscard]] double pcie_bytes_per_s() const noexcept;
};

/// Every entry, in catalogue order.
const std::vector<gpu_spec>& gpu_catalogue();

/// What --gpu names: a catalogue GPU, or a bare capacity.
struct gpu_target {
  const gpu_spec* gpu = nullptr;  ///< the catalogue entry; null for a capacity
  std::uint64_t capacity_bytes = 0;
};

/// Reads --gpu: a catalogue name or alias ("h100"), a unique model number ("4090" is the RTX
/// 4090, never 4090 bytes), or a capacity with its unit ("24GiB", at least 256 MiB). Throws
/// invalid_input naming the value otherwise.
gpu_target parse_gpu_target(std::string_view text);

/// The entry whose name or alias matches (case-insensitive, spaces and dashes ignored); throws
/// invalid_input listing the catalogue when there is none.
const gpu_spec& find_gpu(std::string_view name);

}  // namespace vramkit::plan

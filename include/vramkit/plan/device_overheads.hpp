// Memory and bandwidth figures that come from the machine rather than the model: the CUDA
// context, library memory outside PyTorch's allocator, and the host link used for offload. Either
// documented defaults or read from a `vramkit probe --json` file. Plain values.
#pragma once

#include <cstdint>
#include <string>

namespace vramkit::plan {

/// Per-GPU overheads added to the allocator's reserved bytes for the device figure.
struct device_overheads {
  /// CUDA context plus the kernels PyTorch's lazy module loading brings in during a step,
  /// as nvidia-smi counts them (default documented in docs/plan.md).
  std::uint64_t context_bytes = 0;
  /// Host-to-device bandwidth of pinned memory, bytes/s (offload cost in the fit search).
  double h2d_bytes_per_s = 0;
  std::string source;  ///< "default" or the probe file it came from
};

/// Documented defaults (docs/plan.md, "Overheads").
device_overheads default_overheads();

/// Reads a `vramkit probe --json` file: takes the context figure and the pinned host-to-device
/// bandwidth where the file has them, defaults otherwise. Throws usage_error when the file cannot
/// be read or is not JSON.
device_overheads overheads_from_probe(const std::string& path);

}  // namespace vramkit::plan

// Memory and bandwidth figures that come from the machine rather than the model: the CUDA
// context, library memory outside PyTorch's allocator, and the host link used for offload. Either
// documented defaults or read from a `vramkit probe --json` file. Plain values.
#pragma once

#include <cstdint>
#include <string>

namespace vramkit::plan {

/// Per-GPU overheads added to the allocator's reserved bytes for the device figure.
struct device_overheads {
  /// CUDA context of a PyTorch process after initialisation (nvidia-smi, before any kernel ran).
  std::uint64_t context_bytes = 0;
  /// Device memory of the kernel modules lazy loading brings in during a training step /
  /// a generate() call (cuBLAS, cuDNN, ATen kernels), on top of context_bytes.
  std::uint64_t train_modules_bytes = 0;
  std::uint64_t infer_modules_bytes = 0;
  /// Per GPU of a multi-GPU run: NCCL's communicator and channel buffers (outside PyTorch's
  /// allocator), counted when the request uses more than one GPU.
  std::uint64_t collective_bytes = 0;
  /// Host-to-device bandwidth of pinned memory, bytes/s (offload cost in the fit search).
  double h2d_bytes_per_s = 0;
  /// Measured kernel rates for the step-time model (0: from the GPU catalogue): dense bf16 GEMMs
  /// (FLOP/s), the fused attention kernel (FLOP/s) and device memory copies (bytes/s).
  double gemm_flops = 0;
  double attention_flops = 0;
  double memory_bytes_per_s = 0;
  std::string source;  ///< "default" or the probe file it came from
};

/// Documented defaults (docs/plan.md, "Overheads").
device_overheads default_overheads();

/// Reads a `vramkit probe --json` file: takes the context figure and the pinned host-to-device
/// bandwidth where the file has them, defaults otherwise. Throws invalid_input when the file cannot
/// be read or is not JSON.
device_overheads overheads_from_probe(const std::string& path);

}  // namespace vramkit::plan

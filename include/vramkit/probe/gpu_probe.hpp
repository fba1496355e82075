// The GPU sections of `vramkit probe`: device memory, host<->device copies, zero-copy, managed
// memory, peer copies, latency, allocation cost, copy/compute overlap, access patterns, cache
// levels, transfers per NUMA node and all GPUs at once, for every CUDA device.
// Plain C++ (no CUDA headers). Not thread-safe: run one probe at a time per process.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "vramkit/probe/measurement.hpp"

namespace vramkit::probe {

/// Runs the GPU sections that `options` selects on every CUDA device and appends their
/// measurements, curves, memory levels, skips and header fields to `report`. Without a CUDA build
/// or without a usable GPU it adds one `skipped{"gpu", reason}` and returns normally; a section
/// that cannot run here (one GPU for p2p, no concurrent managed access) adds its own skip. Throws
/// vramkit::cuda_error only on an unexpected CUDA failure, or logic_error when a result fails
/// its checksum.
void run_gpu_probe(const probe_options& options, probe_report& report);

/// The stable keys the GPU sections produce, with placeholders ({N}, {A}, {B}) for device
/// ordinals, each with a one-line description; for `vramkit probe --list`.
std::vector<std::pair<std::string, std::string>> gpu_probe_keys();

/// The `--only` section names the GPU probe understands: "gpu" (all of them), then each section
/// of the case table once ("device", "h2d", "zerocopy", "managed", "p2p", "gpu-latency", "alloc",
/// "overlap", "patterns", "gpu-cache", "h2d-numa", "all-gpus").
std::vector<std::string> gpu_probe_sections();

}  // namespace vramkit::probe

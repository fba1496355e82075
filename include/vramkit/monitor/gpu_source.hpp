// The GPU source of the commands that read GPUs (watch, serve, slurm): a fake-GPU fixture, or the
// driver's NVML. Thread-safe (no shared state).
#pragma once

#include <filesystem>
#include <memory>

#include "vramkit/core/nvml_api.hpp"
#include "vramkit/core/result.hpp"

namespace vramkit::monitor {

/// The fixture at `fake_gpus` when it is not empty (testing::fake_nvml, re-read whenever the file
/// changes), else the driver's NVML loaded from $VRAMKIT_NVML_LIBRARY when that is set and not
/// empty, else from libnvidia-ml.so.1. Throws invalid_input when the fixture cannot be read or
/// parsed; a missing or unusable driver is returned as unavailable, with its reason.
[[nodiscard]] result<std::shared_ptr<nvml_api>> open_gpu_source(
    const std::filesystem::path& fake_gpus);

}  // namespace vramkit::monitor

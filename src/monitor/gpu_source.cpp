// open_gpu_source: the fixture or the driver's NVML, with the VRAMKIT_NVML_LIBRARY override.
#include "vramkit/monitor/gpu_source.hpp"

#include <cstdlib>

#include "vramkit/core/testing/fake_nvml.hpp"

namespace vramkit::monitor {

result<std::shared_ptr<nvml_api>> open_gpu_source(const std::filesystem::path& fake_gpus) {
  if (!fake_gpus.empty())
    return std::shared_ptr<nvml_api>(testing::fake_nvml::from_file(fake_gpus));
  // The override lets tests point at a stand-in library without touching the system's.
  const char* library = std::getenv("VRAMKIT_NVML_LIBRARY");
  return load_nvml(library != nullptr && *library != '\0' ? library : "libnvidia-ml.so.1");
}

}  // namespace vramkit::monitor

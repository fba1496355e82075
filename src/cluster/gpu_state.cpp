// The GPUs of a node from NVML (the driver, or the fake-GPU fixture through testing::fake_nvml).
#include "vramkit/cluster/gpu_state.hpp"

#include <fmt/format.h>

#include "vramkit/core/error.hpp"
#include "vramkit/core/testing/fake_nvml.hpp"

namespace vramkit::cluster {

std::vector<gpu_state> gpus_from_nvml(nvml_api& nvml) {
  const auto count = nvml.device_count();
  if (!count.ok())
    throw error(
        fmt::format("cannot count the GPUs: {} ({})", to_string(count.status), count.detail));
  std::vector<gpu_state> gpus;
  for (unsigned i = 0; i < count.value; ++i) {
    const auto memory = nvml.memory(i);
    if (!memory.ok()) {
      throw error(fmt::format("GPU {}: cannot read its memory: {} ({})", i,
                              to_string(memory.status), memory.detail));
    }
    gpu_state g;
    g.index = static_cast<int>(i);
    if (auto name = nvml.device_name(i); name.ok()) g.name = name.value;
    if (auto uuid = nvml.device_uuid(i); uuid.ok()) g.uuid = uuid.value;
    g.total_bytes = memory.value.total;
    g.used_bytes = memory.value.used;
    g.reserved_bytes = memory.value.reserved.value_or(0);
    g.free_bytes = memory.value.free;
    gpus.push_back(std::move(g));
  }
  return gpus;
}

std::vector<gpu_state> gpus_from_fixture_json(std::string_view json_text, std::string_view origin) {
  testing::fake_nvml fake(testing::fake_nvml::parse(json_text, origin));
  return gpus_from_nvml(fake);
}

}  // namespace vramkit::cluster

// Fuzzes both readers of the fake-GPU fixture: the monitor's fake NVML and the cluster's GPU
// states.
#include <cstddef>
#include <cstdint>

#include "fuzz_input.hpp"
#include "vramkit/cluster/gpu_state.hpp"
#include "vramkit/core/testing/fake_nvml.hpp"

// The entry point libFuzzer calls (its name is libFuzzer's).
// NOLINTNEXTLINE(readability-identifier-naming)
extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text = vramkit::fuzz::as_text(data, size);
  vramkit::fuzz::expect_clean([&] { (void)vramkit::testing::fake_nvml::parse(text); });
  vramkit::fuzz::expect_clean([&] {
    for (const auto& gpu : vramkit::cluster::gpus_from_fixture_json(text, "fuzz")) {
      if (gpu.free_bytes > gpu.total_bytes) {
        vramkit::fuzz::property_failed("a GPU with more free than total memory");
      }
    }
  });
  return 0;
}

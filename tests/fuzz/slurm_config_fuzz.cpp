// Fuzzes the reader of the Slurm submit settings (vramkit-slurm.conf, `slurm shards --config`):
// it returns or throws invalid_input, and a value it returns was written as a whole number.
#include <cstddef>
#include <cstdint>

#include "fuzz_input.hpp"
#include "vramkit/cluster/slurm_gres.hpp"

// The entry point libFuzzer calls (its name is libFuzzer's).
// NOLINTNEXTLINE(readability-identifier-naming)
extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text = vramkit::fuzz::as_text(data, size);
  vramkit::fuzz::expect_clean([&] {
    const auto settings = vramkit::cluster::parse_slurm_shard_settings(text, "fuzz");
    for (const auto& v : {settings.shard_bytes, settings.max_gpu_shards}) {
      if (v && text.find(std::to_string(*v)) == std::string::npos) {
        vramkit::fuzz::property_failed("a setting that the text does not hold");
      }
    }
  });
  return 0;
}

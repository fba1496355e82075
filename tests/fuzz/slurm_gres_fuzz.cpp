// Fuzzes the Slurm configuration writer with GPU fixtures: GPU names and sizes come from the
// fixture (as from a node's exporter), the node name and shard size from the input's first line.
// The gres.conf written has exactly one comment header of two lines and two lines per GPU, so
// nothing in a GPU's name can add a line to it.
#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "fuzz_input.hpp"
#include "vramkit/cluster/gpu_state.hpp"
#include "vramkit/cluster/slurm_gres.hpp"
#include "vramkit/core/units.hpp"

// The entry point libFuzzer calls (its name is libFuzzer's).
// NOLINTNEXTLINE(readability-identifier-naming)
extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text = vramkit::fuzz::as_text(data, size);
  vramkit::fuzz::expect_clean([&] {
    const auto gpus = vramkit::cluster::gpus_from_fixture_json(text, "fuzz");
    for (const auto& g : gpus) {
      const std::string type = vramkit::cluster::slurm_gpu_type(g.name);
      if (type.empty() || !std::all_of(type.begin(), type.end(), [](char c) {
            return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
          })) {
        vramkit::fuzz::property_failed("a GRES type outside [a-z0-9]+");
      }
    }
    vramkit::cluster::slurm_gres_options options;
    options.node_name = "node-a";
    options.shard_bytes = std::uint64_t{1} << 30;
    const auto config = vramkit::cluster::make_slurm_gres(gpus, options);
    const auto lines = std::count(config.gres_conf.begin(), config.gres_conf.end(), '\n');
    if (lines != static_cast<std::ptrdiff_t>(2 + 2 * gpus.size())) {
      vramkit::fuzz::property_failed("gres.conf has lines that no GPU accounts for");
    }
  });
  return 0;
}

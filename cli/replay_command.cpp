// `vramkit replay TRACE`: replays a recorded allocation trace (vramkit-trace v1) through
// vramkit's pools and models of PyTorch's allocators, and prints what each reserves.
#include <fmt/format.h>

#include <optional>
#include <string>

#include "commands.hpp"
#include "vramkit/core/error.hpp"
#include "vramkit/core/units.hpp"
#include "vramkit/mr/allocator_comparison.hpp"
#include "vramkit/mr/trace.hpp"
#include "vramkit/plan/gpu_catalogue.hpp"

namespace vramkit::cli {

void add_replay_command(CLI::App& app, command_context& ctx) {
  struct options {
    std::string trace_path;
    std::string allocator = "all";
    std::string gpu;
    std::string capacity;
    unsigned passes = 1;
    bool json = false;
  };
  auto opt = std::make_shared<options>();
  CLI::App* cmd = app.add_subcommand(
      "replay", "Replay an allocation trace through vramkit's pools and PyTorch's allocators");
  cmd->add_option("TRACE", opt->trace_path, "vramkit-trace v1 file")->required();
  cmd->add_option("--allocator", opt->allocator,
                  "vramkit_vmm_pool, vramkit_pool, pytorch_native, pytorch_expandable_segments "
                  "or all");
  auto* gpu = cmd->add_option("--gpu", opt->gpu, "fit the trace on this GPU's memory (catalogue)");
  auto* cap = cmd->add_option("--capacity", opt->capacity, "fit the trace in this many bytes");
  gpu->excludes(cap);
  cmd->add_option("--passes", opt->passes,
                  "replay the trace N times back to back (as a training loop repeats its step); "
                  "peaks over all passes")
      ->check(CLI::Range(1u, mr::max_replay_passes));
  cmd->add_flag("--json", opt->json, "JSON for scripts");
  cmd->callback([opt, &ctx] {
    mr::comparison_options o;
    if (opt->allocator != "all") o.allocators = {opt->allocator};
    o.passes = opt->passes;
    if (!opt->gpu.empty()) o.capacity_bytes = plan::find_gpu(opt->gpu).memory_bytes;
    if (!opt->capacity.empty()) {
      try {
        o.capacity_bytes = parse_bytes(opt->capacity);
      } catch (const std::exception& e) {
        throw invalid_input(std::string("--capacity: ") + e.what());
      }
      if (*o.capacity_bytes == 0) throw invalid_input("--capacity: must be more than 0 bytes");
    }
    const mr::trace t = mr::read_trace(opt->trace_path);
    const auto results = mr::compare_allocators(t, o);
    if (opt->json) {
      fmt::print("{}\n", mr::comparison_to_json(results, o));
    } else {
      fmt::print("{}", mr::comparison_to_table(results, o));
    }
    ctx.exit_code = 0;
  });
}

}  // namespace vramkit::cli

// Placeholder for `vramkit plan` until its module lands: says so and exits 1.
#include "commands.hpp"

#include <cstdio>

namespace vramkit::cli {

void add_plan_command(CLI::App& app, command_context& ctx) {
  auto* sub = app.add_subcommand("plan", "plan (not available in this build yet)");
  sub->allow_extras();
  sub->callback([&ctx] {
    std::fprintf(stderr, "vramkit: 'plan' is not available in this build yet\n");
    ctx.exit_code = 1;
  });
}

}  // namespace vramkit::cli

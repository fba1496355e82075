// Placeholder for `vramkit serve --extender` until the cluster module lands.
#include "commands.hpp"

namespace vramkit::cli {

std::function<bool()> add_extender_options(CLI::App& serve, command_context& ctx) {
  return [] { return false; };
}

}  // namespace vramkit::cli

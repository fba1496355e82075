// vramkit command line: parses, dispatches to a subcommand, maps errors to exit codes
// (0 ok, 1 runtime failure, 2 usage error) with one line on stderr.
#include <cstdio>
#include <exception>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include "commands.hpp"
#include "vramkit/core/error.hpp"
#include "vramkit/core/version.hpp"

int main(int argc, char** argv) {
  CLI::App app{"vramkit: GPU memory (VRAM/HBM) and host memory (DDR) as one system"};
  app.name("vramkit");
  app.set_version_flag("--version", vramkit::build_summary());
  app.require_subcommand(0, 1);
  app.fallthrough(false);

  vramkit::cli::command_context ctx;
  vramkit::cli::add_probe_command(app, ctx);
  vramkit::cli::add_plan_command(app, ctx);
  vramkit::cli::add_watch_command(app, ctx);
  vramkit::cli::add_serve_command(app, ctx);
  vramkit::cli::add_slurm_command(app, ctx);
  vramkit::cli::add_extender_command(app, ctx);
  vramkit::cli::add_device_plugin_command(app, ctx);
  vramkit::cli::add_replay_command(app, ctx);
  vramkit::cli::add_texture_command(app, ctx);

  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {
    // --help, --help-all and --version: CLI11 prints them and answers 0.
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // One line naming what is wrong; CLI11's messages name the flag or value.
    std::fprintf(stderr, "vramkit: %s (see vramkit --help)\n", e.what());
    return 2;
  } catch (const vramkit::invalid_input& e) {
    // Bad input from the user, named by the library: a usage error.
    std::fprintf(stderr, "vramkit: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    // A runtime failure, out of memory (std::bad_alloc) included.
    std::fprintf(stderr, "vramkit: %s\n", e.what());
    return 1;
  }
  if (app.get_subcommands().empty()) {
    std::fprintf(stderr,
                 "vramkit: a subcommand is required: probe, plan, watch, serve, slurm, extender, "
                 "device-plugin, replay or texture (see vramkit --help)\n");
    return 2;
  }
  return ctx.exit_code;
}

// The vramkit subcommands. Each add_*_command registers one subcommand on the app; its callback
// parses nothing further, calls the library and prints, and sets ctx.exit_code.
#pragma once

#include <CLI/CLI.hpp>

namespace vramkit::cli {

/// Shared by the subcommands of one invocation.
struct command_context {
  int exit_code = 0;
};

void add_probe_command(CLI::App& app, command_context& ctx);
void add_plan_command(CLI::App& app, command_context& ctx);
void add_watch_command(CLI::App& app, command_context& ctx);
void add_serve_command(CLI::App& app, command_context& ctx);
void add_slurm_command(CLI::App& app, command_context& ctx);
void add_texture_command(CLI::App& app, command_context& ctx);
/// Adds `textures` (the texture budget planner) under `vramkit plan`; plan's own callback must
/// return at once when this subcommand was parsed.
CLI::App* add_plan_textures_subcommand(CLI::App& plan, command_context& ctx);

}  // namespace vramkit::cli

#include <functional>

namespace vramkit::cli {

/// Implemented by the cluster module (extender_command.cpp): adds `--extender` and its options to
/// the `serve` subcommand. The returned function, called from serve's callback, runs the scheduler
/// extender and returns true when `--extender` was given; otherwise it returns false at once.
std::function<bool()> add_extender_options(CLI::App& serve, command_context& ctx);

}  // namespace vramkit::cli

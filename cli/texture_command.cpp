// `vramkit texture plan|demo`: the texture budget planner and the GPU streaming demo; also the
// `textures` subcommand that `vramkit plan` forwards to (add_plan_textures_subcommand).
#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
#include <string>

#include "commands.hpp"
#include "vramkit/core/units.hpp"
#include "vramkit/texture/streaming_demo.hpp"
#include "vramkit/texture/texture_plan.hpp"

namespace vramkit::cli {
namespace {

struct texture_plan_args {
  std::string path;
  std::string budget;
  bool json = false;
};

void add_plan_options(CLI::App* sub, const std::shared_ptr<texture_plan_args>& a) {
  sub->add_option("path", a->path,
                  "folder of .dds/.png/.astc files, one such file, or a JSON manifest")
      ->required();
  sub->add_option("--budget", a->budget,
                  "device byte budget (e.g. 512MiB): reports the mip drop that fits it")
      ->check(byte_size_check());
  sub->add_flag("--json", a->json, "print one JSON object (schema_version 1)");
}

void run_plan(const texture_plan_args& a, command_context& ctx) {
  texture::plan_options options;
  if (!a.budget.empty()) options.budget_bytes = parse_bytes(a.budget);
  const auto plan = texture::plan_textures(texture::load_entries(a.path), options);
  if (a.json) {
    std::cout << plan.dump(2) << "\n";
  } else {
    std::cout << texture::render_plan_table(plan);
  }
  if (plan.contains("budget") && !plan["budget"]["fits"].get<bool>()) ctx.exit_code = 1;
}

struct demo_args {
  texture::demo_options options;
  std::string budget;
  std::string out_dir = "texture-demo";
};

}  // namespace

CLI::App* add_plan_textures_subcommand(CLI::App& plan, command_context& ctx) {
  auto a = std::make_shared<texture_plan_args>();
  auto* sub =
      plan.add_subcommand("textures", "Texture budget planner (same as vramkit texture plan)");
  add_plan_options(sub, a);
  sub->callback([a, &ctx] { run_plan(*a, ctx); });
  return sub;
}

void add_texture_command(CLI::App& app, command_context& ctx) {
  auto* tex = app.add_subcommand("texture",
                                 "Compressed textures: budget planner and GPU mip streaming demo");
  tex->require_subcommand(1);

  auto pa = std::make_shared<texture_plan_args>();
  auto* plan = tex->add_subcommand(
      "plan",
      "Device bytes of a texture set per encoding, mip chain and array layout; what fits --budget");
  add_plan_options(plan, pa);
  plan->callback([pa, &ctx] { run_plan(*pa, ctx); });

  auto da = std::make_shared<demo_args>();
  auto* demo = tex->add_subcommand(
      "demo", "Camera over textured surfaces on the GPU with mips streamed under a budget");
  demo->add_option("--surfaces", da->options.surfaces, "textured surfaces in the scene")
      ->capture_default_str();
  demo->add_option("--texture-size", da->options.texture_size,
                   "side of each BC1 texture (power of two)")
      ->capture_default_str();
  demo->add_option("--frames", da->options.frames, "frames to render")->capture_default_str();
  demo->add_option("--still-frames", da->options.still_frames,
                   "frames at the end with the camera stopped")
      ->capture_default_str();
  demo->add_option("--width", da->options.width, "frame width in pixels")->capture_default_str();
  demo->add_option("--height", da->options.height, "frame height in pixels")->capture_default_str();
  demo->add_option("--samples", da->options.samples, "samples per pixel: 1, 4, 9 or 16")
      ->capture_default_str();
  demo->add_option("--png-every", da->options.png_every,
                   "write every Nth frame (and the last) as PNG")
      ->capture_default_str();
  demo->add_option("--budget", da->budget,
                   "device budget for the textures (e.g. 64MiB); default a quarter of the full set")
      ->check(byte_size_check());
  demo->add_option("--out", da->out_dir, "folder for the PNG frames, frames.csv and summary.json")
      ->capture_default_str();
  demo->callback([da, &ctx] {
    auto options = da->options;
    if (!da->budget.empty()) options.budget_bytes = parse_bytes(da->budget);
    options.out_dir = da->out_dir;
    const auto result = texture::run_streaming_demo(options);
    std::cout << result.summary.dump(2) << "\n";
    if (!result.passed) ctx.exit_code = 1;
  });
}

}  // namespace vramkit::cli

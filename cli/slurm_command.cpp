// `vramkit slurm gres`: gres.conf and slurm.conf lines exposing each GPU as memory-sized shards;
// `vramkit slurm shards`: the shard count job_submit.lua asks for a memory request.
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "commands.hpp"
#include "vramkit/cluster/gpu_state.hpp"
#include "vramkit/cluster/memory_request.hpp"
#include "vramkit/cluster/slurm_gres.hpp"
#include "vramkit/core/error.hpp"
#include "vramkit/core/units.hpp"
#include "vramkit/monitor/safe_text.hpp"

namespace vramkit::cli {
namespace {

// The local GPUs: the fixture when given, else the driver's.
std::vector<cluster::gpu_state> local_gpus(const std::string& fixture) {
  auto gpus = cluster::gpus_from_nvml(*open_gpus(fixture));
  // An empty fixture is bad input, which make_slurm_gres names; an empty driver is not.
  if (gpus.empty() && fixture.empty()) throw error("the NVIDIA driver reports no GPUs");
  return gpus;
}

struct gres_args {
  std::string shard_size = "1GiB";
  std::string fixture;
  std::string node;
  std::string headroom = "0";
  std::string device_prefix = "/dev/nvidia";
  std::string output_dir;
  bool json = false;
};

struct shards_args {
  std::string request;
  std::string plan;
  std::string shard_size = "1GiB";
  std::string config;
  bool json = false;
};

void run_gres(const gres_args& a, command_context& ctx) {
  cluster::slurm_gres_options options;
  options.shard_bytes = parse_bytes(a.shard_size);
  if (options.shard_bytes == 0) throw invalid_input("--shard-size must be above zero");
  options.node_name = a.node.empty() ? cluster::local_node_name() : a.node;
  if (!cluster::is_slurm_node_name(options.node_name))
    throw invalid_input(fmt::format(
        "--node '{}': not a Slurm NodeName (letters, digits, '.', '-', '_', hostlist [..,..])",
        monitor::printable(options.node_name)));
  options.device_prefix = a.device_prefix;
  options.safety = cluster::parse_headroom(a.headroom);
  const cluster::slurm_gres_config config =
      cluster::make_slurm_gres(local_gpus(a.fixture), options);
  if (!a.output_dir.empty()) cluster::write_slurm_gres_files(config, a.output_dir);
  if (a.json) {
    std::puts(cluster::to_json(config).c_str());
  } else if (a.output_dir.empty()) {
    std::fputs(cluster::to_text(config).c_str(), stdout);
  } else {
    std::printf(
        "wrote gres.conf, slurm-node.conf and vramkit-slurm.conf in %s (%zu GPUs, %llu shards of "
        "%s at most per GPU)\n",
        a.output_dir.c_str(), config.gpus.size(),
        static_cast<unsigned long long>(config.max_gpu_shards),
        format_bytes(static_cast<double>(config.shard_bytes)).c_str());
  }
  ctx.exit_code = 0;
}

void run_shards(const shards_args& a, command_context& ctx) {
  if (a.request.empty() == a.plan.empty())
    throw invalid_input("give exactly one of --request SIZE or --plan FILE");
  const std::uint64_t request =
      !a.request.empty() ? cluster::parse_memory_request(a.request)
                         : cluster::request_from_plan_json(read_input_file(a.plan, "plan"), a.plan);
  std::uint64_t shard_bytes = parse_bytes(a.shard_size);
  std::optional<std::uint64_t> max_shards;
  if (!a.config.empty()) {
    const cluster::slurm_shard_settings settings =
        cluster::parse_slurm_shard_settings(read_input_file(a.config, "config"), a.config);
    if (settings.shard_bytes) shard_bytes = *settings.shard_bytes;
    max_shards = settings.max_gpu_shards;
  }
  if (shard_bytes == 0) throw invalid_input("--shard-size must be above zero");
  const cluster::shard_request r = cluster::make_shard_request(request, shard_bytes, max_shards);
  if (a.json)
    std::puts(cluster::to_json(r).c_str());
  else
    std::fputs(cluster::to_text(r).c_str(), stdout);
  ctx.exit_code = r.fits ? 0 : 1;
}

}  // namespace

void add_slurm_command(CLI::App& app, command_context& ctx) {
  auto* slurm = app.add_subcommand("slurm", "Slurm integration: GPU memory as GRES shards");
  slurm->require_subcommand(1);

  auto g = std::make_shared<gres_args>();
  auto* gres = slurm->add_subcommand(
      "gres",
      "write gres.conf and slurm.conf node lines that expose each GPU as shards of a fixed size");
  gres->add_option("--shard-size", g->shard_size,
                   "bytes per shard, one size for the whole cluster (default 1GiB)")
      ->check(byte_size_check());
  add_fake_gpus_option(*gres, g->fixture);
  gres->add_option("--node", g->node, "NodeName to write (default: this host's short name)");
  gres->add_option("--headroom", g->headroom,
                   "memory kept out of the shards per GPU: bytes or a percentage (default 0)")
      ->check(headroom_check());
  gres->add_option("--device-prefix", g->device_prefix,
                   "device file prefix for File= (default /dev/nvidia)");
  gres->add_option("--output-dir", g->output_dir,
                   "write gres.conf, slurm-node.conf and vramkit-slurm.conf here");
  gres->add_flag("--json", g->json, "print the configuration as JSON");
  gres->callback([g, &ctx] { run_gres(*g, ctx); });

  auto s = std::make_shared<shards_args>();
  auto* shards = slurm->add_subcommand(
      "shards", "shards a memory request needs (what job_submit.lua computes)");
  shards->add_option("--request", s->request, "per-GPU memory, e.g. 24GiB");
  shards->add_option("--plan", s->plan,
                     "a vramkit plan --json file; its device_peak_bytes is the request");
  shards->add_option("--shard-size", s->shard_size, "bytes per shard (default 1GiB)")
      ->check(byte_size_check());
  shards->add_option("--config", s->config,
                     "vramkit-slurm.conf written by slurm gres (shard size and largest GPU)");
  shards->add_flag("--json", s->json, "print as JSON");
  shards->callback([s, &ctx] { run_shards(*s, ctx); });

  add_slurm_report_command(*slurm, ctx);
}

}  // namespace vramkit::cli

// `vramkit slurm gres`: gres.conf and slurm.conf lines exposing each GPU as memory-sized shards;
// `vramkit slurm shards`: the shard count job_submit.lua asks for a memory request.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "vramkit/cluster/gpu_state.hpp"
#include "vramkit/cluster/memory_request.hpp"
#include "vramkit/cluster/slurm_gres.hpp"
#include "vramkit/core/error.hpp"
#include "vramkit/core/units.hpp"
#include "vramkit/monitor/gpu_source.hpp"
#include "vramkit/monitor/safe_text.hpp"

namespace vramkit::cli {
namespace {

void write_file(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out || !(out << text)) throw error(fmt::format("cannot write '{}'", path.string()));
}

std::string short_hostname() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0) return "localhost";
  std::string name(buf);
  if (const auto dot = name.find('.'); dot != std::string::npos) name.resize(dot);
  return name;
}

// A Slurm NodeName: a host name or a hostlist expression (gpu[01-04]); anything else (blanks,
// '=', '#', control characters) would break the gres.conf line it is written into.
void check_node_name(const std::string& name) {
  const bool ok = !name.empty() && name.size() <= 255 &&
                  name.find_first_not_of(
                      "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                      "0123456789.-_[],") == std::string::npos;
  if (!ok)
    throw invalid_input(fmt::format(
        "--node '{}': not a Slurm NodeName (letters, digits, '.', '-', '_', hostlist [..,..])",
        monitor::printable(name)));
}

// The local GPUs: the fixture when given, else the driver's.
std::vector<cluster::gpu_state> local_gpus(const std::string& fixture) {
  auto source = monitor::open_gpu_source(fixture);
  if (!source) {
    throw error(fmt::format(
        "cannot read the GPUs: {} (on a machine without the NVIDIA driver, pass --fake-gpus FILE)",
        source.error().reason));
  }
  auto gpus = cluster::gpus_from_nvml(**source);
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
  options.node_name = a.node.empty() ? short_hostname() : a.node;
  check_node_name(options.node_name);
  options.device_prefix = a.device_prefix;
  options.safety = cluster::parse_headroom(a.headroom);
  const auto gpus = local_gpus(a.fixture);
  const cluster::slurm_gres_config config = cluster::make_slurm_gres(gpus, options);
  if (!a.output_dir.empty()) {
    const std::filesystem::path dir(a.output_dir);
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) throw error(fmt::format("cannot create '{}': {}", a.output_dir, ec.message()));
    write_file(dir / "gres.conf", config.gres_conf);
    write_file(dir / "slurm-node.conf", config.node_line);
    write_file(dir / "vramkit-slurm.conf", config.submit_config);
  }
  if (a.json) {
    nlohmann::json out{{"schema_version", 1},
                       {"node", options.node_name},
                       {"shard_bytes", options.shard_bytes},
                       {"max_gpu_shards", config.max_gpu_shards},
                       {"gres_conf", config.gres_conf},
                       {"node_line", config.node_line},
                       {"submit_config", config.submit_config}};
    nlohmann::json list = nlohmann::json::array();
    for (const auto& g : gpus) {
      list.push_back({{"index", g.index},
                      {"name", g.name},
                      {"uuid", g.uuid},
                      {"total_bytes", g.total_bytes},
                      {"type", cluster::slurm_gpu_type(g.name)},
                      {"shards", cluster::shards_per_gpu(g, options.shard_bytes, options.safety)}});
    }
    out["gpus"] = std::move(list);
    std::puts(out.dump(2).c_str());
  } else if (a.output_dir.empty()) {
    std::fputs(config.gres_conf.c_str(), stdout);
    std::fputs("\n", stdout);
    std::fputs(config.node_line.c_str(), stdout);
    std::fputs("\n# vramkit-slurm.conf (next to job_submit.lua)\n", stdout);
    std::fputs(config.submit_config.c_str(), stdout);
  } else {
    std::printf(
        "wrote gres.conf, slurm-node.conf and vramkit-slurm.conf in %s (%zu GPUs, %llu shards of "
        "%s at most per GPU)\n",
        a.output_dir.c_str(), gpus.size(), static_cast<unsigned long long>(config.max_gpu_shards),
        format_bytes(static_cast<double>(options.shard_bytes)).c_str());
  }
  ctx.exit_code = 0;
}

// The key=value settings written by `slurm gres` (vramkit-slurm.conf): every line is a comment,
// blank, or one of the known keys with a whole number; anything else is refused by line number.
struct shard_settings {
  std::optional<std::uint64_t> shard_bytes;
  std::optional<std::uint64_t> max_gpu_shards;
};

shard_settings parse_shard_settings(const std::string& text, const std::string& origin) {
  shard_settings out;
  std::istringstream in(text);
  std::string line;
  for (std::size_t n = 1; std::getline(in, line); ++n) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    const auto first = line.find_first_not_of(" \t");
    if (first == std::string::npos || line[first] == '#') continue;
    const auto eq = line.find('=');
    const std::string key = eq == std::string::npos ? line : line.substr(0, eq);
    std::optional<std::uint64_t>* slot = key == "shard_bytes"      ? &out.shard_bytes
                                         : key == "max_gpu_shards" ? &out.max_gpu_shards
                                                                   : nullptr;
    if (eq == std::string::npos || slot == nullptr)
      throw invalid_input(fmt::format(
          "{}:{}: expected shard_bytes=N or max_gpu_shards=N (from vramkit slurm gres), got '{}'",
          origin, n, line.substr(0, 60)));
    const std::string value = line.substr(eq + 1);
    if (value.empty() || value.find_first_not_of("0123456789") != std::string::npos)
      throw invalid_input(fmt::format("{}:{}: {} is not a whole number", origin, n, key));
    try {
      *slot = std::stoull(value);
    } catch (const std::exception&) {
      throw invalid_input(fmt::format("{}:{}: {} is out of range", origin, n, key));
    }
  }
  return out;
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
    const shard_settings settings =
        parse_shard_settings(read_input_file(a.config, "config"), a.config);
    if (settings.shard_bytes) shard_bytes = *settings.shard_bytes;
    max_shards = settings.max_gpu_shards;
  }
  if (shard_bytes == 0) throw invalid_input("--shard-size must be above zero");
  const std::uint64_t shards = cluster::shards_for_request(request, shard_bytes);
  const bool fits = !max_shards || shards <= *max_shards;
  if (a.json) {
    nlohmann::json out{{"schema_version", 1},
                       {"request_bytes", request},
                       {"shard_bytes", shard_bytes},
                       {"shards", shards},
                       {"fits", fits},
                       {"gres", fmt::format("gres:shard:{}", shards)}};
    if (max_shards) out["max_gpu_shards"] = *max_shards;
    std::puts(out.dump(2).c_str());
  } else {
    std::printf(
        "%llu shards of %s for %s: sbatch --gres=shard:%llu%s\n",
        static_cast<unsigned long long>(shards),
        format_bytes(static_cast<double>(shard_bytes)).c_str(),
        format_bytes(static_cast<double>(request)).c_str(), static_cast<unsigned long long>(shards),
        fits ? ""
             : fmt::format(" (more than the {} shards of the largest GPU: no GPU can hold it)",
                           *max_shards)
                   .c_str());
  }
  ctx.exit_code = fits ? 0 : 1;
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
                   "bytes per shard, one size for the whole cluster (default 1GiB)");
  gres->add_option("--fake-gpus", g->fixture,
                   "read GPUs from a fixture JSON instead of the driver");
  gres->add_option("--node", g->node, "NodeName to write (default: this host's short name)");
  gres->add_option("--headroom", g->headroom,
                   "memory kept out of the shards per GPU: bytes or a percentage (default 0)");
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
  shards->add_option("--shard-size", s->shard_size, "bytes per shard (default 1GiB)");
  shards->add_option("--config", s->config,
                     "vramkit-slurm.conf written by slurm gres (shard size and largest GPU)");
  shards->add_flag("--json", s->json, "print as JSON");
  shards->callback([s, &ctx] { run_shards(*s, ctx); });

  add_slurm_report_command(*slurm, ctx);
}

}  // namespace vramkit::cli

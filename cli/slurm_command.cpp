// `vramkit slurm gres`: gres.conf and slurm.conf lines exposing each GPU as memory-sized shards;
// `vramkit slurm shards`: the shard count job_submit.lua asks for a memory request.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
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
#include "vramkit/monitor/nvml_api.hpp"

namespace vramkit::cli {
namespace {

std::string read_file(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw invalid_input(fmt::format("cannot read {} '{}'", what, path));
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

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

// The local GPUs: a fixture when given, else the driver through NVML (loaded at run time).
std::vector<cluster::gpu_state> local_gpus(const std::string& fixture) {
  if (!fixture.empty())
    return cluster::gpus_from_fixture_json(read_file(fixture, "fixture"), fixture);
  const char* lib = std::getenv("VRAMKIT_NVML_LIBRARY");
  auto nvml = monitor::load_nvml(lib != nullptr && *lib != '\0' ? lib : "libnvidia-ml.so.1");
  if (!nvml) {
    throw error(fmt::format(
        "cannot read the GPUs: {} (on a machine without the NVIDIA driver, pass --fake-gpus FILE)",
        nvml.error().reason));
  }
  auto& api = **nvml;
  const auto count = api.device_count();
  if (!count.ok())
    throw error(fmt::format("cannot count the GPUs: {} ({})", monitor::to_string(count.status),
                            count.detail));
  std::vector<cluster::gpu_state> gpus;
  for (unsigned i = 0; i < count.value; ++i) {
    const auto memory = api.memory(i);
    if (!memory.ok()) {
      throw error(fmt::format("GPU {}: cannot read its memory: {} ({})", i,
                              monitor::to_string(memory.status), memory.detail));
    }
    cluster::gpu_state g;
    g.index = static_cast<int>(i);
    if (auto name = api.device_name(i); name.ok()) g.name = name.value;
    if (auto uuid = api.device_uuid(i); uuid.ok()) g.uuid = uuid.value;
    g.total_bytes = memory.value.total;
    g.used_bytes = memory.value.used;
    g.reserved_bytes = memory.value.reserved.value_or(0);
    g.free_bytes = memory.value.free;
    gpus.push_back(std::move(g));
  }
  if (gpus.empty()) throw error("the NVIDIA driver reports no GPUs");
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

// key=value settings written by `slurm gres` (vramkit-slurm.conf).
std::optional<std::uint64_t> config_value(const std::string& text, const std::string& key,
                                          const std::string& origin) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key + "=", 0) != 0) continue;
    try {
      return std::stoull(line.substr(key.size() + 1));
    } catch (...) {
      throw invalid_input(fmt::format("{}: {} is not a number", origin, key));
    }
  }
  return std::nullopt;
}

void run_shards(const shards_args& a, command_context& ctx) {
  if (a.request.empty() == a.plan.empty())
    throw invalid_input("give exactly one of --request SIZE or --plan FILE");
  const std::uint64_t request =
      !a.request.empty() ? cluster::parse_memory_request(a.request)
                         : cluster::request_from_plan_json(read_file(a.plan, "plan"), a.plan);
  std::uint64_t shard_bytes = parse_bytes(a.shard_size);
  std::optional<std::uint64_t> max_shards;
  if (!a.config.empty()) {
    const std::string text = read_file(a.config, "config");
    if (auto v = config_value(text, "shard_bytes", a.config)) shard_bytes = *v;
    max_shards = config_value(text, "max_gpu_shards", a.config);
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
}

}  // namespace vramkit::cli

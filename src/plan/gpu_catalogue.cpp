// GPU catalogue parsed once from the embedded data/plan/gpus.json.
#include "vramkit/plan/gpu_catalogue.hpp"

#include <algorithm>
#include <cctype>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "embedded_data.hpp"
#include "vramkit/core/error.hpp"
#include "vramkit/core/units.hpp"

namespace vramkit::plan {

double gpu_spec::pcie_bytes_per_s() const noexcept {
  // Per lane, one direction: Gen3 0.985 GB/s, Gen4 1.97 GB/s, Gen5 3.94 GB/s (128b/130b coding);
  // DMA copies reach about 80% of it.
  const double lane = pcie_gen >= 5 ? 3.938e9 : pcie_gen == 4 ? 1.969e9 : 0.985e9;
  return lane * pcie_width * 0.8;
}

namespace {

std::string canonical(std::string_view s) {
  std::string out;
  for (char c : s)
    if (c != ' ' && c != '-' && c != '_')
      out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::vector<gpu_spec> load() {
  const auto j = nlohmann::json::parse(detail::gpu_catalogue_text);
  std::vector<gpu_spec> v;
  for (const auto& g : j.at("gpus")) {
    gpu_spec s;
    s.name = g.at("name").get<std::string>();
    s.aliases = g.at("aliases").get<std::vector<std::string>>();
    s.memory_bytes = g.at("memory_mib").get<std::uint64_t>() * MiB;
    s.memory_basis = g.at("memory_basis").get<std::string>();
    s.hbm_bytes_per_s = g.at("hbm_gbps").get<double>() * 1e9;
    s.pcie_gen = g.at("pcie_gen").get<int>();
    s.pcie_width = g.at("pcie_width").get<int>();
    s.nvlink_bytes_per_s = g.at("nvlink_gbps").get<double>() * 1e9;
    s.bf16_flops = g.at("bf16_tflops").get<double>() * 1e12;
    s.fp32_flops = g.at("fp32_tflops").get<double>() * 1e12;
    s.sm = g.at("sm").get<int>();
    s.source = g.at("source").get<std::string>();
    v.push_back(std::move(s));
  }
  return v;
}

}  // namespace

const std::vector<gpu_spec>& gpu_catalogue() {
  static const std::vector<gpu_spec> catalogue = load();
  return catalogue;
}

gpu_target parse_gpu_target(std::string_view text) {
  const auto key = canonical(text);
  for (const auto& g : gpu_catalogue()) {
    if (canonical(g.name) == key) return {&g, g.memory_bytes};
    for (const auto& a : g.aliases)
      if (canonical(a) == key) return {&g, g.memory_bytes};
  }
  // A model number alone ("4090", "a6000"): the one entry whose name or alias ends with it.
  const gpu_spec* found = nullptr;
  int matches = 0;
  auto ends_with = [&](const std::string& s) {
    return s.size() > key.size() && s.compare(s.size() - key.size(), key.size(), key) == 0;
  };
  for (const auto& g : gpu_catalogue()) {
    bool hit = ends_with(canonical(g.name));
    for (const auto& a : g.aliases) hit = hit || ends_with(canonical(a));
    if (hit) found = &g, ++matches;
  }
  if (matches == 1) return {found, found->memory_bytes};
  const bool digits_only = !key.empty() && std::all_of(key.begin(), key.end(),
                                                       [](char c) { return c >= '0' && c <= '9'; });
  if (!key.empty() && key[0] >= '0' && key[0] <= '9' && !digits_only) {
    const std::uint64_t bytes = parse_bytes(std::string(text));
    if (bytes < 256 * MiB)
      throw invalid_input(fmt::format("--gpu {} is below 256 MiB: not a GPU capacity", text));
    return {nullptr, bytes};
  }
  if (digits_only)
    throw invalid_input(fmt::format(
        "--gpu {}: no GPU of the catalogue is named so, and a capacity needs a unit (e.g. 24GiB)",
        text));
  find_gpu(text);  // throws, listing the catalogue
  return {};
}

const gpu_spec& find_gpu(std::string_view name) {
  const auto key = canonical(name);
  std::string names;
  for (const auto& g : gpu_catalogue()) {
    if (canonical(g.name) == key) return g;
    for (const auto& a : g.aliases)
      if (canonical(a) == key) return g;
    names += (names.empty() ? "" : ", ") + g.name;
  }
  throw invalid_input(fmt::format(
      "unknown GPU '{}': give a capacity in bytes (e.g. 80GiB) or one of: {}", name, names));
}

}  // namespace vramkit::plan

// The texture budget planner: entries from files or a manifest, priced under the CUDA allocation
// model, rendered as JSON or a table.
#include "vramkit/texture/texture_plan.hpp"

#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>

#include <fmt/format.h>

#include "vramkit/core/units.hpp"

namespace vramkit::texture {
namespace {

bool is_texture_file(const std::filesystem::path& p) {
  std::string ext = p.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  return ext == ".dds" || ext == ".png" || ext == ".astc";
}

texture_entry entry_from_info(const texture_info& info, std::string name) {
  texture_entry e;
  e.file = std::move(name);
  e.format = info.format;
  e.width = info.width;
  e.height = info.height;
  e.mip_levels = info.mip_levels;
  e.layers = info.surfaces();
  e.data_bytes = info.data_bytes;
  return e;
}

std::uint64_t device_bytes_of(const cuda_allocation_model& m, const pixel_format& f, int w, int h,
                              int levels, int first, int layers) {
  if (!cuda_allocation_model::sampled_by_cuda(f))
    return chain_bytes(f, w, h, levels, first, layers);
  return m.device_bytes(f, w, h, levels, first, layers);
}

}  // namespace

std::vector<texture_entry> entries_from_directory(const std::filesystem::path& dir) {
  std::vector<std::filesystem::path> files;
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(dir, ec);
       !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    if (it->is_regular_file() && is_texture_file(it->path())) files.push_back(it->path());
  }
  if (ec) throw texture_file_error(dir, "cannot list the folder (" + ec.message() + ")");
  if (files.empty()) throw texture_file_error(dir, "no .dds, .png or .astc files in the folder");
  std::sort(files.begin(), files.end());
  std::vector<texture_entry> out;
  for (const auto& f : files) {
    out.push_back(
        entry_from_info(read_texture_info(f), std::filesystem::relative(f, dir).string()));
  }
  return out;
}

std::vector<texture_entry> entries_from_manifest(const std::filesystem::path& manifest) {
  std::ifstream in(manifest);
  if (!in) throw texture_file_error(manifest, "cannot open the manifest");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw texture_file_error(manifest, std::string("not valid JSON (") + e.what() + ")");
  }
  if (!j.is_object() || !j.contains("textures") || !j["textures"].is_array() ||
      j["textures"].empty()) {
    throw texture_file_error(manifest, "a manifest needs a non-empty \"textures\" array");
  }
  std::vector<texture_entry> out;
  int index = 0;
  for (const auto& t : j["textures"]) {
    const std::string where = "textures[" + std::to_string(index++) + "]";
    if (!t.is_object()) throw texture_file_error(manifest, where + " is not an object");
    if (t.contains("file")) {
      if (!t["file"].is_string())
        throw texture_file_error(manifest, where + ".file is not a string");
      const std::filesystem::path p = manifest.parent_path() / t["file"].get<std::string>();
      out.push_back(entry_from_info(read_texture_info(p), t["file"].get<std::string>()));
      continue;
    }
    for (const char* key : {"width", "height", "format"}) {
      if (!t.contains(key))
        throw texture_file_error(manifest, where + " has neither \"file\" nor \"" + key + "\"");
    }
    texture_entry e;
    e.file = t.value("name", where);
    if (!t["width"].is_number_integer() || !t["height"].is_number_integer() ||
        t["width"].get<std::int64_t>() < 1 || t["height"].get<std::int64_t>() < 1 ||
        t["width"].get<std::int64_t>() > 65536 || t["height"].get<std::int64_t>() > 65536) {
      throw texture_file_error(manifest,
                               where + ": width and height must be integers from 1 to 65536");
    }
    e.width = t["width"].get<int>();
    e.height = t["height"].get<int>();
    const auto f =
        t["format"].is_string() ? parse_pixel_format(t["format"].get<std::string>()) : std::nullopt;
    if (!f) throw texture_file_error(manifest, where + ": unknown format " + t["format"].dump());
    e.format = *f;
    const int full = full_mip_levels(e.width, e.height);
    e.mip_levels = full;
    if (t.contains("mips")) {
      const auto& m = t["mips"];
      if (m.is_string() && m.get<std::string>() == "full") {
        e.mip_levels = full;
      } else if (m.is_number_integer() && m.get<int>() >= 1 && m.get<int>() <= full) {
        e.mip_levels = m.get<int>();
      } else {
        throw texture_file_error(manifest,
                                 where + ": mips must be \"full\" or 1 to " + std::to_string(full));
      }
    }
    if (t.contains("layers")) {
      if (!t["layers"].is_number_integer() || t["layers"].get<int>() < 1) {
        throw texture_file_error(manifest, where + ": layers must be a positive integer");
      }
      e.layers = t["layers"].get<int>();
    }
    e.data_bytes = chain_bytes(e.format, e.width, e.height, e.mip_levels, 0, e.layers);
    out.push_back(std::move(e));
  }
  return out;
}

std::vector<texture_entry> load_entries(const std::filesystem::path& dir_or_manifest) {
  std::error_code ec;
  if (std::filesystem::is_directory(dir_or_manifest, ec))
    return entries_from_directory(dir_or_manifest);
  if (!std::filesystem::exists(dir_or_manifest, ec)) {
    throw texture_file_error(dir_or_manifest, "no such file or folder");
  }
  if (is_texture_file(dir_or_manifest)) {
    return {
        entry_from_info(read_texture_info(dir_or_manifest), dir_or_manifest.filename().string())};
  }
  return entries_from_manifest(dir_or_manifest);
}

std::vector<pixel_format> candidate_formats() {
  using tf = texture_format;
  return {pixel_format::of(tf::rgba8), pixel_format::of(tf::bc1),  pixel_format::of(tf::bc4),
          pixel_format::of(tf::bc5),   pixel_format::of(tf::bc6h), pixel_format::of(tf::bc7),
          pixel_format::astc(4, 4),    pixel_format::astc(6, 6),   pixel_format::astc(8, 8)};
}

namespace {

using choice_sums = std::map<std::string, std::pair<std::uint64_t, std::uint64_t>>;  // full, top

// One texture's entry: as stored, on the device, and under each candidate encoding (added to
// `sums`).
nlohmann::json texture_json(const texture_entry& e, const cuda_allocation_model& model,
                            const std::vector<pixel_format>& candidates, choice_sums& sums) {
  const int full = full_mip_levels(e.width, e.height);
  nlohmann::json t;
  t["file"] = e.file;
  t["format"] = e.format.name();
  t["width"] = e.width;
  t["height"] = e.height;
  t["mip_levels"] = e.mip_levels;
  t["layers"] = e.layers;
  t["data_bytes"] = e.data_bytes;
  t["tight_bytes"] = chain_bytes(e.format, e.width, e.height, e.mip_levels, 0, e.layers);
  t["device_bytes"] =
      device_bytes_of(model, e.format, e.width, e.height, e.mip_levels, 0, e.layers);
  t["sampled_by_cuda"] = cuda_allocation_model::sampled_by_cuda(e.format);
  nlohmann::json choices = nlohmann::json::object();
  for (const auto& c : candidates) {
    const std::uint64_t chain = device_bytes_of(model, c, e.width, e.height, full, 0, e.layers);
    const std::uint64_t top = device_bytes_of(model, c, e.width, e.height, 1, 0, e.layers);
    choices[c.name()] = {{"full_chain_bytes", chain},
                         {"top_level_bytes", top},
                         {"target", cuda_allocation_model::sampled_by_cuda(c) ? "cuda" : "mobile"}};
    sums[c.name()].first += chain;
    sums[c.name()].second += top;
  }
  t["choices"] = choices;
  return t;
}

// Texture arrays: textures of one format, size and mip count share one layered array.
nlohmann::json array_groups(const std::vector<texture_entry>& entries,
                            const cuda_allocation_model& model) {
  std::map<std::tuple<std::string, int, int, int>, std::vector<std::size_t>> groups;
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const auto& e = entries[i];
    if (cuda_allocation_model::sampled_by_cuda(e.format)) {
      groups[{e.format.name(), e.width, e.height, e.mip_levels}].push_back(i);
    }
  }
  nlohmann::json arrays = nlohmann::json::array();
  std::uint64_t separate = 0;
  std::uint64_t layered = 0;
  for (const auto& [key, members] : groups) {
    if (members.size() < 2) continue;
    const auto& e = entries[members.front()];
    int layers = 0;
    std::uint64_t sep = 0;
    for (auto i : members) {
      layers += entries[i].layers;
      sep += model.device_bytes(entries[i].format, e.width, e.height, e.mip_levels, 0,
                                entries[i].layers);
    }
    const std::uint64_t arr =
        model.device_bytes(e.format, e.width, e.height, e.mip_levels, 0, layers);
    arrays.push_back({{"format", std::get<0>(key)},
                      {"width", e.width},
                      {"height", e.height},
                      {"mip_levels", e.mip_levels},
                      {"textures", members.size()},
                      {"layers", layers},
                      {"separate_bytes", sep},
                      {"array_bytes", arr}});
    separate += sep;
    layered += arr;
  }
  return {{"groups", arrays}, {"separate_bytes", separate}, {"array_bytes", layered}};
}

nlohmann::json savings_json(choice_sums& sums, const nlohmann::json& arrays) {
  auto ratio = [](std::uint64_t a, std::uint64_t b) {
    return b == 0 ? 0.0 : static_cast<double>(a) / b;
  };
  const std::uint64_t separate = arrays["separate_bytes"].get<std::uint64_t>();
  const std::uint64_t layered = arrays["array_bytes"].get<std::uint64_t>();
  const auto& rgba = sums["RGBA8"];
  return {{"bc7_vs_rgba8", 1.0 - ratio(sums["BC7"].first, rgba.first)},
          {"bc1_vs_rgba8", 1.0 - ratio(sums["BC1"].first, rgba.first)},
          {"full_chain_over_top_level_bc7", ratio(sums["BC7"].first, sums["BC7"].second)},
          {"arrays_vs_separate", separate == 0 ? nlohmann::json(nullptr)
                                               : nlohmann::json(1.0 - ratio(layered, separate))}};
}

// The smallest uniform mip drop (an engine's global mip bias) that fits `budget`; each texture
// keeps at least its last level.
nlohmann::json budget_json(const std::vector<texture_entry>& entries,
                           const cuda_allocation_model& model, std::uint64_t budget) {
  int max_levels = 1;
  for (const auto& e : entries) max_levels = std::max(max_levels, e.mip_levels);
  int drop = 0;
  std::uint64_t bytes = 0;
  for (drop = 0; drop < max_levels; ++drop) {
    bytes = 0;
    for (const auto& e : entries) {
      bytes += device_bytes_of(model, e.format, e.width, e.height, e.mip_levels,
                               std::min(drop, e.mip_levels - 1), e.layers);
    }
    if (bytes <= budget) break;
  }
  const bool fits = bytes <= budget;
  if (!fits) drop = max_levels - 1;
  nlohmann::json per = nlohmann::json::array();
  for (const auto& e : entries) {
    const int first = std::min(drop, e.mip_levels - 1);
    per.push_back({{"file", e.file},
                   {"first_level", first},
                   {"resident_width", level_extent(e.width, first)},
                   {"resident_height", level_extent(e.height, first)},
                   {"device_bytes", device_bytes_of(model, e.format, e.width, e.height,
                                                    e.mip_levels, first, e.layers)}});
  }
  return {{"budget_bytes", budget},
          {"fits", fits},
          {"fits_at_full_resolution", drop == 0 && fits},
          {"mip_drop", drop},
          {"device_bytes", bytes},
          {"textures", per}};
}

}  // namespace

nlohmann::json plan_textures(const std::vector<texture_entry>& entries,
                             const plan_options& options) {
  const auto& model = options.model;
  const auto candidates = candidate_formats();
  nlohmann::json textures = nlohmann::json::array();
  std::uint64_t total_data = 0;
  std::uint64_t total_device = 0;
  choice_sums sums;
  for (const auto& e : entries) {
    textures.push_back(texture_json(e, model, candidates, sums));
    total_data += e.data_bytes;
    total_device += textures.back()["device_bytes"].get<std::uint64_t>();
  }
  nlohmann::json totals;
  totals["textures"] = entries.size();
  totals["data_bytes"] = total_data;
  totals["device_bytes"] = total_device;
  nlohmann::json ct = nlohmann::json::object();
  for (const auto& [name, v] : sums)
    ct[name] = {{"full_chain_bytes", v.first}, {"top_level_bytes", v.second}};
  totals["choices"] = ct;

  nlohmann::json plan;
  plan["schema_version"] = 1;
  plan["model"] = {{"tile_width_bytes", model.tile_width_bytes},
                   {"tile_rows", model.tile_rows},
                   {"mip_tail_bytes", model.mip_tail_bytes},
                   {"small_granularity", model.small_granularity},
                   {"large_granularity", model.large_granularity},
                   {"large_threshold", model.large_threshold}};
  plan["textures"] = std::move(textures);
  plan["totals"] = totals;
  plan["arrays"] = array_groups(entries, model);
  plan["savings"] = savings_json(sums, plan["arrays"]);
  if (options.budget_bytes) plan["budget"] = budget_json(entries, model, *options.budget_bytes);
  return plan;
}

std::string render_plan_table(const nlohmann::json& plan) {
  std::ostringstream out;
  out << fmt::format("{:<32} {:>10} {:>11} {:>4} {:>12} {:>12} {:>12} {:>12}\n", "file", "format",
                     "size", "mips", "data", "device", "as BC7", "as RGBA8");
  for (const auto& t : plan["textures"]) {
    out << fmt::format("{:<32} {:>10} {:>11} {:>4} {:>12} {:>12} {:>12} {:>12}\n",
                       t["file"].get<std::string>(), t["format"].get<std::string>(),
                       fmt::format("{}x{}", t["width"].get<int>(), t["height"].get<int>()),
                       t["mip_levels"].get<int>(), format_bytes(t["data_bytes"].get<double>()),
                       format_bytes(t["device_bytes"].get<double>()) +
                           (t["sampled_by_cuda"].get<bool>() ? "" : "*"),
                       format_bytes(t["choices"]["BC7"]["full_chain_bytes"].get<double>()),
                       format_bytes(t["choices"]["RGBA8"]["full_chain_bytes"].get<double>()));
  }
  const auto& tot = plan["totals"];
  out << fmt::format("total: {} textures, {} of data, {} on the device\n",
                     tot["textures"].get<int>(), format_bytes(tot["data_bytes"].get<double>()),
                     format_bytes(tot["device_bytes"].get<double>()));
  out << "whole set, full mip chains, per encoding:";
  for (const auto& [name, v] : tot["choices"].items()) {
    out << fmt::format(" {} {};", name, format_bytes(v["full_chain_bytes"].get<double>()));
  }
  out << "\n";
  const auto& s = plan["savings"];
  out << fmt::format(
      "savings: BC7 vs RGBA8 {:.1f}%, BC1 vs RGBA8 {:.1f}%, BC7 full chain / top level x{:.3f}",
      100 * s["bc7_vs_rgba8"].get<double>(), 100 * s["bc1_vs_rgba8"].get<double>(),
      s["full_chain_over_top_level_bc7"].get<double>());
  if (!s["arrays_vs_separate"].is_null()) {
    out << fmt::format(", layered arrays vs separate {:.1f}%",
                       100 * s["arrays_vs_separate"].get<double>());
  }
  out << "\n";
  if (plan.contains("budget")) {
    const auto& b = plan["budget"];
    out << fmt::format("budget {}: {} with the {} finest level(s) dropped ({} on the device)\n",
                       format_bytes(b["budget_bytes"].get<double>()),
                       b["fits"].get<bool>() ? "fits" : "does NOT fit", b["mip_drop"].get<int>(),
                       format_bytes(b["device_bytes"].get<double>()));
  }
  bool mobile = false;
  for (const auto& t : plan["textures"]) mobile = mobile || !t["sampled_by_cuda"].get<bool>();
  if (mobile) out << "* ASTC: tight bytes for mobile GPUs; no CUDA GPU samples ASTC\n";
  return out.str();
}

}  // namespace vramkit::texture

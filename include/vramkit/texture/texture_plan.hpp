// texture_plan: the texture budget planner. For a set of textures (files in a folder, or a JSON
// manifest of sizes and formats), the device bytes of each as stored and under each encoding
// (RGBA8, BC1/4/5/6H/7, ASTC 4x4/6x6/8x8 for mobile targets), with and without a full mip chain,
// as layered arrays against separate textures, and which mips fit a byte budget. Pure; thread-safe.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "vramkit/texture/cuda_allocation_model.hpp"
#include "vramkit/texture/texture_file.hpp"

namespace vramkit::texture {

/// One texture to plan: from a file (read_texture_info) or a manifest entry.
struct texture_entry {
  std::string file;  ///< path or manifest name
  pixel_format format;
  int width = 0;
  int height = 0;
  int mip_levels = 1;
  int layers = 1;                ///< array layers x cube faces
  std::uint64_t data_bytes = 0;  ///< texel data as stored (tight chain bytes for a manifest entry)
};

/// Reads every .dds, .png and .astc file under `dir` (sorted by path; other files are skipped).
/// Throws texture_file_error for an unreadable texture file or a folder with none.
std::vector<texture_entry> entries_from_directory(const std::filesystem::path& dir);

/// Reads a manifest: {"textures": [{"name": "rock", "width": 2048, "height": 2048, "format":
/// "BC7", "mips": "full" | N, "layers": 1} | {"file": "relative/path.dds"}, ...]}. Throws
/// texture_file_error naming the manifest and the entry for anything missing or invalid.
std::vector<texture_entry> entries_from_manifest(const std::filesystem::path& manifest);

/// A folder or a manifest (a regular file), as above.
std::vector<texture_entry> load_entries(const std::filesystem::path& dir_or_manifest);

struct plan_options {
  std::optional<std::uint64_t> budget_bytes;  ///< fit the set into this many device bytes
  cuda_allocation_model model;
};

/// The candidate encodings the planner prices.
std::vector<pixel_format> candidate_formats();

/// The plan as JSON (schema_version 1; docs/texture.md describes every field): `textures` (one
/// entry per file with file, format, width, height, mip_levels, layers, data_bytes,
/// device_bytes, choices), `totals`, `arrays`, `savings` and, with a budget, `budget`.
nlohmann::json plan_textures(const std::vector<texture_entry>& entries,
                             const plan_options& options);

/// A human table of plan_textures' result.
std::string render_plan_table(const nlohmann::json& plan);

}  // namespace vramkit::texture

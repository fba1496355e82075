// Block footprints and mip arithmetic of the texture formats.
#include "vramkit/texture/texture_format.hpp"

#include <algorithm>
#include <cctype>
#include <cstdio>

#include "vramkit/core/error.hpp"

namespace vramkit::texture {

pixel_format pixel_format::of(texture_format f, bool srgb, bool snorm) {
  pixel_format p;
  p.format = f;
  p.srgb = srgb;
  p.snorm = snorm;
  switch (f) {
    case texture_format::rgba8:
      return p;
    case texture_format::bc1:
    case texture_format::bc4:
      p.block_width = p.block_height = 4;
      p.block_bytes = 8;
      return p;
    case texture_format::astc:
      return astc(4, 4, srgb);
    default:
      p.block_width = p.block_height = 4;
      p.block_bytes = 16;
      return p;
  }
}

pixel_format pixel_format::astc(int bx, int by, bool srgb) {
  // The 2-D footprints of the ASTC specification.
  static constexpr int valid[][2] = {{4, 4},  {5, 4},   {5, 5},   {6, 5},  {6, 6},
                                     {8, 5},  {8, 6},   {8, 8},   {10, 5}, {10, 6},
                                     {10, 8}, {10, 10}, {12, 10}, {12, 12}};
  const bool ok = std::any_of(std::begin(valid), std::end(valid),
                              [&](auto& v) { return v[0] == bx && v[1] == by; });
  if (!ok)
    throw logic_error("ASTC block " + std::to_string(bx) + "x" + std::to_string(by) +
                      " is not a 2-D ASTC footprint");
  pixel_format p;
  p.format = texture_format::astc;
  p.block_width = bx;
  p.block_height = by;
  p.block_bytes = 16;
  p.srgb = srgb;
  return p;
}

std::string pixel_format::name() const {
  std::string base;
  switch (format) {
    case texture_format::rgba8:
      base = "RGBA8";
      break;
    case texture_format::bc1:
      base = "BC1";
      break;
    case texture_format::bc2:
      base = "BC2";
      break;
    case texture_format::bc3:
      base = "BC3";
      break;
    case texture_format::bc4:
      base = "BC4";
      break;
    case texture_format::bc5:
      base = "BC5";
      break;
    case texture_format::bc6h:
      base = "BC6H";
      break;
    case texture_format::bc7:
      base = "BC7";
      break;
    case texture_format::astc:
      base = "ASTC_" + std::to_string(block_width) + "x" + std::to_string(block_height);
      break;
  }
  if (format == texture_format::bc6h) return base + (snorm ? "_SF16" : "_UF16");
  if (snorm) return base + "_SNORM";
  if (srgb) return base + "_SRGB";
  return base;
}

std::optional<pixel_format> parse_pixel_format(std::string_view text) {
  std::string s;
  for (char c : text) s += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  std::replace(s.begin(), s.end(), '-', '_');
  bool srgb = false;
  bool snorm = false;
  auto strip = [&](std::string_view suffix) {
    if (s.size() > suffix.size() && s.ends_with(suffix)) {
      s.resize(s.size() - suffix.size());
      return true;
    }
    return false;
  };
  if (strip("_SRGB")) srgb = true;
  if (strip("_SNORM") || strip("_SF16")) snorm = true;
  strip("_UNORM") || strip("_UF16");
  if (s.starts_with("ASTC_")) {
    int bx = 0;
    int by = 0;
    char tail = 0;
    if (std::sscanf(s.c_str() + 5, "%dX%d%c", &bx, &by, &tail) != 2) return std::nullopt;
    try {
      return pixel_format::astc(bx, by, srgb);
    } catch (const logic_error&) {
      return std::nullopt;
    }
  }
  static constexpr std::pair<std::string_view, texture_format> names[] = {
      {"RGBA8", texture_format::rgba8}, {"BC1", texture_format::bc1}, {"BC2", texture_format::bc2},
      {"BC3", texture_format::bc3},     {"BC4", texture_format::bc4}, {"BC5", texture_format::bc5},
      {"BC6H", texture_format::bc6h},   {"BC7", texture_format::bc7}};
  for (auto& [n, f] : names) {
    if (s == n) return pixel_format::of(f, srgb, snorm);
  }
  return std::nullopt;
}

int full_mip_levels(int width, int height) noexcept {
  int m = std::max(std::max(width, height), 1);
  int levels = 1;
  while (m > 1) {
    m >>= 1;
    ++levels;
  }
  return levels;
}

std::uint64_t level_bytes(const pixel_format& f, int width, int height) noexcept {
  const std::uint64_t bx = (static_cast<std::uint64_t>(width) + f.block_width - 1) / f.block_width;
  const std::uint64_t by =
      (static_cast<std::uint64_t>(height) + f.block_height - 1) / f.block_height;
  return bx * by * static_cast<std::uint64_t>(f.block_bytes);
}

std::uint64_t chain_bytes(const pixel_format& f, int width, int height, int levels, int first_level,
                          int layers) noexcept {
  std::uint64_t total = 0;
  for (int l = first_level; l < levels; ++l) {
    total += level_bytes(f, level_extent(width, l), level_extent(height, l));
  }
  return total * static_cast<std::uint64_t>(layers);
}

}  // namespace vramkit::texture

// texture_file: readers for DDS (legacy and DX10 headers; BC1-BC7 and 32-bit RGBA mip chains,
// arrays and cubes), PNG (any PNG, converted to RGBA8 by libpng) and ASTC `.astc` files, and a DDS
// writer. Malformed or truncated input throws texture_file_error, one line naming the file and what
// is wrong. Functions are thread-safe (no shared state).
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "vramkit/core/error.hpp"
#include "vramkit/texture/texture_format.hpp"

namespace vramkit::texture {

/// A texture file that cannot be read: "FILE: what is wrong". A usage error (exit 2 in the CLI).
class texture_file_error : public invalid_input {
 public:
  texture_file_error(const std::filesystem::path& file, const std::string& what)
      : invalid_input(file.string() + ": " + what) {}
};

enum class file_container { dds, png, astc };

/// What a file holds. Texel data is ordered as in DDS: each layer (cube face) whole, finest level
/// first; RGBA8 data is R,G,B,A bytes whatever the file's order.
struct texture_info {
  std::filesystem::path path;
  file_container container = file_container::dds;
  pixel_format format;
  int width = 0;
  int height = 0;
  int mip_levels = 1;
  int array_layers = 1;           ///< array elements (cubes count 6 faces each: see faces)
  int faces = 1;                  ///< 6 for a cube map, else 1
  std::uint64_t data_bytes = 0;   ///< texel data as stored in the file, headers excluded
  std::uint64_t data_offset = 0;  ///< where the texel data starts in the file
  std::uint64_t file_bytes = 0;

  /// Surfaces stored: array_layers x faces.
  [[nodiscard]] int surfaces() const noexcept { return array_layers * faces; }
  /// Byte offset of (surface, level) from the start of the texel data.
  [[nodiscard]] std::uint64_t level_offset(int surface, int level) const noexcept;
  [[nodiscard]] std::uint64_t level_size(int level) const noexcept;
};

/// A file's description and its texel data.
struct texture_image {
  texture_info info;
  std::vector<std::uint8_t> data;  ///< info.data_bytes bytes

  [[nodiscard]] std::span<const std::uint8_t> level(int surface, int level) const;
};

/// Reads the header (and checks the size the file must have); the kind comes from the magic
/// bytes. Throws texture_file_error.
texture_info read_texture_info(const std::filesystem::path& file);
/// Reads header and texel data. Throws texture_file_error.
texture_image load_texture(const std::filesystem::path& file);

/// Writes `image` as DDS with a DX10 header (any pixel_format but ASTC). Throws
/// texture_file_error when the file cannot be written.
void write_dds(const std::filesystem::path& file, const texture_image& image);

/// Writes `rgba` (width x height x 4 bytes, rows top to bottom) as an 8-bit RGBA PNG.
void write_png_rgba8(const std::filesystem::path& file, int width, int height,
                     std::span<const std::uint8_t> rgba);

}  // namespace vramkit::texture

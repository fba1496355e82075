// texture_format: the texel encodings vramkit reads and plans (RGBA8, BC1-BC7, ASTC), their block
// footprints and the mip-chain arithmetic (level extents, level and chain bytes as stored tightly).
// Pure functions and values; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace vramkit::texture {

enum class texture_format { rgba8, bc1, bc2, bc3, bc4, bc5, bc6h, bc7, astc };

/// One encoding: a format, its block footprint and byte size, and how values read back.
struct pixel_format {
  texture_format format = texture_format::rgba8;
  int block_width = 1;   ///< texels per block horizontally (1 for RGBA8)
  int block_height = 1;  ///< texels per block vertically
  int block_bytes = 4;   ///< bytes per block (per texel for RGBA8)
  bool srgb = false;     ///< sRGB-encoded colour (BC1/2/3/7, RGBA8)
  bool snorm = false;    ///< signed (BC4/BC5 SNORM, BC6H SF16)

  /// The 4x4-block BCn format `f` (8 bytes for BC1/BC4, 16 otherwise), or RGBA8.
  static pixel_format of(texture_format f, bool srgb = false, bool snorm = false);
  /// ASTC with a `bx` x `by` footprint (16 bytes per block); logic_error for an invalid footprint.
  static pixel_format astc(int bx, int by, bool srgb = false);

  [[nodiscard]] bool block_compressed() const noexcept {
    return format != texture_format::rgba8 && format != texture_format::astc;
  }
  /// "RGBA8", "BC1", "BC7_SRGB", "BC4_SNORM", "BC6H_SF16", "ASTC_6x6".
  [[nodiscard]] std::string name() const;
  friend bool operator==(const pixel_format&, const pixel_format&) = default;
};

/// Parses a name as name() writes it, case-insensitively ("bc7", "astc-8x8", "ASTC_4x4", "rgba8");
/// nullopt when it names no format.
std::optional<pixel_format> parse_pixel_format(std::string_view text);

/// Texels of one level: max(1, floor(size / 2^level)).
constexpr int level_extent(int size, int level) noexcept {
  const int v = size >> level;
  return v < 1 ? 1 : v;
}

/// Levels of a full chain down to 1x1: 1 + floor(log2(max(width, height))).
int full_mip_levels(int width, int height) noexcept;

/// Bytes of one level of `width` x `height` texels stored tightly: whole blocks, no padding.
std::uint64_t level_bytes(const pixel_format& f, int width, int height) noexcept;

/// Bytes of levels [first_level, levels) of a `width` x `height` chain, stored tightly, times
/// `layers`.
std::uint64_t chain_bytes(const pixel_format& f, int width, int height, int levels,
                          int first_level = 0, int layers = 1) noexcept;

}  // namespace vramkit::texture

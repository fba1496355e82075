// cuda_allocation_model: the device bytes a CUDA mipmapped array takes, tight size plus the
// driver's padding and allocation granularity. Version 1 of the constants reproduces the ten
// free-memory deltas measured on an H200 (driver 580, CUDA 13.0; docs/texture.md); the GPU program
// bench/texture/texture_alloc_measure re-measures them per format, size and mip configuration.
// Pure; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>

#include "vramkit/texture/texture_format.hpp"

namespace vramkit::texture {

struct cuda_allocation_model {
  // Block-linear levels: rows of blocks are laid out in 64-byte x 8-row tiles (GOBs), and a level
  // is padded to whole tiles, its height to a power of two of them up to 16 (128 rows).
  std::uint64_t tile_width_bytes = 64;
  int tile_rows = 8;
  int max_tiles_per_block_column = 16;
  // Levels narrower than a tile or shorter than one (the mip tail) share one packed region.
  std::uint64_t mip_tail_bytes = 1536;
  // Each layer of a layered array starts on this boundary.
  std::uint64_t layer_alignment = 512;
  // Arrays below `large_threshold` are sub-allocated in `small_granularity` units; larger ones
  // take whole `large_granularity` pages. The threshold lies between 57 KB and 2.8 MB (measured
  // bounds); 1 MiB is a guess until the sweep of texture_alloc_measure narrows it.
  std::uint64_t small_granularity = 4096;
  std::uint64_t large_granularity = 2u << 20;
  std::uint64_t large_threshold = 1u << 20;

  /// Bytes of one level after tile padding (0 for levels inside the mip tail).
  [[nodiscard]] std::uint64_t padded_level_bytes(const pixel_format& f, int width,
                                                 int height) const noexcept;
  /// Bytes of one layer of levels [first_level, levels) of a width x height chain, padded.
  [[nodiscard]] std::uint64_t padded_chain_bytes(const pixel_format& f, int width, int height,
                                                 int levels, int first_level = 0) const noexcept;
  /// Device bytes (free-memory delta) of a mipmapped array holding levels [first_level, levels)
  /// of a width x height texture with `layers` layers: padded bytes rounded to the granularity.
  [[nodiscard]] std::uint64_t device_bytes(const pixel_format& f, int width, int height, int levels,
                                           int first_level = 0, int layers = 1) const noexcept;
  /// Whether CUDA can hold and sample `f` (BCn and RGBA8; no ASTC on any CUDA GPU).
  [[nodiscard]] static bool sampled_by_cuda(const pixel_format& f) noexcept {
    return f.format != texture_format::astc;
  }
};

}  // namespace vramkit::texture

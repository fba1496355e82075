// cuda_allocation_model: the device bytes a CUDA mipmapped array takes, tight size plus the
// driver's padding and allocation granularity. Version 2 of the constants reproduces all 150
// free-memory deltas measured on an H200 (driver 580, CUDA 13.0) by
// bench/texture/texture_alloc_measure, kept as tests/data/texture/h200-alloc.json and checked by a
// CPU test; docs/texture.md explains the rules.
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
  std::uint64_t mip_tail_bytes = 2560;
  // Each layer of a layered array starts on this boundary.
  std::uint64_t layer_alignment = 512;
  // Arrays smaller than `large_threshold` are rounded up to `small_granularity` and packed into
  // `large_granularity` pages without straddling a page boundary, so a page holds
  // floor(page / size) of them; arrays of a page or more take whole pages.
  std::uint64_t small_granularity = 512;
  std::uint64_t large_granularity = 2u << 20;
  std::uint64_t large_threshold = 2u << 20;

  /// Bytes of one level after tile padding (0 for levels inside the mip tail).
  [[nodiscard]] std::uint64_t padded_level_bytes(const pixel_format& f, int width,
                                                 int height) const noexcept;
  /// Bytes of one layer of levels [first_level, levels) of a width x height chain, padded.
  [[nodiscard]] std::uint64_t padded_chain_bytes(const pixel_format& f, int width, int height,
                                                 int levels, int first_level = 0) const noexcept;
  /// Bytes one array takes before page packing: padded layers, rounded to the small granularity
  /// (below a page) or to whole pages.
  [[nodiscard]] std::uint64_t array_bytes(const pixel_format& f, int width, int height, int levels,
                                          int first_level = 0, int layers = 1) const noexcept;
  /// Device bytes (free-memory delta per array, amortized over many arrays) of a mipmapped array
  /// holding levels [first_level, levels) of a width x height texture with `layers` layers: a
  /// small array's share of its page (page / arrays per page, rounded up), else whole pages.
  [[nodiscard]] std::uint64_t device_bytes(const pixel_format& f, int width, int height, int levels,
                                           int first_level = 0, int layers = 1) const noexcept;
  /// Free-memory delta of `count` identical such arrays allocated one after another: whole pages
  /// (ceil(count / arrays per page) pages for small arrays).
  [[nodiscard]] std::uint64_t device_bytes_of(std::uint64_t count, const pixel_format& f, int width,
                                              int height, int levels, int first_level = 0,
                                              int layers = 1) const noexcept;
  /// Whether CUDA can hold and sample `f` (BCn and RGBA8; no ASTC on any CUDA GPU).
  [[nodiscard]] static bool sampled_by_cuda(const pixel_format& f) noexcept {
    return f.format != texture_format::astc;
  }
};

}  // namespace vramkit::texture

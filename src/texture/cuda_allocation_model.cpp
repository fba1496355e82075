// The CUDA mipmapped-array footprint model (constants in the header, with where they come from).
#include "vramkit/texture/cuda_allocation_model.hpp"

#include "vramkit/core/units.hpp"

namespace vramkit::texture {
namespace {

std::uint64_t round_up(std::uint64_t v, std::uint64_t a) { return (v + a - 1) / a * a; }

}  // namespace

std::uint64_t cuda_allocation_model::padded_level_bytes(const pixel_format& f, int width,
                                                        int height) const noexcept {
  const std::uint64_t row_bytes =
      static_cast<std::uint64_t>((width + f.block_width - 1) / f.block_width) * f.block_bytes;
  const std::uint64_t rows =
      static_cast<std::uint64_t>((height + f.block_height - 1) / f.block_height);
  if (row_bytes < tile_width_bytes || rows < static_cast<std::uint64_t>(tile_rows)) return 0;
  const std::uint64_t block_rows =
      static_cast<std::uint64_t>(tile_rows) * max_tiles_per_block_column;
  std::uint64_t padded_rows = 0;
  if (rows >= block_rows) {
    padded_rows = round_up(rows, block_rows);
  } else {
    padded_rows = static_cast<std::uint64_t>(tile_rows);
    while (padded_rows < rows) padded_rows *= 2;
  }
  return round_up(row_bytes, tile_width_bytes) * padded_rows;
}

std::uint64_t cuda_allocation_model::padded_chain_bytes(const pixel_format& f, int width,
                                                        int height, int levels,
                                                        int first_level) const noexcept {
  std::uint64_t total = 0;
  bool tail = false;
  for (int l = first_level; l < levels; ++l) {
    const std::uint64_t b = padded_level_bytes(f, level_extent(width, l), level_extent(height, l));
    if (b == 0) {
      tail = true;
    } else {
      total += b;
    }
  }
  if (tail) total += mip_tail_bytes;
  return total;
}

std::uint64_t cuda_allocation_model::array_bytes(const pixel_format& f, int width, int height,
                                                 int levels, int first_level,
                                                 int layers) const noexcept {
  std::uint64_t bytes = padded_chain_bytes(f, width, height, levels, first_level);
  if (layers > 1) bytes = round_up(bytes, layer_alignment) * static_cast<std::uint64_t>(layers);
  return round_up(bytes, bytes < large_threshold ? small_granularity : large_granularity);
}

std::uint64_t cuda_allocation_model::device_bytes(const pixel_format& f, int width, int height,
                                                  int levels, int first_level,
                                                  int layers) const noexcept {
  const std::uint64_t bytes = array_bytes(f, width, height, levels, first_level, layers);
  if (bytes >= large_threshold || bytes == 0) return bytes;
  const std::uint64_t per_page = large_granularity / bytes;
  return (large_granularity + per_page - 1) / per_page;
}

std::uint64_t cuda_allocation_model::device_bytes_of(std::uint64_t count, const pixel_format& f,
                                                     int width, int height, int levels,
                                                     int first_level, int layers) const noexcept {
  const std::uint64_t bytes = array_bytes(f, width, height, levels, first_level, layers);
  if (bytes >= large_threshold || bytes == 0) return bytes * count;
  const std::uint64_t per_page = large_granularity / bytes;
  return (count + per_page - 1) / per_page * large_granularity;
}

}  // namespace vramkit::texture

// block_codec: a CPU reference decoder for BC1-BC7 (BC6H UF16/SF16 included) written from the
// format specifications (D3D11 functional spec / Khronos Data Format spec, Microsoft's BC6H page),
// with an NVIDIA mode that reproduces the H200's texture unit for the loosely specified BC1-BC5;
// the ground truth for the GPU sampling checks; and a small BC1 encoder (range fit) for generated
// test and demo textures. Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "vramkit/texture/texture_format.hpp"

namespace vramkit::texture {

/// One decoded texel: R, G, B, A in [0, 1] ([-1, 1] for SNORM channels; BC6H: the half-float
/// values, alpha 1).
struct texel {
  float r = 0, g = 0, b = 0, a = 1;
};

/// Which arithmetic turns BC1-BC5 endpoints into palettes. The format specification leaves BC1-BC5
/// interpolation loosely defined; GPUs differ by a few 8-bit steps. BC6H and BC7 are exact in both.
enum class bc_decoder {
  reference,  ///< exact: endpoints c/31, c/63 and (2a + b) / 3, (6 a + b) / 7 in real arithmetic
  nvidia,     ///< NVIDIA's texture unit (docs/texture.md): 8-bit BC1-BC3 colour and BC3 alpha
              ///< palettes, 16-bit BC4/BC5 ones, from integer formulas
};

/// Whether decode_block knows `f` (RGBA8 and BC1-BC7; not ASTC).
bool can_decode(const pixel_format& f) noexcept;

/// Decodes the block at `block` (block_bytes of `f`) into 16 texels, row-major within the 4x4
/// footprint. BC4/BC5 read as (r, 0, 0, 1) / (r, g, 0, 1) as GPUs sample them; a BC7 block with
/// the reserved mode 8 decodes to transparent black. Throws logic_error for a format can_decode
/// rejects.
void decode_block(const pixel_format& f, const std::uint8_t* block, texel out[16],
                  bc_decoder decoder = bc_decoder::reference);

/// Decodes a whole `width` x `height` level (data as stored: rows of blocks) into width x height
/// texels, row-major; padding texels of partial blocks are dropped.
std::vector<texel> decode_level(const pixel_format& f, int width, int height,
                                std::span<const std::uint8_t> data,
                                bc_decoder decoder = bc_decoder::reference);

/// The same as 8-bit RGBA (each channel rounded from [0, 1]; SNORM mapped from [-1, 1]).
std::vector<std::uint8_t> decode_level_rgba8(const pixel_format& f, int width, int height,
                                             std::span<const std::uint8_t> data);

/// Encodes an RGBA8 image (alpha ignored) as BC1 in four-colour mode: endpoints at the ends of
/// the block's colour bounding-box diagonal, each texel the nearest of the four palette colours.
std::vector<std::uint8_t> encode_bc1(int width, int height, std::span<const std::uint8_t> rgba);

}  // namespace vramkit::texture

// The BC6H block decoder behind decode_block (internal to vramkit_texture): one 16-byte block into
// 16 half-float RGB texels, as the format specifies bit for bit.
#pragma once

#include <cstdint>

namespace vramkit::texture::detail {

/// Decodes a BC6H block (UF16, or SF16 when `is_signed`) into 16 texels' R, G, B half-float bit
/// patterns, row-major. A reserved mode decodes to zeros.
void decode_bc6h_block(const std::uint8_t* block, bool is_signed, std::uint16_t out[16][3]);

/// The value of IEEE 754 half-precision bits `h` (exact: every half is a float).
float half_to_float(std::uint16_t h) noexcept;

}  // namespace vramkit::texture::detail

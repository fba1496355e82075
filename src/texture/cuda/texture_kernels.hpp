// Host launchers of the texture kernels (texture_kernels.cu); plain C++ so that host code never
// includes CUDA headers. Streams are cudaStream_t passed as void*. Internal to vramkit_texture.
#pragma once

#include <cstdint>

namespace vramkit::texture::detail {

/// How a texture object is addressed: a 2-D texture, a layered one, a cube map (layer = face) or
/// a cube map array (layer = 6 x cube + face).
enum class sample_kind { plain, layered, cubemap, cubemap_layered };

/// Samples texture object `tex` at every texel centre of a `width` x `height` level of layer
/// `layer` with tex2DLod / tex2DLayeredLod (lod), or for cube maps texCubemapLod /
/// texCubemapLayeredLod in the direction of the texel centre on the face; writes width x height
/// float4 (RGBA) to device memory `out`.
void launch_sample_level(std::uint64_t tex, int width, int height, float lod, float* out,
                         void* stream, sample_kind kind = sample_kind::plain, int layer = 0);

/// One textured quad of the demo scene: a square on the ground plane z = 0.
struct demo_quad {
  std::uint64_t tex = 0;  ///< texture object of the resident chain
  int first_level = 0;    ///< the chain's first level: the min-LOD clamp
  int size = 0;           ///< level-0 texels per side
  float x0 = 0, y0 = 0;   ///< corner on the ground plane
  float extent = 1;       ///< side length
  float lod_bias = 0;
};

struct demo_camera {
  float pos[3];
  float forward[3], right[3], up[3];
  float focal;  ///< pixels
  int width, height;
  int samples;  ///< per pixel, on a regular sub-pixel grid (1, 4, 9, 16)
  float cell;   ///< grid pitch of the quads
  int columns;  ///< quads per row
};

/// Ray-casts one frame into `rgba` (width x height x 4 bytes, device). Per quad it records the
/// finest LOD any sample wanted (x256, atomicMin into `min_lod_x256`) and the samples that hit it
/// (`coverage`); `violations` counts samples that would have read a level finer than resident.
void launch_render(const demo_quad* quads, int count, const demo_camera& camera, std::uint8_t* rgba,
                   int* min_lod_x256, unsigned* coverage, unsigned* violations, void* stream);

}  // namespace vramkit::texture::detail

// The texture kernels: texel-centre sampling (for the decoder checks) and the demo's ray caster,
// which samples each quad at max(needed LOD, resident first level) and reports what it needed.
#include <cuda_runtime.h>

#include "common/cuda_check.hpp"
#include "texture/cuda/texture_kernels.hpp"

namespace vramkit::texture::detail {
namespace {

// The direction whose cube-map lookup lands on the centre (s, t) in [-1, 1] of `face`: the
// inverse of CUDA's face selection (major axis +x, -x, +y, -y, +z, -z; s = -z, z, x, x, x, -x
// and t = -y, -y, z, -z, -y, -y over the major axis).
__device__ float3 cube_direction(int face, float s, float t) {
  switch (face) {
    case 0:
      return make_float3(1.0f, -t, -s);
    case 1:
      return make_float3(-1.0f, -t, s);
    case 2:
      return make_float3(s, 1.0f, t);
    case 3:
      return make_float3(s, -1.0f, -t);
    case 4:
      return make_float3(s, -t, 1.0f);
    default:
      return make_float3(-s, -t, -1.0f);
  }
}

__global__ void sample_level_kernel(cudaTextureObject_t tex, int width, int height, float lod,
                                    float4* out, sample_kind kind, int layer) {
  const int x = blockIdx.x * blockDim.x + threadIdx.x;
  const int y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x >= width || y >= height) return;
  const float u = (x + 0.5f) / width;
  const float v = (y + 0.5f) / height;
  float4 c;
  if (kind == sample_kind::plain) {
    c = tex2DLod<float4>(tex, u, v, lod);
  } else if (kind == sample_kind::layered) {
    c = tex2DLayeredLod<float4>(tex, u, v, layer, lod);
  } else {
    const float3 d = cube_direction(layer % 6, 2.0f * u - 1.0f, 2.0f * v - 1.0f);
    c = kind == sample_kind::cubemap
            ? texCubemapLod<float4>(tex, d.x, d.y, d.z, lod)
            : texCubemapLayeredLod<float4>(tex, d.x, d.y, d.z, layer / 6, lod);
  }
  out[y * width + x] = c;
}

struct hit {
  bool ok;
  float x, y;
};

__device__ hit intersect(const demo_camera& c, float px, float py) {
  const float sx = (px - 0.5f * c.width) / c.focal;
  const float sy = (py - 0.5f * c.height) / c.focal;
  float d[3];
  for (int i = 0; i < 3; ++i) d[i] = c.forward[i] + sx * c.right[i] - sy * c.up[i];
  if (d[2] >= -1e-6f) return {false, 0, 0};
  const float t = -c.pos[2] / d[2];
  return {true, c.pos[0] + t * d[0], c.pos[1] + t * d[1]};
}

__global__ void render_kernel(const demo_quad* quads, int count, demo_camera cam, uchar4* rgba,
                              int* min_lod, unsigned* coverage, unsigned* violations) {
  const int px = blockIdx.x * blockDim.x + threadIdx.x;
  const int py = blockIdx.y * blockDim.y + threadIdx.y;
  if (px >= cam.width || py >= cam.height) return;
  const int grid = cam.samples >= 16 ? 4 : cam.samples >= 9 ? 3 : cam.samples >= 4 ? 2 : 1;
  float acc[4] = {0, 0, 0, 0};
  for (int sy = 0; sy < grid; ++sy) {
    for (int sx = 0; sx < grid; ++sx) {
      const float fx = px + (sx + 0.5f) / grid;
      const float fy = py + (sy + 0.5f) / grid;
      const hit h = intersect(cam, fx, fy);
      float4 c = make_float4(0.55f, 0.7f, 0.9f, 1.0f);  // sky
      if (h.ok) {
        const int col = static_cast<int>(floorf(h.x / cam.cell));
        const int row = static_cast<int>(floorf(h.y / cam.cell));
        const int q = row * cam.columns + col;
        c = make_float4(0.2f, 0.2f, 0.2f, 1.0f);  // ground between quads
        if (col >= 0 && col < cam.columns && row >= 0 && q < count) {
          const demo_quad& quad = quads[q];
          const float u = (h.x - quad.x0) / quad.extent;
          const float v = (h.y - quad.y0) / quad.extent;
          if (u >= 0.0f && u < 1.0f && v >= 0.0f && v < 1.0f) {
            // Footprint of one pixel in level-0 texels, from the neighbouring pixels' hits.
            const hit hx = intersect(cam, fx + 1.0f, fy);
            const hit hy = intersect(cam, fx, fy + 1.0f);
            const float k = quad.size / quad.extent;
            float rho = 1e9f;
            if (hx.ok && hy.ok) {
              const float dxu = (hx.x - h.x) * k, dxv = (hx.y - h.y) * k;
              const float dyu = (hy.x - h.x) * k, dyv = (hy.y - h.y) * k;
              rho = fmaxf(sqrtf(dxu * dxu + dxv * dxv), sqrtf(dyu * dyu + dyv * dyv));
            }
            const float lod = fmaxf(0.0f, log2f(fmaxf(rho, 1e-6f)) + quad.lod_bias);
            const float used = fmaxf(lod, static_cast<float>(quad.first_level));
            if (static_cast<int>(floorf(used)) < quad.first_level) atomicAdd(violations, 1u);
            atomicMin(&min_lod[q], static_cast<int>(fminf(lod, 64.0f) * 256.0f));
            atomicAdd(&coverage[q], 1u);
            c = tex2DLod<float4>(quad.tex, u, v, used - quad.first_level);
          }
        }
      }
      acc[0] += c.x;
      acc[1] += c.y;
      acc[2] += c.z;
      acc[3] += c.w;
    }
  }
  const float n = static_cast<float>(grid * grid);
  auto q8 = [&](float v) {
    return static_cast<unsigned char>(fminf(fmaxf(v / n, 0.0f), 1.0f) * 255.0f + 0.5f);
  };
  rgba[py * cam.width + px] = make_uchar4(q8(acc[0]), q8(acc[1]), q8(acc[2]), 255);
}

}  // namespace

void launch_sample_level(std::uint64_t tex, int width, int height, float lod, float* out,
                         void* stream, sample_kind kind, int layer) {
  const dim3 block(16, 16);
  const dim3 grid((width + 15) / 16, (height + 15) / 16);
  sample_level_kernel<<<grid, block, 0, static_cast<cudaStream_t>(stream)>>>(
      tex, width, height, lod, reinterpret_cast<float4*>(out), kind, layer);
  VRAMKIT_CUDA_TRY(cudaGetLastError());
}

void launch_render(const demo_quad* quads, int count, const demo_camera& camera, std::uint8_t* rgba,
                   int* min_lod_x256, unsigned* coverage, unsigned* violations, void* stream) {
  const dim3 block(16, 8);
  const dim3 grid((camera.width + 15) / 16, (camera.height + 7) / 8);
  render_kernel<<<grid, block, 0, static_cast<cudaStream_t>(stream)>>>(
      quads, count, camera, reinterpret_cast<uchar4*>(rgba), min_lod_x256, coverage, violations);
  VRAMKIT_CUDA_TRY(cudaGetLastError());
}

}  // namespace vramkit::texture::detail

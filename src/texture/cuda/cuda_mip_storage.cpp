// Mip chains in CUDA mipmapped arrays. Copies follow the rules measured on an H200
// (docs/texture.md): cudaMemcpy2DToArrayAsync takes block-row bytes x block rows for BC arrays;
// cudaMemcpy3DAsync between arrays takes texel extents.
#include "vramkit/texture/cuda_mip_storage.hpp"

#include <cuda_runtime.h>

#include <algorithm>

#include "common/cuda_check.hpp"

namespace vramkit::texture {
namespace {

struct cuda_chain final : mip_chain {
  cudaMipmappedArray_t array = nullptr;
  cudaTextureObject_t object = 0;
};

cudaChannelFormatDesc channel_of(const pixel_format& f) {
  switch (f.format) {
    case texture_format::rgba8:
      return cudaCreateChannelDesc<uchar4>();
    case texture_format::bc1:
      return f.srgb ? cudaCreateChannelDesc<cudaChannelFormatKindUnsignedBlockCompressed1SRGB>()
                    : cudaCreateChannelDesc<cudaChannelFormatKindUnsignedBlockCompressed1>();
    case texture_format::bc2:
      return f.srgb ? cudaCreateChannelDesc<cudaChannelFormatKindUnsignedBlockCompressed2SRGB>()
                    : cudaCreateChannelDesc<cudaChannelFormatKindUnsignedBlockCompressed2>();
    case texture_format::bc3:
      return f.srgb ? cudaCreateChannelDesc<cudaChannelFormatKindUnsignedBlockCompressed3SRGB>()
                    : cudaCreateChannelDesc<cudaChannelFormatKindUnsignedBlockCompressed3>();
    case texture_format::bc4:
      return f.snorm ? cudaCreateChannelDesc<cudaChannelFormatKindSignedBlockCompressed4>()
                     : cudaCreateChannelDesc<cudaChannelFormatKindUnsignedBlockCompressed4>();
    case texture_format::bc5:
      return f.snorm ? cudaCreateChannelDesc<cudaChannelFormatKindSignedBlockCompressed5>()
                     : cudaCreateChannelDesc<cudaChannelFormatKindUnsignedBlockCompressed5>();
    case texture_format::bc6h:
      return f.snorm ? cudaCreateChannelDesc<cudaChannelFormatKindSignedBlockCompressed6H>()
                     : cudaCreateChannelDesc<cudaChannelFormatKindUnsignedBlockCompressed6H>();
    case texture_format::bc7:
      return f.srgb ? cudaCreateChannelDesc<cudaChannelFormatKindUnsignedBlockCompressed7SRGB>()
                    : cudaCreateChannelDesc<cudaChannelFormatKindUnsignedBlockCompressed7>();
    case texture_format::astc:
      break;
  }
  throw cuda_error(static_cast<int>(cudaErrorInvalidChannelDescriptor),
                   f.name() + " has no CUDA channel format");
}

}  // namespace

mip_chain* cuda_mip_storage::create_chain(const mip_chain_desc& desc, int first_level) {
  auto c = std::make_unique<cuda_chain>();
  c->desc = desc;
  c->first_level = first_level;
  const cudaChannelFormatDesc ch = channel_of(desc.format);
  const cudaExtent extent =
      make_cudaExtent(static_cast<std::size_t>(level_extent(desc.width, first_level)),
                      static_cast<std::size_t>(level_extent(desc.height, first_level)), 0);
  VRAMKIT_CUDA_TRY(cudaMallocMipmappedArray(
      &c->array, &ch, extent, static_cast<unsigned>(desc.mip_levels - first_level), 0));
  cudaResourceDesc res{};
  res.resType = cudaResourceTypeMipmappedArray;
  res.res.mipmap.mipmap = c->array;
  cudaTextureDesc tex{};
  tex.addressMode[0] = tex.addressMode[1] = cudaAddressModeClamp;
  tex.filterMode = filter_ == texture_filter::linear ? cudaFilterModeLinear : cudaFilterModePoint;
  tex.mipmapFilterMode = tex.filterMode;
  tex.readMode = cudaReadModeNormalizedFloat;
  tex.normalizedCoords = 1;
  tex.sRGB = desc.format.srgb ? 1 : 0;
  tex.minMipmapLevelClamp = 0;
  tex.maxMipmapLevelClamp = static_cast<float>(desc.mip_levels - first_level - 1);
  const cudaError_t st = cudaCreateTextureObject(&c->object, &res, &tex, nullptr);
  if (st != cudaSuccess) {
    cudaFreeMipmappedArray(c->array);
    detail::throw_cuda_error(st, "cudaCreateTextureObject", __FILE__, __LINE__);
  }
  return c.release();
}

void cuda_mip_storage::copy_shared_levels(mip_chain* dst, const mip_chain* src,
                                          stream_view stream) {
  auto* d = static_cast<cuda_chain*>(dst);
  const auto* s = static_cast<const cuda_chain*>(src);
  const int from = std::max(d->first_level, s->first_level);
  for (int l = from; l < d->desc.mip_levels; ++l) {
    cudaArray_t da = nullptr;
    cudaArray_t sa = nullptr;
    VRAMKIT_CUDA_TRY(
        cudaGetMipmappedArrayLevel(&da, d->array, static_cast<unsigned>(l - d->first_level)));
    VRAMKIT_CUDA_TRY(
        cudaGetMipmappedArrayLevel(&sa, s->array, static_cast<unsigned>(l - s->first_level)));
    cudaMemcpy3DParms p{};
    p.srcArray = sa;
    p.dstArray = da;
    p.extent = make_cudaExtent(static_cast<std::size_t>(level_extent(d->desc.width, l)),
                               static_cast<std::size_t>(level_extent(d->desc.height, l)), 1);
    p.kind = cudaMemcpyDeviceToDevice;
    VRAMKIT_CUDA_TRY(cudaMemcpy3DAsync(&p, static_cast<cudaStream_t>(stream.handle)));
  }
}

void cuda_mip_storage::upload_level(mip_chain* dst, int level, const void* host_src,
                                    stream_view stream) {
  auto* d = static_cast<cuda_chain*>(dst);
  if (level < d->first_level || level >= d->desc.mip_levels)
    throw logic_error("upload_level: level not in the chain");
  cudaArray_t a = nullptr;
  VRAMKIT_CUDA_TRY(
      cudaGetMipmappedArrayLevel(&a, d->array, static_cast<unsigned>(level - d->first_level)));
  const auto& f = d->desc.format;
  const int w = level_extent(d->desc.width, level);
  const int h = level_extent(d->desc.height, level);
  const std::size_t row_bytes =
      static_cast<std::size_t>((w + f.block_width - 1) / f.block_width) * f.block_bytes;
  const std::size_t rows = static_cast<std::size_t>((h + f.block_height - 1) / f.block_height);
  VRAMKIT_CUDA_TRY(cudaMemcpy2DToArrayAsync(a, 0, 0, host_src, row_bytes, row_bytes, rows,
                                            cudaMemcpyHostToDevice,
                                            static_cast<cudaStream_t>(stream.handle)));
}

void cuda_mip_storage::destroy_chain(mip_chain* chain) noexcept {
  auto* c = static_cast<cuda_chain*>(chain);
  if (c == nullptr) return;
  VRAMKIT_CUDA_ASSERT(cudaDestroyTextureObject(c->object));
  VRAMKIT_CUDA_ASSERT(cudaFreeMipmappedArray(c->array));
  delete c;
}

std::uint64_t cuda_mip_storage::texture_object(const mip_chain* chain) noexcept {
  return static_cast<const cuda_chain*>(chain)->object;
}

}  // namespace vramkit::texture

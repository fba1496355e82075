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

// Layered and cube arrays: the CUDA flags and the depth (layers) of the allocation.
unsigned array_flags(const mip_chain_desc& d) {
  if (d.cube) return d.layers > 6 ? cudaArrayCubemap | cudaArrayLayered : cudaArrayCubemap;
  return d.layers > 1 ? cudaArrayLayered : 0u;
}

bool layered(const mip_chain_desc& d) { return d.cube || d.layers > 1; }

cudaTextureObject_t make_texture_object(cudaMipmappedArray_t array, const mip_chain_desc& desc,
                                        int first_level, texture_filter filter) {
  cudaResourceDesc res{};
  res.resType = cudaResourceTypeMipmappedArray;
  res.res.mipmap.mipmap = array;
  cudaTextureDesc tex{};
  for (auto& a : tex.addressMode) a = cudaAddressModeClamp;
  tex.filterMode = filter == texture_filter::linear ? cudaFilterModeLinear : cudaFilterModePoint;
  tex.mipmapFilterMode = tex.filterMode;
  // Block-compressed arrays need the normalized-float read mode (element type is refused).
  tex.readMode = cudaReadModeNormalizedFloat;
  tex.normalizedCoords = 1;
  tex.sRGB = desc.format.srgb ? 1 : 0;
  tex.minMipmapLevelClamp = 0;
  tex.maxMipmapLevelClamp = static_cast<float>(desc.mip_levels - first_level - 1);
  cudaTextureObject_t object = 0;
  cudaError_t st = cudaCreateTextureObject(&object, &res, &tex, nullptr);
  if ((st == cudaErrorInvalidValue || st == cudaErrorInvalidNormSetting) &&
      desc.format.format == texture_format::bc6h) {
    // BC6H holds half floats, to which the normalized read mode does not apply (the runtime says
    // cudaErrorInvalidNormSetting): read them as the element type instead.
    static_cast<void>(cudaGetLastError());
    tex.readMode = cudaReadModeElementType;
    st = cudaCreateTextureObject(&object, &res, &tex, nullptr);
  }
  if (st != cudaSuccess)
    detail::throw_cuda_error(st, "cudaCreateTextureObject", __FILE__, __LINE__);
  return object;
}

}  // namespace

mip_chain* cuda_mip_storage::create_chain(const mip_chain_desc& desc, int first_level) {
  auto c = std::make_unique<cuda_chain>();
  c->desc = desc;
  c->first_level = first_level;
  const cudaChannelFormatDesc ch = channel_of(desc.format);
  const cudaExtent extent =
      make_cudaExtent(static_cast<std::size_t>(level_extent(desc.width, first_level)),
                      static_cast<std::size_t>(level_extent(desc.height, first_level)),
                      layered(desc) ? static_cast<std::size_t>(desc.layers) : 0);
  VRAMKIT_CUDA_TRY(cudaMallocMipmappedArray(&c->array, &ch, extent,
                                            static_cast<unsigned>(desc.mip_levels - first_level),
                                            array_flags(desc)));
  try {
    c->object = make_texture_object(c->array, desc, first_level, filter_);
  } catch (...) {
    cudaFreeMipmappedArray(c->array);
    throw;
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
    // Texel extents; every layer at once (depth = layers).
    p.extent = make_cudaExtent(static_cast<std::size_t>(level_extent(d->desc.width, l)),
                               static_cast<std::size_t>(level_extent(d->desc.height, l)),
                               static_cast<std::size_t>(d->desc.layers));
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
  const auto st = static_cast<cudaStream_t>(stream.handle);
  if (!layered(d->desc)) {
    // Block-row bytes x block rows.
    VRAMKIT_CUDA_TRY(cudaMemcpy2DToArrayAsync(a, 0, 0, host_src, row_bytes, row_bytes, rows,
                                              cudaMemcpyHostToDevice, st));
    return;
  }
  // One copy per layer: texel extents, the source pitch in bytes per block row, dstPos.z the
  // layer (cube face).
  for (int layer = 0; layer < d->desc.layers; ++layer) {
    cudaMemcpy3DParms p{};
    p.srcPtr =
        make_cudaPitchedPtr(const_cast<std::uint8_t*>(static_cast<const std::uint8_t*>(host_src)) +
                                static_cast<std::size_t>(layer) * row_bytes * rows,
                            row_bytes, static_cast<std::size_t>(w), rows);
    p.dstArray = a;
    p.dstPos = make_cudaPos(0, 0, static_cast<std::size_t>(layer));
    p.extent = make_cudaExtent(static_cast<std::size_t>(w), static_cast<std::size_t>(h), 1);
    p.kind = cudaMemcpyHostToDevice;
    VRAMKIT_CUDA_TRY(cudaMemcpy3DAsync(&p, st));
  }
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

void* cuda_mip_storage::level_array(const mip_chain* chain, int level) {
  const auto* c = static_cast<const cuda_chain*>(chain);
  if (level < c->first_level || level >= c->desc.mip_levels)
    throw logic_error("level_array: level not in the chain");
  cudaArray_t a = nullptr;
  VRAMKIT_CUDA_TRY(
      cudaGetMipmappedArrayLevel(&a, c->array, static_cast<unsigned>(level - c->first_level)));
  return a;
}

}  // namespace vramkit::texture

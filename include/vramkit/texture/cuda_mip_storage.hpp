// cuda_mip_storage: mip chains as CUDA mipmapped arrays in block-compressed channel formats
// (BC1-BC7; RGBA8 as uchar4), layered for texture arrays and cube-map arrays for cube maps, each
// with a texture object (normalized coordinates, clamp, trilinear or point filtering) that kernels
// sample with tex2DLod, tex2DLayeredLod or texCubemap(Layered)Lod. Only in CUDA builds. Used from
// one thread.
#pragma once

#include <cstdint>

#include "vramkit/texture/mip_storage.hpp"

namespace vramkit::texture {

enum class texture_filter { point, linear };

class cuda_mip_storage final : public mip_storage {
 public:
  /// Chains on the calling thread's current device, sampled with `filter` (within and between
  /// levels).
  explicit cuda_mip_storage(texture_filter filter = texture_filter::linear) : filter_(filter) {}
  /// Throws cuda_error for a format CUDA has no channel format for (ASTC) or a failed call.
  mip_chain* create_chain(const mip_chain_desc& desc, int first_level) override;
  void copy_shared_levels(mip_chain* dst, const mip_chain* src, stream_view stream) override;
  void upload_level(mip_chain* dst, int level, const void* host_src, stream_view stream) override;
  void destroy_chain(mip_chain* chain) noexcept override;
  /// The chain's cudaTextureObject_t; its level 0 is the chain's first level.
  [[nodiscard]] static std::uint64_t texture_object(const mip_chain* chain) noexcept;
  /// The cudaArray_t holding level `level` (absolute, within the chain) of `chain`, for read-backs.
  /// Throws logic_error for a level the chain does not hold.
  [[nodiscard]] static void* level_array(const mip_chain* chain, int level);

 private:
  texture_filter filter_;
};

}  // namespace vramkit::texture

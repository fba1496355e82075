// mip_storage: where resident mip chains live on a device. A chain holds levels
// [first_level, mip_levels) of one texture; chains are built (allocated, filled by copies on a
// stream) and replaced whole, since CUDA mipmapped arrays cannot grow or shrink in place. Two
// implementations: linear memory of any device_api (device_api_mip_storage, for the simulated
// device in tests) and CUDA mipmapped arrays (cuda_mip_storage.hpp, sampled by texture objects).
// Implementations are used from one thread.
#pragma once

#include <cstdint>
#include <memory>

#include "vramkit/core/device_api.hpp"
#include "vramkit/texture/mip_residency_policy.hpp"

namespace vramkit::texture {

/// A chain owned by a mip_storage (each implementation derives its own).
struct mip_chain {
  mip_chain_desc desc;
  int first_level = 0;
  virtual ~mip_chain() = default;
};

class mip_storage {
 public:
  virtual ~mip_storage() = default;
  /// Allocates an uninitialised chain of `desc`'s levels [first_level, mip_levels). Throws
  /// out_of_memory or cuda_error.
  virtual mip_chain* create_chain(const mip_chain_desc& desc, int first_level) = 0;
  /// Copies the levels both chains hold from `src` into `dst`, ordered on `stream`.
  virtual void copy_shared_levels(mip_chain* dst, const mip_chain* src, stream_view stream) = 0;
  /// Copies level `level` of every layer from pinned host memory: each layer's level tightly packed
  /// as in a DDS file, layer after layer (desc.layers of them).
  virtual void upload_level(mip_chain* dst, int level, const void* host_src,
                            stream_view stream) = 0;
  /// Frees a chain; the caller guarantees that no queued work still uses it.
  virtual void destroy_chain(mip_chain* chain) noexcept = 0;
};

/// Chains in linear device memory of a device_api: levels tightly packed, finest first, each
/// level's layers one after another. Example:
///   host_sim_device dev;  device_api_mip_storage storage(dev);
class device_api_mip_storage final : public mip_storage {
 public:
  explicit device_api_mip_storage(device_api& api) : api_(&api) {}
  mip_chain* create_chain(const mip_chain_desc& desc, int first_level) override;
  void copy_shared_levels(mip_chain* dst, const mip_chain* src, stream_view stream) override;
  void upload_level(mip_chain* dst, int level, const void* host_src, stream_view stream) override;
  void destroy_chain(mip_chain* chain) noexcept override;
  /// Device address of `level` in `chain`, its layers one after another (for checks and kernels
  /// over linear memory).
  [[nodiscard]] const void* level_data(const mip_chain* chain, int level) const;

 private:
  device_api* api_;
};

}  // namespace vramkit::texture

// Launchers of the kernels used by the tier GPU tests (tier_gpu_kernels.cu).
#pragma once

#include <cstddef>
#include <cstdint>

#include "vramkit/core/device_api.hpp"

namespace vramkit::testing {

/// data[i] += add for the `n` words at `data`.
void launch_add_u32(std::uint32_t* data, std::size_t n, std::uint32_t add, stream_view stream);
/// data[i] = value for the `n` words at `data`.
void launch_set_u32(std::uint32_t* data, std::size_t n, std::uint32_t value, stream_view stream);
/// data[i] = data[i] * 5 + index of the word in the dataset (`first` = index of data[0]).
void launch_mix_u32(std::uint32_t* data, std::size_t n, std::size_t first, stream_view stream);

}  // namespace vramkit::testing

// Host-side launchers of the tier benchmark's kernels (bench/tier/tier_kernels.cu). Each enqueues
// on `stream` and checks the launch; none synchronizes.
#pragma once

#include <cstddef>
#include <cstdint>

#include "vramkit/core/device_api.hpp"

namespace vramkit::bench {

/// *sum += the sum of `n` 32-bit words at `data` (sum is a device pointer to one 64-bit word).
void launch_sum_u32(const std::uint32_t* data, std::size_t n, unsigned long long* sum,
                    stream_view stream);

/// data[i] = transform_u32(data[i]) for the `n` words at `data`.
void launch_transform_u32(std::uint32_t* data, std::size_t n, stream_view stream);

#ifdef __CUDACC__
#define VRAMKIT_BENCH_HD __host__ __device__
#else
#define VRAMKIT_BENCH_HD
#endif

/// The element-wise transform of the benchmark, also used by the CPU reference.
VRAMKIT_BENCH_HD constexpr std::uint32_t transform_u32(std::uint32_t x) noexcept {
  return x * 3u + 1u;
}

/// Adds `add` to each of the `n` words at `data` (add = 0: reads only), then spins until about
/// `spin_us` microseconds have passed on the device: a stand-in for compute on a buffer.
void launch_touch_u32(std::uint32_t* data, std::size_t n, std::uint32_t add, std::uint32_t spin_us,
                      stream_view stream);

}  // namespace vramkit::bench

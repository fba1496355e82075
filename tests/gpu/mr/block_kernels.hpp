// Host-side launchers of the kernels the GPU pool tests use (defined in block_kernels.cu).
#pragma once

#include <cstddef>
#include <cstdint>

namespace vramkit::testing {

/// Writes `value` to every 32-bit word of [p, p + bytes) on `stream` (a cudaStream_t).
void launch_fill_words(void* p, std::size_t bytes, std::uint32_t value, void* stream);
/// Adds to *mismatches (device memory) the number of words of [p, p + bytes) not equal to `value`.
void launch_count_mismatches(const void* p, std::size_t bytes, std::uint32_t value,
                             unsigned long long* mismatches, void* stream);
/// Keeps `stream` busy for about `cycles` clock cycles, then writes `value` to [p, p + bytes).
void launch_spin_then_fill(void* p, std::size_t bytes, std::uint32_t value, long long cycles,
                           void* stream);
/// The last launch error as a CUDA error code (0 = none).
int last_launch_error();

}  // namespace vramkit::testing

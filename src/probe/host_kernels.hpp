// The host memory kernels the probe times: streaming read, write, copy, triad and a dependent
// pointer chase. Compiled at -O3 in their own file so the loops vectorise; each works on the range
// it is given and touches nothing else. Thread-safe on disjoint ranges.
#pragma once

#include <cstddef>
#include <cstdint>

namespace vramkit::probe::detail {

/// Sum of b[0..n) (wrapping): reads n * 8 bytes.
std::uint64_t kernel_read(const std::uint64_t* b, std::size_t n) noexcept;
/// a[i] = value for i in [0, n): writes n * 8 bytes.
void kernel_write(std::uint64_t* a, std::size_t n, std::uint64_t value) noexcept;
/// a[i] = b[i]: reads and writes n * 8 bytes each.
void kernel_copy(std::uint64_t* __restrict a, const std::uint64_t* __restrict b,
                 std::size_t n) noexcept;
/// a[i] = b[i] + k * c[i] (wrapping): reads 2 n * 8 bytes, writes n * 8.
void kernel_triad(std::uint64_t* __restrict a, const std::uint64_t* __restrict b,
                  const std::uint64_t* __restrict c, std::uint64_t k, std::size_t n) noexcept;
/// Follows `loads` dependent pointers from `start` (each slot holds the address of the next) and
/// returns where it stopped.
const void* kernel_chase(const void* start, std::size_t loads) noexcept;

}  // namespace vramkit::probe::detail

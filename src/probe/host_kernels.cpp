// Host memory kernels (see host_kernels.hpp). Plain loops the compiler vectorises; no intrinsics,
// so they build for any target and match what a STREAM-style loop measures.
#include "host_kernels.hpp"

namespace vramkit::probe::detail {

std::uint64_t kernel_read(const std::uint64_t* b, std::size_t n) noexcept {
  // Integer addition is associative, so the compiler may split the sum over vector lanes.
  std::uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  std::size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    s0 += b[i];
    s1 += b[i + 1];
    s2 += b[i + 2];
    s3 += b[i + 3];
  }
  for (; i < n; ++i) s0 += b[i];
  return s0 + s1 + s2 + s3;
}

void kernel_write(std::uint64_t* a, std::size_t n, std::uint64_t value) noexcept {
  for (std::size_t i = 0; i < n; ++i) a[i] = value;
}

void kernel_copy(std::uint64_t* __restrict a, const std::uint64_t* __restrict b,
                 std::size_t n) noexcept {
  for (std::size_t i = 0; i < n; ++i) a[i] = b[i];
}

void kernel_triad(std::uint64_t* __restrict a, const std::uint64_t* __restrict b,
                  const std::uint64_t* __restrict c, std::uint64_t k, std::size_t n) noexcept {
  for (std::size_t i = 0; i < n; ++i) a[i] = b[i] + k * c[i];
}

const void* kernel_chase(const void* start, std::size_t loads) noexcept {
  const void* const* p = static_cast<const void* const*>(start);
  std::size_t i = 0;
  // Unrolled by 8: the loads stay dependent, the loop overhead shrinks.
  for (; i + 8 <= loads; i += 8) {
    p = static_cast<const void* const*>(*p);
    p = static_cast<const void* const*>(*p);
    p = static_cast<const void* const*>(*p);
    p = static_cast<const void* const*>(*p);
    p = static_cast<const void* const*>(*p);
    p = static_cast<const void* const*>(*p);
    p = static_cast<const void* const*>(*p);
    p = static_cast<const void* const*>(*p);
  }
  for (; i < loads; ++i) p = static_cast<const void* const*>(*p);
  return p;
}

}  // namespace vramkit::probe::detail

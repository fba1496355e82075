// The probe's 16-byte device memory accesses with their cache hints (load16, store16) and the
// copy step built on them (copy_group: every load issued before the first store), shared by the
// probe's copy kernels and the copy-shape study in bench/probe/copy_shapes.cu. Device code only
// (include from .cu files); no state.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace vramkit::probe::detail {

/// Cache = 0: read-only-path loads and plain stores; 1: streaming (evict-first, ld/st.global.cs);
/// 2 and 3: read-only loads that skip L1 and prefetch 256 bytes into L2, with plain (2) or
/// evict-first (3) stores. The values are those of cache_hint (probe_kernels.hpp).
template <int Cache>
__device__ __forceinline__ uint4 load16(const uint4* p) {
  if constexpr (Cache == 1) {
    return __ldcs(p);
  } else if constexpr (Cache == 2 || Cache == 3) {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
  } else {
    return __ldg(p);
  }
}

template <int Cache>
__device__ __forceinline__ void store16(uint4* p, uint4 v) {
  if constexpr (Cache == 1 || Cache == 3)
    __stcs(p, v);
  else
    *p = v;
}

// Unroll vectors `step` apart from `i`: every load issued before the first store.
template <int Cache, int Unroll>
__device__ __forceinline__ void copy_group(uint4* __restrict__ dst, const uint4* __restrict__ src,
                                           std::size_t i, std::size_t step) {
  uint4 v[Unroll];
#pragma unroll
  for (int u = 0; u < Unroll; ++u) v[u] = load16<Cache>(src + i + u * step);
#pragma unroll
  for (int u = 0; u < Unroll; ++u) store16<Cache>(dst + i + u * step, v[u]);
}

}  // namespace vramkit::probe::detail

// Host-side launchers of the GPU probe's kernels (device bandwidth, verification, stream blocking,
// pointer chase). Internal to the probe; every launcher
// enqueues on `stream` and returns the launch status without synchronising.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "chase_order.hpp"
#include "pattern.hpp"

namespace vramkit::probe::detail {

/// Cache hints of a bandwidth kernel's 16-byte accesses.
enum class cache_hint : int {
  normal = 0,     ///< plain loads (read-only path) and stores
  streaming = 1,  ///< evict-first loads and stores (ld.global.cs / st.global.cs)
  prefetch = 2,   ///< read-only loads that skip L1 and prefetch 256 bytes into L2; plain stores
  prefetch_streaming = 3,  ///< the prefetching loads with evict-first stores
};

/// How a bandwidth kernel is launched: `blocks` x `threads`; `chunked` gives every block one
/// contiguous range instead of a grid-wide stride (with blocks = vectors / (threads x unroll)
/// that is one pass: every thread makes exactly `unroll` accesses); `unroll` is 4 or 8
/// independent 16-byte accesses in flight per thread (reads and copies; writes use 4; copies
/// also take 3).
struct launch_config {
  int blocks = 0;
  int threads = 256;
  cache_hint cache = cache_hint::normal;
  bool chunked = false;
  int unroll = 4;
  /// Copies only, compute capability 9.0 and later: when non-zero, every block moves chunks of
  /// this many bytes with bulk asynchronous copies (global -> shared -> global, the tensor memory
  /// accelerator) instead of 16-byte loads and stores; `threads` is then 32 and `unroll` the
  /// number of shared-memory buffers (1, or 2 to load the next chunk while storing this one).
  int bulk_bytes = 0;
  /// Copies only: bytes of dynamic shared memory every block reserves and never touches. It caps
  /// how many blocks share one multiprocessor (more than half its shared memory: one block), and
  /// with it the bytes in flight per multiprocessor and the number of address streams the memory
  /// controllers see at once.
  int smem_reserve = 0;
};

/// Writes the pattern into `p` (device or mapped host memory); also the "write" bandwidth kernel.
cudaError_t launch_fill(std::uint32_t* p, std::size_t n_words, std::uint32_t seed,
                        const launch_config& cfg, cudaStream_t stream);

/// Adds the sum (mod 2^32) of the words of `p` to `*sum`: the "read" bandwidth kernel.
cudaError_t launch_read(const std::uint32_t* p, std::size_t n_words, std::uint32_t* sum,
                        const launch_config& cfg, cudaStream_t stream);

/// Copies `n_words` words from `src` to `dst`: the "copy" bandwidth kernel.
cudaError_t launch_copy(std::uint32_t* dst, const std::uint32_t* src, std::size_t n_words,
                        const launch_config& cfg, cudaStream_t stream);

/// Adds the number of words of `p` that differ from the pattern to `*count`.
cudaError_t launch_count_mismatches(const std::uint32_t* p, std::size_t n_words, std::uint32_t seed,
                                    unsigned long long* count, cudaStream_t stream);

/// Holds `stream` until `*flag` (mapped pinned memory) turns non-zero, or `timeout_ns` passes,
/// in which case it sets `*timed_out`. Keeps launch overhead out of timed intervals.
cudaError_t launch_spin(const volatile int* flag, std::uint64_t timeout_ns, int* timed_out,
                        cudaStream_t stream);

/// Links the lines of `base` (lines of `stride_bytes`) into the cycle of `layout`, whose arrays
/// must be readable by the device: line visit(t) holds the address of line visit(t + 1).
cudaError_t launch_chase_build(std::uint64_t* base, std::uint64_t stride_bytes,
                               const chase_layout& layout, cudaStream_t stream);

/// One thread follows the chain from `start`: `warm` loads untimed, then `steps` loads timed on
/// the device. out[0] = final address, out[1] = elapsed ns (globaltimer), out[2] = SM cycles.
cudaError_t launch_chase(const std::uint64_t* start, std::uint64_t warm, std::uint64_t steps,
                         std::uint64_t* out, cudaStream_t stream);

}  // namespace vramkit::probe::detail

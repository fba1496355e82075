// pool_layout: a caching pool's segments and the blocks that tile them at one moment, and their
// rendering as the JSON of PyTorch's torch.cuda.memory._snapshot() (segments with blocks, device
// traces), which torch.cuda._memory_viz draws. Plain data; the pools fill it under their lock.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "vramkit/mr/tracing_adaptor.hpp"

namespace vramkit::mr {

/// One block of a segment: handed out (`allocated`) or free and cached.
struct pool_block_info {
  std::uintptr_t address = 0;
  std::size_t size = 0;             ///< bytes of the block (after rounding)
  std::size_t requested_bytes = 0;  ///< what the caller asked for (allocated blocks; else 0)
  bool allocated = false;
};

/// A contiguous range of memory the pool holds (a chunk, or a run of mapped granules); its blocks
/// tile it in address order, so their sizes add up to `size`.
struct pool_segment_info {
  std::uintptr_t address = 0;
  std::size_t size = 0;
  bool small = false;       ///< from the pool of small requests
  bool expandable = false;  ///< grows in place (virtual-memory pools)
  std::vector<pool_block_info> blocks;
};

/// torch.cuda.memory._snapshot()'s structure as JSON for `device`: "segments" (device, address,
/// total_size, allocated_size, active_size, requested_size, stream, segment_type, segment_pool_id,
/// is_expandable, frames, blocks with address, size, requested_size, state, frames),
/// "device_traces" (device_count lists; `device`'s holds alloc / free_requested / free_completed
/// entries with addr, size, stream, time_us, frames from `events` when given, time_us counting
/// from the tracer's start) and "allocator_settings".
[[nodiscard]] std::string torch_snapshot_json(const std::vector<pool_segment_info>& segments,
                                              int device, int device_count,
                                              const std::vector<traced_event>* events);

}  // namespace vramkit::mr

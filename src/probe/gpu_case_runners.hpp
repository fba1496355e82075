// The runners of the GPU probe's cases (gpu_cases.hpp), one per group of figures measured together.
// Declared without CUDA types so the case table compiles in every build; defined under cuda/.
#pragma once

namespace vramkit::probe::detail {

struct gpu_context;

void run_device_section(gpu_context& ctx);      // device.read/write/copy/memcpy
void run_transfers_pinned(gpu_context& ctx);    // h2d/d2h/bidir from pinned memory, with sweeps
void run_transfers_pageable(gpu_context& ctx);  // the same from pageable memory
void run_zerocopy_section(gpu_context& ctx);
void run_managed_section(gpu_context& ctx);
void run_p2p_from(gpu_context& ctx);  // this GPU to every peer
void run_latency_section(gpu_context& ctx);
void run_zerocopy_latency(gpu_context& ctx);
void run_alloc_section(gpu_context& ctx);
void run_overlap_section(gpu_context& ctx);
void run_pattern_section(gpu_context& ctx);
void run_cache_section(gpu_context& ctx);
void run_numa_transfers(gpu_context& ctx);    // pinned H2D/D2H from memory on each NUMA node
void run_all_gpus_section(gpu_context& ctx);  // every GPU copying at once (scope all_gpus)

}  // namespace vramkit::probe::detail

// The GPU case table (see gpu_cases.hpp).
#include "gpu_cases.hpp"

#include <algorithm>

#include "gpu_case_runners.hpp"
#include "vramkit/config.hpp"
#include "vramkit/core/error.hpp"
#include "vramkit/probe/gpu_probe.hpp"
#include "vramkit/probe/verdict.hpp"

namespace vramkit::probe::detail {

// Without CUDA the table is the same, only nothing can run.
#if VRAMKIT_HAVE_CUDA
#define VRAMKIT_RUNNER(fn) &fn
#else
#define VRAMKIT_RUNNER(fn) nullptr
#endif

namespace {

// Device memory read, write and copy kernels, cudaMemcpy D2D (section "device").
void add_device_cases(std::vector<probe_case>& c) {
  c.push_back({"gpu{N}.device.read", "device",
               "kernel reading device memory with 16-byte loads (bytes read)",
               VRAMKIT_RUNNER(run_device_section)});
  c.push_back({"gpu{N}.device.write", "device",
               "kernel writing device memory with 16-byte stores (bytes written)",
               VRAMKIT_RUNNER(run_device_section)});
  c.push_back({"gpu{N}.device.copy", "device",
               "kernel copying device memory (read + written; copied once in extra)",
               VRAMKIT_RUNNER(run_device_section)});
  c.push_back({"gpu{N}.device.memcpy", "device",
               "cudaMemcpy device-to-device (copied once; read + written in extra)",
               VRAMKIT_RUNNER(run_device_section)});
}

// Host<->device copies, pinned and pageable, and their size sweeps (section "h2d").
void add_transfer_cases(std::vector<probe_case>& c) {
  c.push_back({"gpu{N}.h2d.pinned", "h2d",
               "host-to-device cudaMemcpyAsync from pinned memory, largest size",
               VRAMKIT_RUNNER(run_transfers_pinned)});
  c.push_back({"gpu{N}.d2h.pinned", "h2d",
               "device-to-host cudaMemcpyAsync to pinned memory, largest size",
               VRAMKIT_RUNNER(run_transfers_pinned)});
  c.push_back({"gpu{N}.bidir.pinned", "h2d",
               "H2D and D2H at once on two streams, pinned, both directions summed",
               VRAMKIT_RUNNER(run_transfers_pinned)});
  c.push_back({"gpu{N}.h2d.pageable", "h2d",
               "host-to-device copy from pageable (malloc'd) memory, largest size",
               VRAMKIT_RUNNER(run_transfers_pageable)});
  c.push_back({"gpu{N}.d2h.pageable", "h2d",
               "device-to-host copy to pageable (malloc'd) memory, largest size",
               VRAMKIT_RUNNER(run_transfers_pageable)});
  c.push_back({"gpu{N}.bidir.pageable", "h2d",
               "H2D and D2H at once from two host threads, pageable, summed",
               VRAMKIT_RUNNER(run_transfers_pageable)});
  c.push_back({"gpu{N}.h2d.pinned.sweep", "h2d", "curve: pinned H2D bandwidth over transfer size",
               VRAMKIT_RUNNER(run_transfers_pinned)});
  c.push_back({"gpu{N}.d2h.pinned.sweep", "h2d", "curve: pinned D2H bandwidth over transfer size",
               VRAMKIT_RUNNER(run_transfers_pinned)});
  c.push_back({"gpu{N}.bidir.pinned.sweep", "h2d",
               "curve: pinned bidirectional bandwidth over transfer size",
               VRAMKIT_RUNNER(run_transfers_pinned)});
  c.push_back({"gpu{N}.h2d.pageable.sweep", "h2d",
               "curve: pageable H2D bandwidth over transfer size",
               VRAMKIT_RUNNER(run_transfers_pageable)});
  c.push_back({"gpu{N}.d2h.pageable.sweep", "h2d",
               "curve: pageable D2H bandwidth over transfer size",
               VRAMKIT_RUNNER(run_transfers_pageable)});
  c.push_back({"gpu{N}.bidir.pageable.sweep", "h2d",
               "curve: pageable bidirectional bandwidth over transfer size",
               VRAMKIT_RUNNER(run_transfers_pageable)});
}

// Kernels on mapped pinned host memory (section "zerocopy").
void add_zerocopy_cases(std::vector<probe_case>& c) {
  c.push_back({"gpu{N}.zerocopy.read", "zerocopy",
               "kernel reading mapped pinned host memory (bytes read)",
               VRAMKIT_RUNNER(run_zerocopy_section)});
  c.push_back({"gpu{N}.zerocopy.write", "zerocopy",
               "kernel writing mapped pinned host memory (bytes written)",
               VRAMKIT_RUNNER(run_zerocopy_section)});
}

// Managed memory: first touch, prefetch, advice (section "managed").
void add_managed_cases(std::vector<probe_case>& c) {
  c.push_back({"gpu{N}.managed.first_touch", "managed",
               "kernel reading managed memory last written by the CPU (faults)",
               VRAMKIT_RUNNER(run_managed_section)});
  c.push_back({"gpu{N}.managed.prefetch", "managed",
               "cudaMemPrefetchAsync of CPU-written managed memory to the GPU",
               VRAMKIT_RUNNER(run_managed_section)});
  c.push_back({"gpu{N}.managed.prefetched_touch", "managed",
               "kernel reading managed memory after the prefetch",
               VRAMKIT_RUNNER(run_managed_section)});
  c.push_back(
      {"gpu{N}.managed.advised_touch", "managed",
       "kernel reading CPU-written managed memory advised preferred-location GPU + accessed-by",
       VRAMKIT_RUNNER(run_managed_section)});
}

// Peer copies between GPUs (section "p2p").
void add_p2p_cases(std::vector<probe_case>& c) {
  c.push_back({"gpu{A}->gpu{B}.p2p.ce.unidir", "p2p", "cudaMemcpyPeerAsync from gpu A to gpu B",
               VRAMKIT_RUNNER(run_p2p_from)});
  c.push_back({"gpu{A}->gpu{B}.p2p.ce.bidir", "p2p",
               "cudaMemcpyPeerAsync A->B and B->A at once, summed", VRAMKIT_RUNNER(run_p2p_from)});
  c.push_back({"gpu{A}->gpu{B}.p2p.sm.unidir", "p2p",
               "copy kernel on gpu A writing into gpu B's memory", VRAMKIT_RUNNER(run_p2p_from)});
  c.push_back({"gpu{A}->gpu{B}.p2p.sm.bidir", "p2p",
               "copy kernels on A and B writing into each other, summed",
               VRAMKIT_RUNNER(run_p2p_from)});
}

// Dependent-load latency (section "gpu-latency").
void add_latency_cases(std::vector<probe_case>& c) {
  c.push_back({"gpu{N}.latency.sweep", "gpu-latency",
               "curve: dependent-load latency over working-set size",
               VRAMKIT_RUNNER(run_latency_section)});
  c.push_back({"gpu{N}.latency.l1", "gpu-latency", "load latency with the working set in L1",
               VRAMKIT_RUNNER(run_latency_section)});
  c.push_back({"gpu{N}.latency.l2", "gpu-latency", "load latency with the working set in L2",
               VRAMKIT_RUNNER(run_latency_section)});
  c.push_back({"gpu{N}.latency.hbm", "gpu-latency",
               "load latency with the working set in device memory (first set >= 4x L2)",
               VRAMKIT_RUNNER(run_latency_section)});
  c.push_back({"gpu{N}.latency.zerocopy", "gpu-latency",
               "load latency from the GPU to mapped pinned host memory",
               VRAMKIT_RUNNER(run_zerocopy_latency)});
}

// Allocation calls (section "alloc").
void add_alloc_cases(std::vector<probe_case>& c) {
  c.push_back({"gpu{N}.alloc.cuda_malloc", "alloc", "cudaMalloc per call over a random size trace",
               VRAMKIT_RUNNER(run_alloc_section)});
  c.push_back({"gpu{N}.alloc.cuda_free", "alloc", "cudaFree per call over the same trace",
               VRAMKIT_RUNNER(run_alloc_section)});
  c.push_back({"gpu{N}.alloc.malloc_async", "alloc", "cudaMallocAsync per call from a warm pool",
               VRAMKIT_RUNNER(run_alloc_section)});
  c.push_back({"gpu{N}.alloc.free_async", "alloc", "cudaFreeAsync per call into the warm pool",
               VRAMKIT_RUNNER(run_alloc_section)});
}

// Copy/compute overlap (section "overlap").
void add_overlap_cases(std::vector<probe_case>& c) {
  c.push_back({"gpu{N}.overlap", "overlap",
               "serial time / concurrent time of a kernel, an H2D and a D2H copy",
               VRAMKIT_RUNNER(run_overlap_section)});
}

// Access patterns, as ratios to the unit-stride read or write (section "patterns").
void add_pattern_cases(std::vector<probe_case>& c) {
  c.push_back({"gpu{N}.pattern.read.unit", "patterns",
               "unit-stride read (16-byte loads), GB/s: the base every read pattern is a ratio of",
               VRAMKIT_RUNNER(run_pattern_section)});
  c.push_back(
      {"gpu{N}.pattern.read.stride{S}.e{E}", "patterns",
       "read of E-byte elements (4, 8, 16) S elements apart (1-64), ratio to the unit-stride read",
       VRAMKIT_RUNNER(run_pattern_section)});
  c.push_back({"gpu{N}.pattern.read.stride.e{E}", "patterns",
               "curve: read ratio to unit stride over the stride, E-byte elements",
               VRAMKIT_RUNNER(run_pattern_section)});
  c.push_back({"gpu{N}.pattern.read.misaligned", "patterns",
               "curve: 4-byte reads with every warp offset by 1-31 elements, ratio to unit stride",
               VRAMKIT_RUNNER(run_pattern_section)});
  c.push_back({"gpu{N}.pattern.read.misaligned.worst", "patterns",
               "the lowest ratio of the misaligned reads (its offset in extra)",
               VRAMKIT_RUNNER(run_pattern_section)});
  c.push_back(
      {"gpu{N}.pattern.read.gather.uniform", "patterns",
       "4-byte gather through an index array, uniform over the buffer, ratio to unit stride",
       VRAMKIT_RUNNER(run_pattern_section)});
  c.push_back(
      {"gpu{N}.pattern.read.gather.l2_window", "patterns",
       "4-byte gather through an index array within a window of half the L2, ratio to unit stride",
       VRAMKIT_RUNNER(run_pattern_section)});
  c.push_back(
      {"gpu{N}.pattern.write.unit", "patterns",
       "unit-stride write (16-byte stores), GB/s: the base every write pattern is a ratio of",
       VRAMKIT_RUNNER(run_pattern_section)});
  c.push_back({"gpu{N}.pattern.write.stride{S}.e{E}", "patterns",
               "write of E-byte elements S elements apart, ratio to the unit-stride write",
               VRAMKIT_RUNNER(run_pattern_section)});
  c.push_back({"gpu{N}.pattern.write.stride.e{E}", "patterns",
               "curve: write ratio to unit stride over the stride, E-byte elements",
               VRAMKIT_RUNNER(run_pattern_section)});
  c.push_back({"gpu{N}.pattern.write.misaligned", "patterns",
               "curve: 4-byte writes with every warp offset by 1-31 elements, ratio to unit stride",
               VRAMKIT_RUNNER(run_pattern_section)});
  c.push_back({"gpu{N}.pattern.write.misaligned.worst", "patterns",
               "the lowest ratio of the misaligned writes (its offset in extra)",
               VRAMKIT_RUNNER(run_pattern_section)});
  c.push_back(
      {"gpu{N}.pattern.write.scatter.uniform", "patterns",
       "4-byte scatter through an index array, uniform over the buffer, ratio to unit stride",
       VRAMKIT_RUNNER(run_pattern_section)});
  c.push_back({"gpu{N}.pattern.write.scatter.l2_window", "patterns",
               "4-byte scatter through an index array within half the L2, ratio to unit stride",
               VRAMKIT_RUNNER(run_pattern_section)});
}

// Cache levels from resident-set sweeps (section "gpu-cache").
void add_cache_cases(std::vector<probe_case>& c) {
  c.push_back({"gpu{N}.cache.sweep", "gpu-cache",
               "curve: read bandwidth over a resident working set, 16 KiB to half the L2, one "
               "block per multiprocessor reading all of it through L1",
               VRAMKIT_RUNNER(run_cache_section)});
  c.push_back({"gpu{N}.cache.l2_sweep", "gpu-cache",
               "curve: read bandwidth over a resident working set, L2/8 to 4x L2, the grid "
               "reading it once a pass with L1 bypassed",
               VRAMKIT_RUNNER(run_cache_section)});
  c.push_back({"gpu{N}.cache.l1", "gpu-cache",
               "read bandwidth on the L1/shared plateau (its size in extra)",
               VRAMKIT_RUNNER(run_cache_section)});
  c.push_back({"gpu{N}.cache.l2", "gpu-cache",
               "read bandwidth on the L2 plateau, with the working set where it ends",
               VRAMKIT_RUNNER(run_cache_section)});
  c.push_back({"gpu{N}.cache.hbm", "gpu-cache",
               "read bandwidth past the L2 (working sets in device memory)",
               VRAMKIT_RUNNER(run_cache_section)});
}

// Host memory per NUMA node (section "h2d-numa").
void add_numa_cases(std::vector<probe_case>& c) {
  c.push_back(
      {"gpu{N}.h2d.pinned.numa{M}", "h2d-numa",
       "host-to-device from pinned memory bound to NUMA node M (hwloc; memory-only nodes too)",
       VRAMKIT_RUNNER(run_numa_transfers)});
  c.push_back({"gpu{N}.d2h.pinned.numa{M}", "h2d-numa",
               "device-to-host into pinned memory bound to NUMA node M",
               VRAMKIT_RUNNER(run_numa_transfers)});
}

// Every GPU at once (section "all-gpus").
void add_all_gpu_cases(std::vector<probe_case>& c) {
  c.push_back(
      {"gpus.h2d.all_at_once", "all-gpus",
       "H2D on every GPU at the same time, summed (per GPU and alone in extra; one GPU: says so)",
       VRAMKIT_RUNNER(run_all_gpus_section), case_scope::all_gpus});
  c.push_back(
      {"gpus.d2h.all_at_once", "all-gpus",
       "D2H on every GPU at the same time, summed (per GPU and alone in extra; one GPU: says so)",
       VRAMKIT_RUNNER(run_all_gpus_section), case_scope::all_gpus});
}

}  // namespace

const std::vector<probe_case>& gpu_cases() {
  static const std::vector<probe_case> cases = [] {
    std::vector<probe_case> c;
    add_device_cases(c);
    add_transfer_cases(c);
    add_zerocopy_cases(c);
    add_managed_cases(c);
    add_p2p_cases(c);
    add_latency_cases(c);
    add_alloc_cases(c);
    add_overlap_cases(c);
    add_pattern_cases(c);
    add_cache_cases(c);
    add_numa_cases(c);
    add_all_gpu_cases(c);
    return c;
  }();
  return cases;
}

#undef VRAMKIT_RUNNER

std::vector<std::string> gpu_sections() {
  std::vector<std::string> out = {"gpu"};
  for (const auto& c : gpu_cases()) {
    if (std::find(out.begin(), out.end(), c.section) == out.end()) out.emplace_back(c.section);
  }
  return out;
}

bool wants_gpu_section(const probe_options& options, const std::string& section) {
  return options.only.empty() || options.only.count("gpu") > 0 || options.only.count(section) > 0;
}

bool wants_any_gpu_section(const probe_options& options) {
  const auto sections = gpu_sections();
  return std::any_of(sections.begin(), sections.end(),
                     [&](const std::string& s) { return wants_gpu_section(options, s); });
}

const probe_case* find_gpu_case(const std::string& key) {
  for (const auto& c : gpu_cases()) {
    if (key_matches(c.key, key)) return &c;
  }
  return nullptr;
}

const std::string& registered_key(const std::string& key) {
  if (find_gpu_case(key) == nullptr) {
    throw logic_error("GPU probe key '" + key + "' is not in the case table (gpu_cases.cpp)");
  }
  return key;
}

}  // namespace vramkit::probe::detail

namespace vramkit::probe {

std::vector<std::pair<std::string, std::string>> gpu_probe_keys() {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& c : detail::gpu_cases()) out.emplace_back(c.key, c.description);
  return out;
}

std::vector<std::string> gpu_probe_sections() { return detail::gpu_sections(); }

}  // namespace vramkit::probe

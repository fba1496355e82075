// The GPU probe's stable keys and section names, shared by the CUDA and the CPU-only build so that
// `vramkit probe --list` shows the same keys everywhere. Header-only; no state.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "vramkit/probe/measurement.hpp"

namespace vramkit::probe::detail {

/// Every key the GPU sections can produce, with a one-line description.
inline std::vector<std::pair<std::string, std::string>> gpu_keys_table() {
  return {
      {"gpu{N}.device.read", "kernel reading device memory with 16-byte loads (bytes read)"},
      {"gpu{N}.device.write", "kernel writing device memory with 16-byte stores (bytes written)"},
      {"gpu{N}.device.copy", "kernel copying device memory (read + written; copied once in extra)"},
      {"gpu{N}.device.memcpy",
       "cudaMemcpy device-to-device (copied once; read + written in extra)"},
      {"gpu{N}.h2d.pinned", "host-to-device cudaMemcpyAsync from pinned memory, largest size"},
      {"gpu{N}.d2h.pinned", "device-to-host cudaMemcpyAsync to pinned memory, largest size"},
      {"gpu{N}.bidir.pinned", "H2D and D2H at once on two streams, pinned, both directions summed"},
      {"gpu{N}.h2d.pageable", "host-to-device copy from pageable (malloc'd) memory, largest size"},
      {"gpu{N}.d2h.pageable", "device-to-host copy to pageable (malloc'd) memory, largest size"},
      {"gpu{N}.bidir.pageable", "H2D and D2H at once from two host threads, pageable, summed"},
      {"gpu{N}.h2d.pinned.sweep", "curve: pinned H2D bandwidth over transfer size"},
      {"gpu{N}.d2h.pinned.sweep", "curve: pinned D2H bandwidth over transfer size"},
      {"gpu{N}.bidir.pinned.sweep", "curve: pinned bidirectional bandwidth over transfer size"},
      {"gpu{N}.h2d.pageable.sweep", "curve: pageable H2D bandwidth over transfer size"},
      {"gpu{N}.d2h.pageable.sweep", "curve: pageable D2H bandwidth over transfer size"},
      {"gpu{N}.bidir.pageable.sweep", "curve: pageable bidirectional bandwidth over transfer size"},
      {"gpu{N}.zerocopy.read", "kernel reading mapped pinned host memory (bytes read)"},
      {"gpu{N}.zerocopy.write", "kernel writing mapped pinned host memory (bytes written)"},
      {"gpu{N}.managed.first_touch",
       "kernel reading managed memory last written by the CPU (faults)"},
      {"gpu{N}.managed.prefetch", "cudaMemPrefetchAsync of CPU-written managed memory to the GPU"},
      {"gpu{N}.managed.prefetched_touch", "kernel reading managed memory after the prefetch"},
      {"gpu{N}.managed.advised_touch",
       "kernel reading CPU-written managed memory advised preferred-location GPU + accessed-by"},
      {"gpu{A}->gpu{B}.p2p.ce.unidir", "cudaMemcpyPeerAsync from gpu A to gpu B"},
      {"gpu{A}->gpu{B}.p2p.ce.bidir", "cudaMemcpyPeerAsync A->B and B->A at once, summed"},
      {"gpu{A}->gpu{B}.p2p.sm.unidir", "copy kernel on gpu A writing into gpu B's memory"},
      {"gpu{A}->gpu{B}.p2p.sm.bidir", "copy kernels on A and B writing into each other, summed"},
      {"gpu{N}.latency.sweep", "curve: dependent-load latency over working-set size"},
      {"gpu{N}.latency.l1", "load latency with the working set in L1"},
      {"gpu{N}.latency.l2", "load latency with the working set in L2"},
      {"gpu{N}.latency.hbm",
       "load latency with the working set in device memory (first set >= 4x L2)"},
      {"gpu{N}.latency.zerocopy", "load latency from the GPU to mapped pinned host memory"},
      {"gpu{N}.alloc.cuda_malloc", "cudaMalloc per call over a random size trace"},
      {"gpu{N}.alloc.cuda_free", "cudaFree per call over the same trace"},
      {"gpu{N}.alloc.malloc_async", "cudaMallocAsync per call from a warm pool"},
      {"gpu{N}.alloc.free_async", "cudaFreeAsync per call into the warm pool"},
      {"gpu{N}.overlap", "serial time / concurrent time of a kernel, an H2D and a D2H copy"},
  };
}

/// The --only names the GPU probe understands.
inline std::vector<std::string> gpu_sections_table() {
  return {"gpu", "device", "h2d", "zerocopy", "managed", "p2p", "gpu-latency", "alloc", "overlap"};
}

/// True when `options` selects GPU section `section` ("gpu" selects all of them).
inline bool wants_gpu_section(const probe_options& options, const std::string& section) {
  return options.only.empty() || options.only.count("gpu") > 0 || options.only.count(section) > 0;
}

/// True when `options` selects at least one GPU section.
inline bool wants_any_gpu_section(const probe_options& options) {
  for (const auto& s : gpu_sections_table()) {
    if (wants_gpu_section(options, s)) return true;
  }
  return false;
}

}  // namespace vramkit::probe::detail

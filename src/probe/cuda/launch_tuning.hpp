// How the GPU probe picks a launch shape for a bandwidth kernel: a short event-timed trial of many
// shapes (occupancy, unroll, cache hint, layout, bulk copies), each verified, then the fastest few
// again; plus the notes and extra fields that record the chosen shape. Internal; not thread-safe.
#pragma once

#include <cuda_runtime.h>

#include <functional>
#include <map>
#include <string>

#include "gpu_probe_detail.hpp"

namespace vramkit::probe::detail {

/// "1056 blocks x 256 threads, unroll 4, grid-stride": the shape in words, for a note.
std::string cfg_note(const launch_config& c);

/// Records the shape in `m.extra` (blocks, threads_per_block, unroll, cache_hint, ...).
void put_cfg(measurement& m, const launch_config& c);

// What a launch-shape trial found, for the record: the chosen shape and the best rate each family
// of shapes reached (so a report shows how far the alternatives were).
struct tune_result {
  launch_config best;
  int tried = 0, rejected = 0;
  std::map<std::string, double> family_best_ms;
};

/// Picks the fastest verified shape for `n_vec` 16-byte vectors; `kind` 0 read, 1 write, 2 copy.
/// Before each candidate `prepare` resets the output, after it `check(runs)` must confirm the
/// result: a shape that fails to launch or to produce the right data is never chosen.
tune_result tune(const gpu_context& ctx, cudaStream_t stream, std::size_t n_vec, bool vary_unroll,
                 int kind, const std::function<void()>& prepare,
                 const std::function<void(const launch_config&)>& run,
                 const std::function<bool(int runs)>& check);

/// The best rate each family of shapes reached, in `m.extra` (trial_best_gbps_<family>).
void put_trial(measurement& m, const tune_result& t, double bytes_per_op);

}  // namespace vramkit::probe::detail

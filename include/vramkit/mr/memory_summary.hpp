// memory_summary: a readable report of a resource stack in the spirit of
// torch.cuda.memory_summary(), and the figures each resource contributes to it. memory_summary()
// walks from the given resource down its upstream() chain, asking each for describe(). The
// functions are thread-safe when the resources are (every vramkit resource is).
#pragma once

#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "vramkit/mr/memory_resource.hpp"

namespace vramkit::mr {

/// A usage figure with its high-water mark and running totals (PyTorch's current / peak /
/// allocated / freed). Not thread-safe; owners guard it.
struct usage_counter {
  std::int64_t current = 0;
  std::int64_t peak = 0;
  std::int64_t total_in = 0;   ///< everything ever added ("Tot Alloc")
  std::int64_t total_out = 0;  ///< everything ever removed ("Tot Freed")

  void add(std::int64_t n) noexcept {
    current += n;
    total_in += n;
    if (current > peak) peak = current;
  }
  void remove(std::int64_t n) noexcept {
    current -= n;
    total_out += n;
  }
  void reset_peak() noexcept { peak = current; }
};

/// A counter split by size class: small (<= 1 MiB requests by default) and large.
struct class_counter {
  usage_counter small;
  usage_counter large;
  usage_counter all;  ///< kept alongside, since peaks do not add up

  void add(bool is_small, std::int64_t n) noexcept {
    (is_small ? small : large).add(n);
    all.add(n);
  }
  void remove(bool is_small, std::int64_t n) noexcept {
    (is_small ? small : large).remove(n);
    all.remove(n);
  }
  void reset_peak() noexcept {
    small.reset_peak();
    large.reset_peak();
    all.reset_peak();
  }
};

/// What a caching pool reports (pool_resource, pinned_host_pool).
struct pool_report {
  std::string resource;
  class_counter allocated_bytes;  ///< bytes of blocks handed out (after rounding)
  class_counter requested_bytes;  ///< bytes callers asked for
  class_counter allocations;      ///< live blocks handed out
  class_counter reserved_bytes;   ///< bytes held from the upstream
  class_counter chunks;           ///< upstream allocations held
  std::size_t free_bytes = 0;     ///< reserved but not handed out
  std::size_t largest_free_block = 0;
  std::size_t free_blocks = 0;
  std::uint64_t out_of_memory_errors = 0;
  std::uint64_t upstream_allocations = 0;
  std::uint64_t upstream_frees = 0;
  std::uint64_t upstream_failures =
      0;  ///< upstream OOMs answered by a trim and a retry or an error
  std::uint64_t cross_stream_waits = 0;  ///< blocks taken from another stream after an event wait
  std::uint64_t trims = 0;
  std::uint64_t misuse_reports = 0;  ///< foreign pointers and wrong sizes seen by deallocate
  std::size_t streams = 0;
  /// Virtual-memory pools only (vmm_pool_resource): mapping work, all of it off the fast path.
  struct vmm_figures {
    bool present = false;                 ///< the pool maps physical memory itself
    std::size_t granularity = 0;          ///< bytes per granule
    std::size_t cached_bytes = 0;         ///< physical memory held unmapped, ready to map anywhere
    std::uint64_t granules_mapped = 0;    ///< map_physical calls (growth and remaps)
    std::uint64_t granules_unmapped = 0;  ///< granules unmapped from free space (defrag, trim)
    std::uint64_t granules_remapped = 0;  ///< unmapped granules mapped again elsewhere
    std::uint64_t physical_creates = 0;
    std::uint64_t physical_releases = 0;
    std::uint64_t defragmentations = 0;  ///< growths met (partly) by unmapping free space
    std::uint64_t map_ns = 0;            ///< host time in map_physical and set_access
    std::uint64_t unmap_ns = 0;          ///< host time in unmap and release_physical
    std::uint64_t growth_syncs = 0;      ///< device synchronizations before a remap (frees pending)
    std::uint64_t growth_sync_ns = 0;    ///< host time in them
  } vmm;

  /// Restarts every peak at its current value (the counters of reset_peak_stats).
  void reset_peaks() noexcept {
    allocated_bytes.reset_peak();
    requested_bytes.reset_peak();
    allocations.reset_peak();
    reserved_bytes.reset_peak();
    chunks.reset_peak();
  }
};

/// What statistics_adaptor reports.
struct statistics_report {
  std::string resource;
  class_counter bytes;        ///< requested bytes
  class_counter allocations;  ///< live allocations
  std::uint64_t failed_allocations = 0;
};

/// What limit_adaptor reports.
struct limit_report {
  std::string resource;
  std::size_t limit_bytes = 0;
  std::size_t used_bytes = 0;
  std::size_t peak_bytes = 0;
  std::uint64_t rejections = 0;
};

/// What an upstream with a cache of its own reports (cuda_async_resource: the CUDA pool).
struct upstream_report {
  std::string resource;
  std::size_t reserved_bytes = 0;       ///< held from the device now
  std::size_t reserved_peak_bytes = 0;  ///< high-water mark
  std::size_t used_bytes = 0;           ///< handed out now
};

/// Collects the figures of each resource of a stack, top first: reports of each kind
/// (pool_report, statistics_report, limit_report, upstream_report) in the order added, the layers'
/// names, and free-form notes.
class summary_builder {
 public:
  template <class Report>
  void add(Report report) {
    std::get<std::vector<Report>>(reports_).push_back(std::move(report));
  }
  /// A free-form line under the resource's name (e.g. a tracing adaptor's event count).
  void add_note(std::string resource, std::string line) {
    notes_.push_back(std::move(resource) + ": " + std::move(line));
  }
  void add_layer(std::string name) { layers_.push_back(std::move(name)); }

  /// The reports of one kind, e.g. reports<pool_report>().
  template <class Report>
  [[nodiscard]] const std::vector<Report>& reports() const {
    return std::get<std::vector<Report>>(reports_);
  }
  [[nodiscard]] const std::vector<std::string>& notes() const { return notes_; }
  [[nodiscard]] const std::vector<std::string>& layers() const { return layers_; }

 private:
  std::tuple<std::vector<pool_report>, std::vector<statistics_report>, std::vector<limit_report>,
             std::vector<upstream_report>>
      reports_;
  std::vector<std::string> notes_;
  std::vector<std::string> layers_;
};

/// Walks `top` and its upstreams and collects their figures.
summary_builder collect_summary(const memory_resource& top);

/// The 75-column report of the stack under `top`: per pool allocated / requested / reserved
/// bytes, allocations and chunks (current, peak, total in, total out; all / large / small),
/// largest free block and the two fragmentation figures (reserved / peak allocated, and
/// 1 - largest free / free), then each statistics and limit layer. `title` defaults to
/// "vramkit memory summary".
std::string memory_summary(const memory_resource& top, const std::string& title = {});

/// The same figures as one JSON object (schema_version 1; keys after PyTorch's memory_stats(),
/// e.g. "allocated_bytes.all.peak"), for the C API and scripts.
std::string memory_stats_json(const memory_resource& top);

/// Resets every peak figure of the stack (pools and statistics layers) to its current value.
void reset_peak_stats(memory_resource& top);

}  // namespace vramkit::mr

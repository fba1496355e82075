// stream_pipeline: out-of-core streaming of a dataset far larger than device memory. Chunks flow
// file/host -> ring of pinned staging buffers -> device (copy stream) -> the user's callback
// (compute stream) -> optionally back (device -> pinned -> host array or file), every stage
// overlapping the others, ordered by events. One run() at a time per pipeline (run() is not
// reentrant); the callback runs on the thread that called run().
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "vramkit/core/device_api.hpp"
#include "vramkit/mr/memory_resource.hpp"

namespace vramkit::tier {

/// One chunk on the device, handed to the callback: `data` holds `bytes` bytes of the dataset
/// starting at byte `offset`; it is chunk number `index`. The callback may transform it in place:
/// with an output, the chunk is copied back after the callback's work on the stream.
struct chunk_view {
  void* data = nullptr;
  std::size_t bytes = 0;
  std::size_t index = 0;
  std::size_t offset = 0;
};

/// Called once per chunk, in order, on run()'s thread: enqueue the work on `stream` (a kernel, a
/// host function); do not synchronize. A throw stops the run.
using chunk_callback = std::function<void(chunk_view chunk, stream_view stream)>;

/// Whether host memory handed to the pipeline is ordinary (staged through pinned buffers with a
/// multi-threaded copy) or already page-locked (copied to and from the device directly).
enum class host_memory { pageable, pinned };

/// Where the dataset comes from.
struct pipeline_input {
  enum class kind { host, file };
  kind source = kind::host;
  const void* data = nullptr;
  std::size_t bytes = 0;
  host_memory memory = host_memory::pageable;
  std::string path;
  std::size_t declared_bytes = 0;  ///< for a file: expected size, 0 = the file's size

  /// A host array of `bytes` bytes.
  static pipeline_input from_host(const void* data, std::size_t bytes,
                                  host_memory memory = host_memory::pageable);
  /// A file read by a reader thread with pread; `declared_bytes` (if not 0) must not exceed the
  /// file's size.
  static pipeline_input from_file(std::string path, std::size_t declared_bytes = 0);
};

/// Where results go (optional): the chunks after the callback, at the same offsets.
struct pipeline_output {
  enum class kind { none, host, file };
  kind sink = kind::none;
  void* data = nullptr;
  std::size_t bytes = 0;
  host_memory memory = host_memory::pageable;
  std::string path;

  static pipeline_output none() { return {}; }
  /// A host array at least as large as the input (it may be the input itself: in-place).
  static pipeline_output to_host(void* data, std::size_t bytes,
                                 host_memory memory = host_memory::pageable);
  /// A file, created or truncated, written by a writer thread with pwrite.
  static pipeline_output to_file(std::string path);
};

/// Settings of a pipeline.
struct pipeline_options {
  std::size_t chunk_bytes = std::size_t{64} << 20;  ///< a multiple of element_bytes
  int depth = 2;                  ///< slots in the ring: 1 = serial, 2 = double buffering
  std::size_t element_bytes = 1;  ///< the input must be a whole number of elements
  int staging_threads = 4;  ///< threads copying pageable memory into (and out of) pinned slots
  /// Time each device stage with host functions on its stream (adds a few microseconds a chunk).
  bool measure_stages = true;
};

/// What one stage did: bytes through it, time working, time idle waiting for its input or for a
/// free slot downstream.
struct stage_stats {
  std::uint64_t bytes = 0;
  std::chrono::nanoseconds busy{0};
  std::chrono::nanoseconds stall{0};
};

/// Statistics of one run(). Device stages (h2d, compute, d2h) are timed only with
/// measure_stages; `read` covers pread or staging copies, `write` the output side.
struct pipeline_stats {
  stage_stats read;     ///< file/host -> pinned slot; stall = waiting for a free slot
  stage_stats h2d;      ///< stall = copy stream idle (waiting for read or a free device slot)
  stage_stats compute;  ///< stall = compute stream idle (waiting for copies)
  stage_stats d2h;      ///< stall = idle waiting for compute
  stage_stats write;    ///< pinned slot -> host/file; stall = waiting for results
  std::size_t chunks = 0;
  std::uint64_t bytes = 0;  ///< dataset bytes processed
  std::chrono::nanoseconds elapsed{0};
  /// Dataset bytes per second over the whole run.
  [[nodiscard]] double bytes_per_second() const noexcept {
    return elapsed.count() > 0
               ? static_cast<double>(bytes) * 1e9 / static_cast<double>(elapsed.count())
               : 0.0;
  }
};

/// The streaming pipeline. Device memory (depth x chunk_bytes) comes from `device_memory`, pinned
/// staging (up to 2 x depth x chunk_bytes) from `pinned_memory`; both are kept between runs and
/// released by release_buffers(), by a failed run, and by the destructor. Example:
///   vramkit::tier::stream_pipeline p(api, {.chunk_bytes = 256 << 20, .depth = 3});
///   auto st = p.run(pipeline_input::from_file("data.bin"),
///                   [&](chunk_view c, stream_view s) { launch_sum(c.data, c.bytes, acc, s); });
class stream_pipeline {
 public:
  stream_pipeline(device_api& api, mr::memory_resource& device_memory,
                  mr::memory_resource& pinned_memory, pipeline_options options = {});
  explicit stream_pipeline(device_api& api, pipeline_options options = {});
  ~stream_pipeline();
  stream_pipeline(const stream_pipeline&) = delete;
  stream_pipeline& operator=(const stream_pipeline&) = delete;

  /// Streams `input` through `callback`, copying results to `output` when it is not none; returns
  /// once everything has completed. Throws invalid_input for bad input (truncated file, size not a
  /// whole number of elements, output too small), vramkit::error naming the chunk when the callback
  /// throws (all buffers released, no work left in flight).
  pipeline_stats run(const pipeline_input& input, const chunk_callback& callback,
                     const pipeline_output& output = pipeline_output::none());

  /// Frees the staging and device buffers (they are allocated again by the next run).
  void release_buffers();

  /// The stream the callback's work goes on; the callback receives it too.
  [[nodiscard]] stream_view compute_stream() const noexcept;
  [[nodiscard]] const pipeline_options& options() const noexcept;

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace vramkit::tier

// Shared machinery of the GPU probe sections (internal): RAII owners for CUDA memory, streams and
// events, the stream blocker that keeps launch overhead out of timed intervals, timing loops, the
// per-device context, and helpers that turn timings into measurements. Not thread-safe.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "gpu_case_runners.hpp"
#include "gpu_cases.hpp"
#include "probe_kernels.hpp"
#include "vramkit/probe/measurement.hpp"

namespace vramkit::probe::detail {

/// Device memory on the current device, freed on destruction.
class device_buffer {
 public:
  explicit device_buffer(std::size_t bytes);
  ~device_buffer();
  device_buffer(const device_buffer&) = delete;
  device_buffer& operator=(const device_buffer&) = delete;
  [[nodiscard]] std::uint32_t* words() const { return static_cast<std::uint32_t*>(ptr_); }
  [[nodiscard]] void* get() const { return ptr_; }
  [[nodiscard]] std::size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  std::size_t bytes_ = 0;
};

/// Pinned host memory from cudaHostAlloc (portable, optionally mapped), freed on destruction.
class pinned_buffer {
 public:
  enum class mapping { unmapped, mapped };
  pinned_buffer(std::size_t bytes, mapping m);
  ~pinned_buffer();
  pinned_buffer(const pinned_buffer&) = delete;
  pinned_buffer& operator=(const pinned_buffer&) = delete;
  [[nodiscard]] std::uint32_t* words() const { return static_cast<std::uint32_t*>(ptr_); }
  [[nodiscard]] void* get() const { return ptr_; }
  /// The device's address of a mapped buffer.
  [[nodiscard]] void* device_ptr() const;
  [[nodiscard]] std::size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  std::size_t bytes_ = 0;
};

/// A non-blocking stream of the current device.
class owned_cuda_stream {
 public:
  owned_cuda_stream();
  ~owned_cuda_stream();
  owned_cuda_stream(const owned_cuda_stream&) = delete;
  owned_cuda_stream& operator=(const owned_cuda_stream&) = delete;
  [[nodiscard]] cudaStream_t get() const { return s_; }

 private:
  cudaStream_t s_ = nullptr;
};

/// A timing event of the current device.
class owned_cuda_event {
 public:
  owned_cuda_event();
  ~owned_cuda_event();
  owned_cuda_event(const owned_cuda_event&) = delete;
  owned_cuda_event& operator=(const owned_cuda_event&) = delete;
  [[nodiscard]] cudaEvent_t get() const { return e_; }

 private:
  cudaEvent_t e_ = nullptr;
};

/// Milliseconds between two recorded and completed events.
double elapsed_ms(cudaEvent_t from, cudaEvent_t to);

/// Holds a stream with a spin kernel while work is enqueued behind it, so the timed interval
/// starts with the GPU already fed (nvbandwidth's method). `release` lets it go; `check` throws
/// when the spin kernel gave up waiting (then the enqueue took too long and timings are void).
class stream_blocker {
 public:
  stream_blocker();
  /// Releases a stream still held (after an exception), so queued work can drain.
  ~stream_blocker();
  stream_blocker(const stream_blocker&) = delete;
  stream_blocker& operator=(const stream_blocker&) = delete;
  void block(cudaStream_t stream);
  void release();
  void check();

 private:
  pinned_buffer flags_;  // [0] = go flag, [1] = timed-out flag
};

/// One probe's view of one device.
struct gpu_context {
  int ordinal = 0;
  int device_count = 1;  ///< CUDA devices in this process
  std::string tag;       ///< "gpu0"
  std::string name;
  int sm_count = 0;
  int cc_major = 0;
  int max_threads_per_sm = 2048;
  int smem_per_sm = 0;           ///< shared memory per multiprocessor, bytes
  int smem_per_block_optin = 0;  ///< the most one block may ask for (after opting in)
  std::size_t l2_bytes = 0;
  std::size_t total_bytes = 0;
  std::size_t free_bytes = 0;
  bool concurrent_managed = false;
  bool can_map_host = false;
  std::optional<double> hbm_peak_gbps;  ///< theoretical device memory bandwidth
  std::string hbm_peak_basis;
  std::optional<double> pcie_peak_gbps;  ///< theoretical PCIe rate per direction
  std::string pcie_peak_basis;
  const probe_options* options = nullptr;
  probe_report* report = nullptr;
  /// The launch shapes the device section chose for its read and write (when it ran first), so
  /// the pattern section's unit-stride base is the same kernel at the same shape.
  std::optional<launch_config> tuned_read, tuned_write;

  [[nodiscard]] bool quick() const { return options->quick; }
  void progress(const std::string& line) const;
  /// "gpu0.<suffix>", checked against the case table (logic_error when it is not listed).
  [[nodiscard]] std::string key(const std::string& suffix) const {
    return registered_key(tag + "." + suffix);
  }
  /// Full-occupancy launch of a bandwidth kernel with 256 threads per block.
  [[nodiscard]] launch_config default_launch() const;
  /// The largest size up to `wanted` (whole MiB) of which `count` host buffers take at most half
  /// of the host memory the probe may use (probe_options::host_memory_bytes); `wanted` when that
  /// is unknown, 0 when below `floor`.
  [[nodiscard]] std::size_t host_fit(std::size_t wanted, int count, std::size_t floor) const;
};

/// Times `op` on `stream`: calls it once unblocked (so lazily loaded kernels are loaded before the
/// blocker holds the device), then per sample blocks the stream, enqueues `warmup` + `loops` calls
/// with events around the last `loops`, releases it and waits. Returns seconds per call, per
/// sample. `op` therefore runs 1 + samples * (warmup + loops) times.
std::vector<double> time_blocked(stream_blocker& blocker, cudaStream_t stream, int samples,
                                 int loops, int warmup, const std::function<void()>& op);

/// How many times time_blocked calls its `op` (what a kernel that accumulates a sum adds up).
constexpr int blocked_calls(int samples, int loops, int warmup) {
  return 1 + samples * (loops + warmup);
}

/// A bandwidth measurement from seconds per operation that moves `bytes` (in `convention`).
measurement bandwidth_measurement(const gpu_context& ctx, const std::string& key,
                                  const std::string& section, const std::string& title,
                                  byte_convention convention, std::uint64_t size_bytes,
                                  double bytes_per_op, const std::vector<double>& seconds);

/// "12 of 1048576 words differ from the pattern".
std::string mismatch_text(std::uint64_t bad, std::size_t words);

/// Appends curve `c` to the report; its key must be in the case table (logic_error otherwise),
/// and its section is the case's.
void add_curve(const gpu_context& ctx, curve c);

/// Adds `m` as verified when `ok`, else adds a skip naming the failed verification instead, so
/// a broken path never reports a speed. The key must be in the case table (logic_error
/// otherwise); the section is the case's.
void add_verified(const gpu_context& ctx, measurement m, bool ok, const std::string& failure);

/// Number of words of device (or mapped) memory [p, p + n) that differ from pattern `seed`.
std::uint64_t device_mismatches(const std::uint32_t* p, std::size_t n_words, std::uint32_t seed,
                                cudaStream_t stream);

/// Host pattern fill and check, spread over a few threads for large buffers.
void parallel_fill(std::uint32_t* p, std::size_t n_words, std::uint32_t seed);
std::uint64_t parallel_mismatches(const std::uint32_t* p, std::size_t n_words, std::uint32_t seed);

/// The NUMA node holding the (touched) host page at `p`, or -1 when the kernel does not say.
int host_numa_node(const void* p);

/// Bytes per second in GB/s (decimal).
inline double gbps(double bytes, double seconds) { return seconds > 0 ? bytes / seconds / 1e9 : 0; }

}  // namespace vramkit::probe::detail

// The per-NUMA-node transfer section: pinned H2D and D2H with the host buffer bound to each NUMA
// node in turn (hwloc), including memory-only nodes (CXL expanders, HBM-only or far memory), so
// the cost of a buffer on the wrong node is one number. Each buffer's node is read back from the
// kernel before it counts; each copy is checked word by word.
#include <algorithm>

#include "common/cuda_check.hpp"
#include "gpu_probe_detail.hpp"
#include "host_topology.hpp"
#include "vramkit/core/error.hpp"

namespace vramkit::probe::detail {
namespace {

constexpr std::size_t MiB = std::size_t{1} << 20;

// Host memory bound to one node and registered with CUDA (pinned) for its lifetime.
class bound_pinned {
 public:
  bound_pinned(const host_topology& topo, std::size_t bytes, int node)
      : topo_(topo), bytes_(bytes), node_(node), p_(topo.allocate(bytes, node)) {
    if (p_ == nullptr) return;
    parallel_fill(static_cast<std::uint32_t*>(p_), bytes / 4, 1);  // touch: pages now exist
    if (cudaHostRegister(p_, bytes, cudaHostRegisterPortable) != cudaSuccess) {
      (void)cudaGetLastError();
      topo_.free_memory(p_, bytes_, node_);
      p_ = nullptr;
      return;
    }
    registered_ = true;
  }
  ~bound_pinned() {
    if (registered_) VRAMKIT_CUDA_ASSERT(cudaHostUnregister(p_));
    topo_.free_memory(p_, bytes_, node_);
  }
  bound_pinned(const bound_pinned&) = delete;
  bound_pinned& operator=(const bound_pinned&) = delete;
  [[nodiscard]] std::uint32_t* words() const { return static_cast<std::uint32_t*>(p_); }
  [[nodiscard]] bool ok() const { return registered_; }

 private:
  const host_topology& topo_;
  std::size_t bytes_;
  int node_;
  void* p_;
  bool registered_ = false;
};

}  // namespace

void run_numa_transfers(gpu_context& ctx) {
  host_topology topo;
  const auto& nodes = topo.numa_nodes();
  if (nodes.size() < 2) {
    ctx.report->skips.push_back(
        {ctx.tag + ".h2d.pinned.numa",
         "one NUMA node: the h2d section's pinned figures are this node's"});
    return;
  }
  ctx.progress("host<->device copies from pinned memory on each NUMA node");
  const std::size_t bytes = ctx.host_fit(ctx.quick() ? 64 * MiB : 256 * MiB, 2, 16 * MiB);
  if (bytes == 0) {
    ctx.report->skips.push_back(
        {ctx.tag + ".h2d.pinned.numa", "too little host memory available for the pinned buffers"});
    return;
  }
  const std::size_t words = bytes / 4;
  device_buffer d_dst(bytes), d_src(bytes);
  owned_cuda_stream stream;
  stream_blocker blocker;
  const cudaStream_t s = stream.get();
  const int samples = ctx.quick() ? 3 : 5, loops = ctx.quick() ? 2 : 4;
  const auto gpu_node =
      ctx.report->header.find("gpu." + std::to_string(ctx.ordinal) + ".numa_node");
  for (const auto& nd : nodes) {
    const std::string node = std::to_string(nd.os_index);
    if (nd.memory_bytes < 4 * bytes) {
      ctx.report->skips.push_back({ctx.tag + ".h2d.pinned.numa" + node,
                                   "NUMA node " + node + " has too little memory for the test"});
      continue;
    }
    bound_pinned host(topo, bytes, nd.os_index);
    if (!host.ok()) {
      ctx.report->skips.push_back({ctx.tag + ".h2d.pinned.numa" + node,
                                   "could not allocate and pin memory bound to NUMA node " + node});
      continue;
    }
    const int actual = host_numa_node(host.words());
    const std::uint32_t hseed = 0x4E0A0000u + static_cast<std::uint32_t>(nd.os_index);
    const std::uint32_t dseed = hseed ^ 0xFFFFu;
    parallel_fill(host.words(), words, hseed);
    VRAMKIT_CUDA_TRY(launch_fill(d_src.words(), words, dseed, ctx.default_launch(), s));
    VRAMKIT_CUDA_TRY(cudaMemsetAsync(d_dst.get(), 0, bytes, s));
    auto h2d = time_blocked(blocker, s, samples, loops, 1, [&] {
      VRAMKIT_CUDA_TRY(
          cudaMemcpyAsync(d_dst.get(), host.words(), bytes, cudaMemcpyHostToDevice, s));
    });
    const std::uint64_t bad_h2d = device_mismatches(d_dst.words(), words, hseed, s);
    auto d2h = time_blocked(blocker, s, samples, loops, 1, [&] {
      VRAMKIT_CUDA_TRY(
          cudaMemcpyAsync(host.words(), d_src.get(), bytes, cudaMemcpyDeviceToHost, s));
    });
    const std::uint64_t bad_d2h = parallel_mismatches(host.words(), words, dseed);
    const char* kind = nd.pus.empty() ? "memory-only" : "CPUs and memory";
    const bool placed = actual == nd.os_index;
    for (int dir = 0; dir < 2; ++dir) {
      auto m = bandwidth_measurement(
          ctx, ctx.key(std::string(dir == 0 ? "h2d" : "d2h") + ".pinned.numa" + node), "h2d-numa",
          std::string(dir == 0 ? "host to device" : "device to host") +
              ", pinned memory on NUMA node " + node + " (" + kind + ")",
          byte_convention::copied_once, bytes, double(bytes), dir == 0 ? h2d : d2h);
      if (ctx.pcie_peak_gbps) {
        m.peak = ctx.pcie_peak_gbps;
        m.peak_basis = ctx.pcie_peak_basis;
      }
      m.extra["host_numa_node"] = nd.os_index;
      m.extra["memory_only_node"] = nd.pus.empty() ? 1 : 0;
      if (gpu_node != ctx.report->header.end())
        m.extra["gpu_numa_node"] = std::stoi(gpu_node->second);
      m.note = std::string("host buffer bound to the node by hwloc, its placement read back; ") +
               "cudaHostRegister'd; destination checked word by word";
      const std::uint64_t bad = dir == 0 ? bad_h2d : bad_d2h;
      if (!placed) {
        ctx.report->skips.push_back({m.key, "the buffer did not land on NUMA node " + node +
                                                " (found on " + std::to_string(actual) +
                                                "): not reported"});
        continue;
      }
      add_verified(ctx, std::move(m), bad == 0, mismatch_text(bad, words));
    }
  }
}

}  // namespace vramkit::probe::detail

// What the probe needs to know about the host: processing units, cores, NUMA nodes with their
// memory, data caches, the CPU model; thread pinning and NUMA-bound allocation. Backed by hwloc
// where it was found at build time, else by sysconf/sched_setaffinity (one NUMA node, no caches).
// Built once per probe run; const member functions are safe to call from several threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace vramkit::probe::detail {

/// One NUMA node: its OS index, local memory and the OS indices of its processing units (none for
/// a memory-only node), and the kernel's distances to every node (by OS index; empty if unknown).
struct numa_node_info {
  int os_index = 0;
  std::uint64_t memory_bytes = 0;
  std::vector<int> pus;
  std::vector<int> distances;
};

/// What a NUMA node holds, as the kernel sees it.
enum class numa_kind {
  cpus_and_memory,
  memory_only,  ///< no CPUs of its own: a CXL memory expander, HBM-only or other far memory
  cpus_only,    ///< CPUs whose memory lives elsewhere
};
/// "CPUs and memory", "memory-only", "CPUs only".
const char* to_string(numa_kind k) noexcept;
numa_kind classify(const numa_node_info& node) noexcept;

/// The NUMA nodes under `sysfs_root` (normally "/sys"), from devices/system/node/node<N>/cpulist,
/// meminfo ("Node N MemTotal: K kB") and distance, in OS-index order; empty when the directory is
/// missing. Throws std::invalid_argument naming the file when one is malformed.
std::vector<numa_node_info> numa_nodes_from_sysfs(const std::string& sysfs_root);

/// The CPUs of a kernel cpulist ("0-3,8,10-11"; "" = none); throws std::invalid_argument on
/// malformed text.
std::vector<int> parse_cpulist(const std::string& text);

/// The node with CPUs nearest to node `os_index` by the kernel's distances (itself when it has
/// CPUs; the first node with CPUs when no distances are known), or nullptr when none has CPUs.
const numa_node_info* nearest_cpu_node(const std::vector<numa_node_info>& nodes, int os_index);

/// One level of data (or unified) cache: "L1d", "L2", "L3"; size of one instance; instances.
struct cache_level_info {
  std::string name;
  std::uint64_t size_bytes = 0;
  int instances = 0;
};

/// The NUMA node holding the (touched) page at `p`, or -1 when the kernel does not say.
int page_numa_node(const void* p);

/// Where 16 pages spread over [p, p + bytes) (touched) lie: the first node found that is not
/// `node`, or empty when all are on it or the kernel does not say.
std::optional<int> misplaced_node(const void* p, std::size_t bytes, int node);

class host_topology {
 public:
  /// The machine's topology; NUMA nodes as the kernel lists them under /sys take precedence for
  /// which CPUs a node has (hwloc gives a memory-only node the CPUs it is local to).
  host_topology();
  /// The same with the node facts read under `sysfs_root` instead of /sys and, when `hwloc_xml`
  /// is not empty, the topology loaded from that hwloc XML file (tests): pinning and binding then
  /// act on this machine with the described PU and node numbers, and fail where it has none.
  explicit host_topology(const std::string& sysfs_root, const std::string& hwloc_xml = "");
  ~host_topology();
  host_topology(const host_topology&) = delete;
  host_topology& operator=(const host_topology&) = delete;

  /// "hwloc 2.9.0" or "none (hwloc not found at build time)".
  [[nodiscard]] std::string backend() const;
  [[nodiscard]] std::string cpu_model() const;
  [[nodiscard]] int core_count() const;
  [[nodiscard]] int pu_count() const;
  /// Up to `n` PU OS indices from `pus` (all when n <= 0), one per core first, then SMT siblings.
  [[nodiscard]] std::vector<int> spread(const std::vector<int>& pus, int n) const;
  /// Every PU this process may run on, in topology order.
  [[nodiscard]] const std::vector<int>& pus() const { return pus_; }
  [[nodiscard]] const std::vector<numa_node_info>& numa_nodes() const { return nodes_; }
  /// Data/unified caches, ascending level; empty when unknown.
  [[nodiscard]] const std::vector<cache_level_info>& caches() const { return caches_; }
  /// Total bytes of the last cache level over all its instances (0 when unknown).
  [[nodiscard]] std::uint64_t last_level_cache_bytes() const;

  /// Pins the calling thread to one PU; false when the OS refused.
  bool pin_current_thread(int pu_os_index) const;
  /// `bytes` of untouched memory, strictly bound to NUMA node `node_os_index` (or first-touch
  /// placement when it is negative); nullptr on failure, also when the binding cannot be made.
  /// Release with free_memory, giving the same size and node.
  void* allocate(std::size_t bytes, int node_os_index) const;
  void free_memory(void* p, std::size_t bytes, int node_os_index) const;

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
  std::vector<int> pus_;
  std::vector<int> core_of_pu_;  // indexed like pus_
  std::vector<numa_node_info> nodes_;
  std::vector<cache_level_info> caches_;
  std::string cpu_model_;
  int cores_ = 0;
};

}  // namespace vramkit::probe::detail

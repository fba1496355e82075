// host_topology over hwloc (or sysconf + sched_setaffinity without it).
#include "host_topology.hpp"

#include <sched.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>

#include "vramkit/config.hpp"

#if VRAMKIT_HAVE_HWLOC
#include <hwloc.h>
#endif

namespace vramkit::probe::detail {
namespace {

std::string cpu_model_from_proc() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0 || line.rfind("Model", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) {
        auto v = line.substr(colon + 1);
        v.erase(0, v.find_first_not_of(" \t"));
        if (!v.empty()) return v;
      }
    }
  }
  return "unknown";
}

void* map_anonymous(std::size_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}

}  // namespace

struct host_topology::impl {
#if VRAMKIT_HAVE_HWLOC
  hwloc_topology_t topo = nullptr;
  ~impl() {
    if (topo) hwloc_topology_destroy(topo);
  }
#endif
};

const char* to_string(numa_kind k) noexcept {
  switch (k) {
    case numa_kind::memory_only:
      return "memory-only";
    case numa_kind::cpus_only:
      return "CPUs only";
    default:
      return "CPUs and memory";
  }
}

numa_kind classify(const numa_node_info& node) noexcept {
  if (node.pus.empty()) return numa_kind::memory_only;
  if (node.memory_bytes == 0) return numa_kind::cpus_only;
  return numa_kind::cpus_and_memory;
}

std::vector<int> parse_cpulist(const std::string& text) {
  std::vector<int> out;
  std::string t;
  for (char c : text)
    if (!std::isspace(static_cast<unsigned char>(c))) t += c;
  std::size_t i = 0;
  auto number = [&]() {
    std::size_t j = i;
    while (j < t.size() && std::isdigit(static_cast<unsigned char>(t[j]))) ++j;
    if (j == i || j - i > 7) throw std::invalid_argument("cpulist: malformed '" + text + "'");
    const int v = std::stoi(t.substr(i, j - i));
    i = j;
    return v;
  };
  while (i < t.size()) {
    const int a = number();
    int b = a;
    if (i < t.size() && t[i] == '-') {
      ++i;
      b = number();
      if (b < a) throw std::invalid_argument("cpulist: descending range in '" + text + "'");
    }
    for (int c = a; c <= b; ++c) out.push_back(c);
    if (i < t.size()) {
      if (t[i] != ',') throw std::invalid_argument("cpulist: malformed '" + text + "'");
      ++i;
    }
  }
  return out;
}

std::vector<numa_node_info> numa_nodes_from_sysfs(const std::string& sysfs_root) {
  namespace fs = std::filesystem;
  std::vector<numa_node_info> nodes;
  const fs::path dir = fs::path(sysfs_root) / "devices/system/node";
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return nodes;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("node", 0) != 0 || name.size() == 4 ||
        !std::all_of(name.begin() + 4, name.end(), [](char c) { return std::isdigit(c); }))
      continue;
    numa_node_info n;
    n.os_index = std::stoi(name.substr(4));
    std::ifstream cpus(entry.path() / "cpulist");
    std::string line;
    std::getline(cpus, line);
    try {
      n.pus = parse_cpulist(line);
    } catch (const std::invalid_argument&) {
      throw std::invalid_argument((entry.path() / "cpulist").string() + ": malformed '" + line +
                                  "'");
    }
    std::ifstream mem(entry.path() / "meminfo");
    while (std::getline(mem, line)) {
      // "Node 2 MemTotal:       67108864 kB"
      const auto at = line.find("MemTotal:");
      if (at == std::string::npos) continue;
      std::istringstream in(line.substr(at + 9));
      std::uint64_t kb = 0;
      std::string unit;
      if (!(in >> kb >> unit) || unit != "kB")
        throw std::invalid_argument((entry.path() / "meminfo").string() + ": malformed '" + line +
                                    "'");
      n.memory_bytes = kb * 1024;
    }
    std::ifstream dist(entry.path() / "distance");
    for (int d = 0; dist >> d;) n.distances.push_back(d);
    nodes.push_back(std::move(n));
  }
  std::sort(nodes.begin(), nodes.end(), [](const numa_node_info& a, const numa_node_info& b) {
    return a.os_index < b.os_index;
  });
  return nodes;
}

const numa_node_info* nearest_cpu_node(const std::vector<numa_node_info>& nodes, int os_index) {
  const numa_node_info* self = nullptr;
  for (const auto& n : nodes)
    if (n.os_index == os_index) self = &n;
  if (self != nullptr && !self->pus.empty()) return self;
  const numa_node_info* best = nullptr;
  int best_d = 0;
  for (std::size_t k = 0; k < nodes.size(); ++k) {
    const auto& n = nodes[k];
    if (n.pus.empty()) continue;
    // distances are listed in node order, which is OS-index order under /sys
    const int d = self != nullptr && k < self->distances.size() ? self->distances[k] : 0;
    if (best == nullptr || d < best_d) {
      best = &n;
      best_d = d;
    }
  }
  return best;
}

host_topology::host_topology() : host_topology("/sys") {}

host_topology::host_topology(const std::string& sysfs_root, const std::string& hwloc_xml)
    : impl_(std::make_unique<impl>()) {
  cpu_model_ = cpu_model_from_proc();
#if VRAMKIT_HAVE_HWLOC
  const bool init = hwloc_topology_init(&impl_->topo) == 0;
  // A described topology binds and pins on this machine, with the described numbers.
  if (init && !hwloc_xml.empty() &&
      (hwloc_topology_set_xml(impl_->topo, hwloc_xml.c_str()) != 0 ||
       hwloc_topology_set_flags(impl_->topo, HWLOC_TOPOLOGY_FLAG_IS_THISSYSTEM) != 0)) {
    hwloc_topology_destroy(impl_->topo);
    impl_->topo = nullptr;
  }
  if (init && impl_->topo != nullptr && hwloc_topology_load(impl_->topo) == 0) {
    hwloc_topology_t t = impl_->topo;
    const int npu = hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_PU);
    for (int i = 0; i < npu; ++i) {
      hwloc_obj_t pu = hwloc_get_obj_by_type(t, HWLOC_OBJ_PU, static_cast<unsigned>(i));
      pus_.push_back(static_cast<int>(pu->os_index));
      hwloc_obj_t core = hwloc_get_ancestor_obj_by_type(t, HWLOC_OBJ_CORE, pu);
      core_of_pu_.push_back(core ? static_cast<int>(core->logical_index) : i);
    }
    cores_ = std::max(1, hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_CORE));
    const int nnodes = hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_NUMANODE);
    for (int i = 0; i < nnodes; ++i) {
      hwloc_obj_t node = hwloc_get_obj_by_type(t, HWLOC_OBJ_NUMANODE, static_cast<unsigned>(i));
      numa_node_info info;
      info.os_index = static_cast<int>(node->os_index);
      info.memory_bytes = node->attr ? node->attr->numanode.local_memory : 0;
      for (std::size_t k = 0; k < pus_.size(); ++k) {
        if (node->cpuset && hwloc_bitmap_isset(node->cpuset, static_cast<unsigned>(pus_[k]))) {
          info.pus.push_back(pus_[k]);
        }
      }
      nodes_.push_back(std::move(info));
    }
    // Linux gives every CPU one home node, hwloc gives a CPU-less node the CPUs of its locality:
    // a node whose CPUs all belong to a node listed before it has none of its own.
    std::vector<int> claimed;
    for (auto& n : nodes_) {
      const bool all_claimed =
          !n.pus.empty() && std::all_of(n.pus.begin(), n.pus.end(), [&](int pu) {
            return std::find(claimed.begin(), claimed.end(), pu) != claimed.end();
          });
      if (all_claimed) {
        n.pus.clear();
      } else {
        claimed.insert(claimed.end(), n.pus.begin(), n.pus.end());
      }
    }
    const std::pair<hwloc_obj_type_t, const char*> levels[] = {{HWLOC_OBJ_L1CACHE, "L1d"},
                                                               {HWLOC_OBJ_L2CACHE, "L2"},
                                                               {HWLOC_OBJ_L3CACHE, "L3"},
                                                               {HWLOC_OBJ_L4CACHE, "L4"}};
    for (const auto& [type, name] : levels) {
      const int n = hwloc_get_nbobjs_by_type(t, type);
      if (n <= 0) continue;
      hwloc_obj_t c = hwloc_get_obj_by_type(t, type, 0);
      if (!c->attr || c->attr->cache.type == HWLOC_OBJ_CACHE_INSTRUCTION) continue;
      caches_.push_back({name, c->attr->cache.size, n});
    }
    hwloc_obj_t root = hwloc_get_root_obj(t);
    if (const char* model = hwloc_obj_get_info_by_name(root, "CPUModel")) cpu_model_ = model;
    if (hwloc_obj_t pkg = hwloc_get_obj_by_type(t, HWLOC_OBJ_PACKAGE, 0)) {
      if (const char* model = hwloc_obj_get_info_by_name(pkg, "CPUModel")) cpu_model_ = model;
    }
  } else if (impl_->topo) {
    hwloc_topology_destroy(impl_->topo);
    impl_->topo = nullptr;
  }
#endif
  if (pus_.empty()) {
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof(set), &set) == 0) {
      for (int i = 0; i < CPU_SETSIZE; ++i) {
        if (CPU_ISSET(i, &set)) pus_.push_back(i);
      }
    }
    if (pus_.empty()) pus_.push_back(0);
    for (std::size_t k = 0; k < pus_.size(); ++k) core_of_pu_.push_back(static_cast<int>(k));
    cores_ = static_cast<int>(pus_.size());
  }
  // The kernel's view of each node's CPUs and distances wins: hwloc gives a memory-only node the
  // CPUs of its locality, and has no distances here. Without hwloc, the nodes come from /sys.
  const auto sys_nodes = numa_nodes_from_sysfs(sysfs_root);
  if (nodes_.empty() && sys_nodes.size() > 1) {
    for (auto n : sys_nodes) {
      std::vector<int> usable;
      for (int pu : n.pus)
        if (std::find(pus_.begin(), pus_.end(), pu) != pus_.end()) usable.push_back(pu);
      n.pus = usable.empty() && !n.pus.empty() ? n.pus : usable;
      nodes_.push_back(std::move(n));
    }
  }
  for (auto& n : nodes_) {
    for (const auto& k : sys_nodes) {
      if (k.os_index != n.os_index) continue;
      std::vector<int> own;  // the kernel's CPUs of the node that this process may use
      for (int pu : k.pus)
        if (std::find(pus_.begin(), pus_.end(), pu) != pus_.end()) own.push_back(pu);
      if (k.pus.empty() || !own.empty()) n.pus = own;
      n.distances = k.distances;
    }
  }
  if (nodes_.empty()) {
    numa_node_info info;
    const long pages = sysconf(_SC_PHYS_PAGES);
    const long page = sysconf(_SC_PAGESIZE);
    info.memory_bytes = pages > 0 && page > 0 ? static_cast<std::uint64_t>(pages) * page : 0;
    info.pus = pus_;
    nodes_.push_back(std::move(info));
  }
}

host_topology::~host_topology() = default;

std::string host_topology::backend() const {
#if VRAMKIT_HAVE_HWLOC
  if (impl_->topo) return std::string("hwloc ") + HWLOC_VERSION;
  return "none (hwloc failed to load the topology)";
#else
  return "none (hwloc not found at build time)";
#endif
}

std::string host_topology::cpu_model() const { return cpu_model_; }
int host_topology::core_count() const { return cores_; }
int host_topology::pu_count() const { return static_cast<int>(pus_.size()); }

std::uint64_t host_topology::last_level_cache_bytes() const {
  if (caches_.empty()) return 0;
  return caches_.back().size_bytes * static_cast<std::uint64_t>(caches_.back().instances);
}

std::vector<int> host_topology::spread(const std::vector<int>& pus, int n) const {
  // Order: the first PU of every core, then the second of every core, and so on.
  std::map<int, std::vector<int>> by_core;
  std::vector<int> core_order;
  for (int pu : pus) {
    const auto it = std::find(pus_.begin(), pus_.end(), pu);
    const int core =
        it == pus_.end() ? pu : core_of_pu_[static_cast<std::size_t>(it - pus_.begin())];
    if (by_core.find(core) == by_core.end()) core_order.push_back(core);
    by_core[core].push_back(pu);
  }
  std::vector<int> out;
  for (std::size_t round = 0; out.size() < pus.size(); ++round) {
    for (int core : core_order) {
      if (round < by_core[core].size()) out.push_back(by_core[core][round]);
    }
  }
  if (n > 0 && static_cast<std::size_t>(n) < out.size()) out.resize(static_cast<std::size_t>(n));
  return out;
}

bool host_topology::pin_current_thread(int pu_os_index) const {
#if VRAMKIT_HAVE_HWLOC
  if (impl_->topo) {
    hwloc_bitmap_t set = hwloc_bitmap_alloc();
    hwloc_bitmap_only(set, static_cast<unsigned>(pu_os_index));
    const int rc = hwloc_set_cpubind(impl_->topo, set, HWLOC_CPUBIND_THREAD);
    hwloc_bitmap_free(set);
    return rc == 0;
  }
#endif
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(pu_os_index, &set);
  return sched_setaffinity(0, sizeof(set), &set) == 0;
}

void* host_topology::allocate(std::size_t bytes, int node_os_index) const {
#if VRAMKIT_HAVE_HWLOC
  if (impl_->topo && node_os_index >= 0) {
    hwloc_bitmap_t set = hwloc_bitmap_alloc();
    hwloc_bitmap_only(set, static_cast<unsigned>(node_os_index));
    // Strict: memory that cannot be bound to the node is no memory of the node (without it hwloc
    // may hand back memory bound elsewhere, and a node's figures would be another's).
    void* p = hwloc_alloc_membind(impl_->topo, bytes, set, HWLOC_MEMBIND_BIND,
                                  HWLOC_MEMBIND_BYNODESET | HWLOC_MEMBIND_STRICT);
    hwloc_bitmap_free(set);
    return p;
  }
#endif
  return map_anonymous(bytes);
}

void host_topology::free_memory(void* p, std::size_t bytes, int node_os_index) const {
  if (!p) return;
#if VRAMKIT_HAVE_HWLOC
  if (impl_->topo && node_os_index >= 0) {
    hwloc_free(impl_->topo, p, bytes);
    return;
  }
#endif
  munmap(p, bytes);
}

int page_numa_node(const void* p) {
  // move_pages with no target nodes only reports where each page is (status: a node, or -errno).
  void* page = reinterpret_cast<void*>(reinterpret_cast<std::uintptr_t>(p) &
                                       ~static_cast<std::uintptr_t>(sysconf(_SC_PAGESIZE) - 1));
  int status = -1;
  if (syscall(SYS_move_pages, 0, 1UL, &page, nullptr, &status, 0) != 0) return -1;
  return status >= 0 ? status : -1;
}

std::optional<int> misplaced_node(const void* p, std::size_t bytes, int node) {
  const auto* base = static_cast<const char*>(p);
  constexpr int samples = 16;
  for (int k = 0; k < samples; ++k) {
    const std::size_t off = bytes / samples * static_cast<std::size_t>(k);
    const int found = page_numa_node(base + off);
    if (found < 0) return std::nullopt;  // the kernel does not say: nothing to hold against it
    if (found != node) return found;
  }
  return std::nullopt;
}

}  // namespace vramkit::probe::detail

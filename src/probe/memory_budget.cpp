// Host memory available to the probe (see memory_budget.hpp): procfs meminfo, mountinfo and the
// cgroup v1/v2 memory files of the process's cgroup and its ancestors, VmSize against RLIMIT_AS.
#include "vramkit/probe/memory_budget.hpp"

#include <sys/resource.h>

#include <algorithm>
#include <charconv>
#include <fstream>
#include <sstream>
#include <thread>

#include <fmt/format.h>

#include "vramkit/core/units.hpp"

namespace vramkit::probe {
namespace {

namespace fs = std::filesystem;

std::optional<std::string> slurp(const fs::path& p) {
  std::ifstream in(p);
  if (!in) return std::nullopt;
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

fs::path under(const fs::path& root, const std::string& abs) {
  return root / fs::path(abs).relative_path();
}

bool blank(char c) { return c == ' ' || c == '\t' || c == '\n'; }

std::optional<std::uint64_t> to_u64(std::string_view v) {
  while (!v.empty() && blank(v.back())) v.remove_suffix(1);
  while (!v.empty() && blank(v.front())) v.remove_prefix(1);
  std::uint64_t n = 0;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
  if (ec != std::errc() || end != v.data() + v.size() || v.empty()) return std::nullopt;
  return n;
}

// A cgroup limit file: "max" (v2) or the page-aligned largest signed value (v1) mean none.
std::optional<std::uint64_t> cgroup_limit(const fs::path& file) {
  auto text = slurp(file);
  if (!text) return std::nullopt;
  std::string_view v(*text);
  while (!v.empty() && (v.back() == '\n' || v.back() == ' ')) v.remove_suffix(1);
  if (v == "max") return std::nullopt;
  auto n = to_u64(v);
  if (!n || *n >= (std::uint64_t{1} << 62)) return std::nullopt;
  return n;
}

// "Key:   123 kB" lines of meminfo or status.
std::optional<std::uint64_t> kib_field(const std::string& text, std::string_view key) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.compare(0, key.size(), key) != 0 || line.size() <= key.size() ||
        line[key.size()] != ':')
      continue;
    std::string_view v(line);
    v.remove_prefix(key.size() + 1);
    if (v.size() >= 3 && v.substr(v.size() - 3) == " kB") v.remove_suffix(3);
    if (auto n = to_u64(v)) return *n * 1024;
    return std::nullopt;
  }
  return std::nullopt;
}

// "key value" lines of a cgroup memory.stat.
std::optional<std::uint64_t> stat_field(const fs::path& file, std::string_view key) {
  auto text = slurp(file);
  if (!text) return std::nullopt;
  std::istringstream in(*text);
  std::string k, v;
  while (in >> k >> v) {
    if (k == key) return to_u64(v);
  }
  return std::nullopt;
}

struct cgroup_mount {
  fs::path mount_point;  // where it is mounted, as the process sees it
  std::string root;      // the cgroup path that the mount point shows
};

// The memory cgroup mounts of mountinfo: the v2 one and a v1 hierarchy with the memory controller.
void find_mounts(const fs::path& root, std::optional<cgroup_mount>& v1,
                 std::optional<cgroup_mount>& v2) {
  if (auto text = slurp(under(root, "/proc/self/mountinfo"))) {
    std::istringstream in(*text);
    std::string line;
    while (std::getline(in, line)) {
      const auto dash = line.find(" - ");
      if (dash == std::string::npos) continue;
      std::istringstream pre(line.substr(0, dash)), post(line.substr(dash + 3));
      std::string id, parent, devno, mroot, mpoint, fstype, source, options;
      pre >> id >> parent >> devno >> mroot >> mpoint;
      post >> fstype >> source >> options;
      if (fstype == "cgroup2" && !v2) v2 = cgroup_mount{under(root, mpoint), mroot};
      if (fstype == "cgroup" && !v1) {
        std::istringstream os(options);
        std::string o;
        while (std::getline(os, o, ',')) {
          if (o == "memory") v1 = cgroup_mount{under(root, mpoint), mroot};
        }
      }
    }
    return;
  }
  // No mountinfo (a bare fixture): the usual places.
  v1 = cgroup_mount{under(root, "/sys/fs/cgroup/memory"), "/"};
  v2 = cgroup_mount{under(root, "/sys/fs/cgroup"), "/"};
}

// The process's cgroup path per hierarchy from /proc/self/cgroup.
void find_paths(const fs::path& root, std::optional<std::string>& v1,
                std::optional<std::string>& v2) {
  auto text = slurp(under(root, "/proc/self/cgroup"));
  if (!text) return;
  std::istringstream in(*text);
  std::string line;
  while (std::getline(in, line)) {
    const auto a = line.find(':');
    const auto b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1);
    const std::string path = line.substr(b + 1);
    if (line.compare(0, a, "0") == 0 && controllers.empty()) {
      v2 = path;
      continue;
    }
    std::istringstream cs(controllers);
    std::string c;
    while (std::getline(cs, c, ',')) {
      if (c == "memory") v1 = path;
    }
  }
}

// Every limited level from the process's cgroup up to the mount's root.
void add_cgroup_limits(const cgroup_mount& mount, std::string path, int version,
                       std::vector<memory_limit>& out) {
  // The mount shows the hierarchy from mount.root down (a container sees its own cgroup as "/").
  if (mount.root != "/" && path.compare(0, mount.root.size(), mount.root) == 0)
    path = path.substr(mount.root.size());
  const char* limit_file = version == 2 ? "memory.max" : "memory.limit_in_bytes";
  const char* usage_file = version == 2 ? "memory.current" : "memory.usage_in_bytes";
  fs::path rel = fs::path(path).relative_path();
  for (;;) {
    const fs::path dir = mount.mount_point / rel;
    if (auto limit = cgroup_limit(dir / limit_file)) {
      std::uint64_t used = cgroup_limit(dir / usage_file).value_or(0);
      // Page cache that the kernel reclaims before it runs out counts in the usage; what stays is
      // the working set (as the kubelet computes it).
      if (auto inactive = stat_field(dir / "memory.stat",
                                     version == 2 ? "inactive_file" : "total_inactive_file"))
        used = used > *inactive ? used - *inactive : 0;
      out.push_back({fmt::format("cgroup v{} /{}", version, rel.generic_string()), *limit, used});
    }
    if (rel.empty()) break;
    rel = rel.parent_path();
  }
}

}  // namespace

std::optional<std::uint64_t> memory_budget::available_bytes() const {
  const memory_limit* t = tightest();
  if (t == nullptr) return std::nullopt;
  return t->left();
}

const memory_limit* memory_budget::tightest() const {
  const memory_limit* best = nullptr;
  for (const auto& l : limits) {
    if (best == nullptr || l.left() < best->left()) best = &l;
  }
  return best;
}

std::string memory_budget::describe() const {
  const memory_limit* t = tightest();
  if (t == nullptr) return "unknown (no meminfo, cgroup or address-space limit readable)";
  auto b = [](std::uint64_t v) { return format_bytes(static_cast<double>(v)); };
  if (t->used_bytes == 0) return fmt::format("{} available ({})", b(t->left()), t->source);
  return fmt::format("{} available ({}: limit {}, {} in use)", b(t->left()), t->source,
                     b(t->limit_bytes), b(t->used_bytes));
}

std::string memory_budget::describe_all() const {
  if (limits.empty()) return "none";
  auto b = [](std::uint64_t v) { return format_bytes(static_cast<double>(v)); };
  std::string out;
  for (const auto& l : limits) {
    if (!out.empty()) out += "; ";
    out += l.used_bytes == 0 && l.source == "MemAvailable"
               ? fmt::format("{} {}", l.source, b(l.limit_bytes))
               : fmt::format("{} limit {}, {} in use", l.source, b(l.limit_bytes), b(l.used_bytes));
  }
  return out;
}

memory_budget read_memory_budget(const fs::path& root,
                                 std::optional<std::uint64_t> address_space_limit,
                                 std::uint64_t address_space_reserve) {
  memory_budget budget;
  if (auto meminfo = slurp(under(root, "/proc/meminfo"))) {
    if (auto avail = kib_field(*meminfo, "MemAvailable"))
      budget.limits.push_back({"MemAvailable", *avail, 0});
  }
  std::optional<cgroup_mount> m1, m2;
  std::optional<std::string> p1, p2;
  find_mounts(root, m1, m2);
  find_paths(root, p1, p2);
  if (m1 && p1) add_cgroup_limits(*m1, *p1, 1, budget.limits);
  if (m2 && p2) add_cgroup_limits(*m2, *p2, 2, budget.limits);
  if (address_space_limit) {
    std::uint64_t used = address_space_reserve;
    if (auto status = slurp(under(root, "/proc/self/status"))) {
      if (auto vm = kib_field(*status, "VmSize")) used += *vm;
    }
    budget.limits.push_back({"RLIMIT_AS", *address_space_limit, used});
  }
  return budget;
}

memory_budget current_memory_budget() {
  std::optional<std::uint64_t> as;
  rlimit rl{};
  if (getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) as = rl.rlim_cur;
  const std::uint64_t threads = std::max(1u, std::thread::hardware_concurrency());
  return read_memory_budget("/", as, as ? threads * 8 * MiB + 256 * MiB : 0);
}

std::uint64_t fit_in_budget(std::optional<std::uint64_t> avail, std::uint64_t wanted, int count,
                            double fraction, std::uint64_t floor, std::uint64_t granule) {
  if (!avail) return wanted;
  const double room = fraction * static_cast<double>(*avail) / std::max(1, count);
  std::uint64_t bytes = std::min<std::uint64_t>(wanted, static_cast<std::uint64_t>(room));
  bytes = bytes / granule * granule;
  return bytes < floor ? 0 : bytes;
}

}  // namespace vramkit::probe

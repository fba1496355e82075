// Host memory readers over a file-system root: procfs meminfo and process status, sysfs NUMA
// meminfo, cgroup v2/v1 memory files. Missing files give empty values; nothing throws.
#include "vramkit/monitor/host_reader.hpp"

#include <pwd.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <fstream>
#include <map>
#include <sstream>

namespace vramkit::monitor {

namespace {

std::optional<std::string> slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::filesystem::path under(const std::filesystem::path& root, const std::string& absolute) {
  return root / std::filesystem::path(absolute).relative_path();
}

std::optional<std::uint64_t> to_u64(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() &&
         (s.back() == ' ' || s.back() == '\n' || s.back() == '\t' || s.back() == '\r'))
    s.remove_suffix(1);
  std::uint64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc{} || p != s.data() + s.size()) return std::nullopt;
  return v;
}

// "Key:   123 kB" lines -> key -> value in bytes when a kB unit is present, else the raw number.
std::map<std::string, std::uint64_t> parse_kv(const std::string& text, bool strip_node_prefix) {
  std::map<std::string, std::uint64_t> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    std::string_view v(line);
    if (strip_node_prefix) {
      // "Node 0 MemTotal: ..." -> "MemTotal: ..."
      if (v.rfind("Node ", 0) != 0) continue;
      auto sp = v.find(' ', 5);
      if (sp == std::string_view::npos) continue;
      v.remove_prefix(sp + 1);
    }
    auto colon = v.find(':');
    if (colon == std::string_view::npos) continue;
    std::string key(v.substr(0, colon));
    std::string_view rest = v.substr(colon + 1);
    bool kb = false;
    if (auto k = rest.rfind("kB"); k != std::string_view::npos) {
      kb = true;
      rest = rest.substr(0, k);
    }
    if (auto n = to_u64(rest)) out[key] = kb ? *n * 1024 : *n;
  }
  return out;
}

std::optional<std::uint64_t> get(const std::map<std::string, std::uint64_t>& m, const char* key) {
  auto it = m.find(key);
  if (it == m.end()) return std::nullopt;
  return it->second;
}

std::string user_name(const std::filesystem::path& root, unsigned uid) {
  if (root == "/" || root.empty()) {
    struct passwd pw {};
    struct passwd* found = nullptr;
    std::string buf(4096, '\0');
    if (getpwuid_r(uid, &pw, buf.data(), buf.size(), &found) == 0 && found != nullptr)
      return found->pw_name;
    return std::to_string(uid);
  }
  if (auto text = slurp(under(root, "/etc/passwd"))) {
    std::istringstream in(*text);
    std::string line;
    while (std::getline(in, line)) {
      auto a = line.find(':');
      auto b = a == std::string::npos ? a : line.find(':', a + 1);
      auto c = b == std::string::npos ? b : line.find(':', b + 1);
      if (c == std::string::npos) continue;
      if (to_u64(std::string_view(line).substr(b + 1, c - b - 1)) == uid) return line.substr(0, a);
    }
  }
  return std::to_string(uid);
}

}  // namespace

std::optional<host_memory> parse_meminfo(const std::string& text) {
  auto kv = parse_kv(text, false);
  auto total = get(kv, "MemTotal");
  if (!total) return std::nullopt;
  host_memory m;
  m.total_bytes = *total;
  m.available_bytes = get(kv, "MemAvailable");
  m.free_bytes = get(kv, "MemFree");
  m.cached_bytes = get(kv, "Cached");
  m.buffers_bytes = get(kv, "Buffers");
  m.swap_total_bytes = get(kv, "SwapTotal");
  m.swap_free_bytes = get(kv, "SwapFree");
  m.hugepages_total = get(kv, "HugePages_Total");
  m.hugepages_free = get(kv, "HugePages_Free");
  m.hugepage_size_bytes = get(kv, "Hugepagesize");
  m.mlocked_bytes = get(kv, "Mlocked");
  m.unevictable_bytes = get(kv, "Unevictable");
  return m;
}

std::optional<host_memory> read_host_memory(const std::filesystem::path& root) {
  auto text = slurp(under(root, "/proc/meminfo"));
  if (!text) return std::nullopt;
  return parse_meminfo(*text);
}

std::vector<numa_node_memory> read_numa_memory(const std::filesystem::path& root) {
  std::vector<numa_node_memory> out;
  std::error_code ec;
  auto dir = under(root, "/sys/devices/system/node");
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    std::string name = entry.path().filename().string();
    if (name.rfind("node", 0) != 0) continue;
    auto id = to_u64(std::string_view(name).substr(4));
    if (!id) continue;
    auto text = slurp(entry.path() / "meminfo");
    if (!text) continue;
    auto kv = parse_kv(*text, true);
    auto total = get(kv, "MemTotal");
    auto free = get(kv, "MemFree");
    if (!total || !free) continue;
    numa_node_memory n;
    n.node = static_cast<unsigned>(*id);
    n.total_bytes = *total;
    n.free_bytes = *free;
    n.used_bytes = get(kv, "MemUsed");
    out.push_back(n);
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.node < b.node; });
  return out;
}

std::optional<host_process> read_host_process(const std::filesystem::path& root,
                                              std::uint32_t pid) {
  auto base = under(root, "/proc/" + std::to_string(pid));
  auto status = slurp(base / "status");
  if (!status) return std::nullopt;
  host_process p;
  p.pid = pid;
  std::istringstream in(*status);
  std::string line;
  std::string name;
  while (std::getline(in, line)) {
    if (line.rfind("Name:", 0) == 0) {
      name = line.substr(5);
      name.erase(0, name.find_first_not_of(" \t"));
    } else if (line.rfind("Uid:", 0) == 0) {
      std::istringstream u(line.substr(4));
      unsigned uid = 0;
      if (u >> uid) p.user = user_name(root, uid);
    }
  }
  auto kv = parse_kv(*status, false);
  p.rss_bytes = get(kv, "VmRSS");
  p.locked_bytes = get(kv, "VmLck");
  p.pinned_bytes = get(kv, "VmPin");
  if (auto cmd = slurp(base / "cmdline"); cmd && !cmd->empty()) {
    while (!cmd->empty() && cmd->back() == '\0') cmd->pop_back();
    std::replace(cmd->begin(), cmd->end(), '\0', ' ');
    p.command = *cmd;
  } else {
    p.command = name.empty() ? std::string() : "[" + name + "]";
  }
  return p;
}

std::optional<std::uint64_t> parse_cgroup_limit(const std::string& text) {
  std::string_view v(text);
  while (!v.empty() && (v.back() == '\n' || v.back() == ' ')) v.remove_suffix(1);
  if (v == "max") return std::nullopt;
  auto n = to_u64(v);
  // cgroup v1 writes "no limit" as the largest page-aligned signed 64-bit value.
  if (!n || *n >= (std::uint64_t{1} << 62)) return std::nullopt;
  return n;
}

std::optional<cgroup_memory> read_cgroup_memory(const std::filesystem::path& root) {
  auto self = slurp(under(root, "/proc/self/cgroup"));
  if (!self) return std::nullopt;
  std::istringstream in(*self);
  std::string line;
  std::optional<std::string> v2_path, v1_path;
  while (std::getline(in, line)) {
    auto a = line.find(':');
    auto b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    std::string controllers = line.substr(a + 1, b - a - 1);
    std::string path = line.substr(b + 1);
    if (line.compare(0, a, "0") == 0 && controllers.empty()) {
      v2_path = path;
    } else {
      std::istringstream cs(controllers);
      std::string c;
      while (std::getline(cs, c, ',')) {
        if (c == "memory") v1_path = path;
      }
    }
  }
  auto try_dir = [&](const std::filesystem::path& dir, const char* limit_file,
                     const char* usage_file) -> std::optional<cgroup_memory> {
    auto usage = slurp(dir / usage_file);
    if (!usage) return std::nullopt;
    cgroup_memory m;
    m.usage_bytes = parse_cgroup_limit(*usage);
    if (auto limit = slurp(dir / limit_file)) m.limit_bytes = parse_cgroup_limit(*limit);
    return m;
  };
  if (v1_path) {
    for (auto dir :
         {under(root, "/sys/fs/cgroup/memory") / std::filesystem::path(*v1_path).relative_path(),
          under(root, "/sys/fs/cgroup/memory")}) {
      if (auto m = try_dir(dir, "memory.limit_in_bytes", "memory.usage_in_bytes")) {
        m->version = 1;
        m->path = *v1_path;
        return m;
      }
    }
  }
  if (v2_path) {
    // Inside a container's cgroup namespace the path is "/" and the mount root is the cgroup.
    for (auto dir :
         {under(root, "/sys/fs/cgroup") / std::filesystem::path(*v2_path).relative_path(),
          under(root, "/sys/fs/cgroup")}) {
      if (auto m = try_dir(dir, "memory.max", "memory.current")) {
        m->version = 2;
        m->path = *v2_path;
        return m;
      }
    }
  }
  return std::nullopt;
}

}  // namespace vramkit::monitor

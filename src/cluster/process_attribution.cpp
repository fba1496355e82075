// Process owners from a node's /proc, the kubelet's log directories and the runtimes' state files.
#include "vramkit/cluster/process_attribution.hpp"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <system_error>
#include <vector>

#include "vramkit/cluster/memory_request.hpp"

namespace vramkit::cluster {
namespace {

namespace fs = std::filesystem;

bool is_hex64(std::string_view s) {
  return s.size() == 64 && std::all_of(s.begin(), s.end(), [](char c) {
           return std::isxdigit(static_cast<unsigned char>(c)) != 0;
         });
}

bool is_digits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return std::isdigit(static_cast<unsigned char>(c)) != 0;
  });
}

// A pod UID as the API server writes it: 8-4-4-4-12 hex digits.
bool is_uid(std::string_view s) {
  if (s.size() != 36) return false;
  for (std::size_t i = 0; i < s.size(); ++i) {
    const bool dash = i == 8 || i == 13 || i == 18 || i == 23;
    if (dash ? s[i] != '-' : std::isxdigit(static_cast<unsigned char>(s[i])) == 0) return false;
  }
  return true;
}

// At most `limit` bytes of a file; nullopt when it cannot be opened (gone, no permission).
std::optional<std::string> read_text(const fs::path& path, std::size_t limit) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::string out;
  char buf[4096];
  while (out.size() < limit && in.read(buf, sizeof buf).gcount() > 0) {
    out.append(buf, std::min(static_cast<std::size_t>(in.gcount()), limit - out.size()));
  }
  return out;
}

std::string read_link(const fs::path& path) {
  std::error_code ec;
  fs::path target = fs::read_symlink(path, ec);
  return ec ? std::string() : target.string();
}

// Field 22 of /proc/<pid>/stat (start time in clock ticks), counted after the command's ')',
// which may itself contain spaces and parentheses.
std::uint64_t start_time_of_stat(std::string_view stat) {
  const std::size_t close = stat.rfind(')');
  if (close == std::string_view::npos) return 0;
  std::string_view rest = stat.substr(close + 1);
  int field = 2;
  while (!rest.empty()) {
    while (!rest.empty() && rest.front() == ' ') rest.remove_prefix(1);
    const std::size_t end = std::min(rest.find(' '), rest.size());
    if (++field == 22) {
      std::uint64_t v = 0;
      for (const char c : rest.substr(0, end)) {
        if (std::isdigit(static_cast<unsigned char>(c)) == 0) return 0;
        v = v * 10 + static_cast<std::uint64_t>(c - '0');
      }
      return v;
    }
    rest.remove_prefix(end);
  }
  return 0;
}

std::optional<std::uint64_t> bytes_of(const std::optional<std::string>& text) {
  if (!text || text->empty()) return std::nullopt;
  try {
    return parse_memory_request(*text);
  } catch (const std::exception&) {
    return std::nullopt;  // not a size: the job has no plan we can read
  }
}

std::string string_of(const nlohmann::json& obj, const char* key) {
  if (!obj.is_object()) return {};
  auto it = obj.find(key);
  return it != obj.end() && it->is_string() ? it->get<std::string>() : std::string();
}

}  // namespace

std::optional<kube_names> pod_of_log_directory(std::string_view name) {
  const std::size_t first = name.find('_');
  const std::size_t last = name.rfind('_');
  if (first == std::string_view::npos || first == last || first == 0) return std::nullopt;
  kube_names n;
  n.pod_namespace = std::string(name.substr(0, first));
  n.pod = std::string(name.substr(first + 1, last - first - 1));
  n.pod_uid = std::string(name.substr(last + 1));
  if (n.pod.empty() || !is_uid(n.pod_uid)) return std::nullopt;
  return n;
}

std::optional<std::pair<kube_names, std::string>> container_of_log_link(std::string_view name) {
  if (name.size() < 4 || name.substr(name.size() - 4) != ".log") return std::nullopt;
  name.remove_suffix(4);
  const std::size_t first = name.find('_');
  const std::size_t second = first == std::string_view::npos ? first : name.find('_', first + 1);
  const std::size_t dash = name.rfind('-');
  if (second == std::string_view::npos || dash == std::string_view::npos || dash < second)
    return std::nullopt;
  const std::string_view id = name.substr(dash + 1);
  if (!is_hex64(id)) return std::nullopt;
  kube_names n;
  n.pod = std::string(name.substr(0, first));
  n.pod_namespace = std::string(name.substr(first + 1, second - first - 1));
  n.container = std::string(name.substr(second + 1, dash - second - 1));
  if (n.pod.empty() || n.pod_namespace.empty() || n.container.empty()) return std::nullopt;
  return std::make_pair(std::move(n), std::string(id));
}

kube_names names_of_runtime_config(std::string_view json_text) {
  kube_names n;
  const nlohmann::json doc = nlohmann::json::parse(json_text, nullptr, false);
  if (!doc.is_object()) return n;
  // containerd's CRI plugin and CRI-O write the pod into the OCI spec's annotations.
  if (auto a = doc.find("annotations"); a != doc.end() && a->is_object()) {
    n.container = string_of(*a, "io.kubernetes.cri.container-name");
    n.pod = string_of(*a, "io.kubernetes.cri.sandbox-name");
    n.pod_namespace = string_of(*a, "io.kubernetes.cri.sandbox-namespace");
    n.pod_uid = string_of(*a, "io.kubernetes.cri.sandbox-uid");
    if (n.container.empty()) n.container = string_of(*a, "io.kubernetes.container.name");
    if (n.pod.empty()) n.pod = string_of(*a, "io.kubernetes.pod.name");
    if (n.pod_namespace.empty()) n.pod_namespace = string_of(*a, "io.kubernetes.pod.namespace");
    if (n.pod_uid.empty()) n.pod_uid = string_of(*a, "io.kubernetes.pod.uid");
    return n;
  }
  // Docker (dockershim, cri-dockerd) keeps the kubelet's labels on the container.
  if (auto c = doc.find("Config"); c != doc.end() && c->is_object()) {
    if (auto l = c->find("Labels"); l != c->end() && l->is_object()) {
      n.container = string_of(*l, "io.kubernetes.container.name");
      n.pod = string_of(*l, "io.kubernetes.pod.name");
      n.pod_namespace = string_of(*l, "io.kubernetes.pod.namespace");
      n.pod_uid = string_of(*l, "io.kubernetes.pod.uid");
    }
  }
  if (n.container.empty()) {
    std::string name = string_of(doc, "Name");
    if (!name.empty() && name.front() == '/') name.erase(0, 1);
    n.container = name;
  }
  return n;
}

std::optional<std::string> environ_value(std::string_view environ, std::string_view name) {
  while (!environ.empty()) {
    const std::size_t end = std::min(environ.find('\0'), environ.size());
    const std::string_view entry = environ.substr(0, end);
    if (entry.size() > name.size() && entry.substr(0, name.size()) == name &&
        entry[name.size()] == '=')
      return std::string(entry.substr(name.size() + 1));
    environ.remove_prefix(std::min(end + 1, environ.size()));
  }
  return std::nullopt;
}

std::optional<std::uint32_t> namespace_pid_of_status(std::string_view status) {
  std::size_t at = status.find("\nNSpid:");
  if (at == std::string_view::npos) {
    if (status.substr(0, 6) != "NSpid:") return std::nullopt;
    at = 0;
  } else {
    at += 1;
  }
  std::string_view line = status.substr(at + 6);
  line = line.substr(0, std::min(line.find('\n'), line.size()));
  std::vector<std::string_view> pids;
  while (!line.empty()) {
    while (!line.empty() && (line.front() == ' ' || line.front() == '\t')) line.remove_prefix(1);
    const std::size_t end = std::min(line.find_first_of(" \t"), line.size());
    if (end > 0) pids.push_back(line.substr(0, end));
    line.remove_prefix(end);
  }
  if (pids.size() < 2 || !is_digits(pids.back()) || pids.back().size() > 9) return std::nullopt;
  return static_cast<std::uint32_t>(std::stoul(std::string(pids.back())));
}

process_attributor::process_attributor(attribution_options options) : options_(std::move(options)) {
  host_pid_namespace_ = read_link(options_.host_root / "proc" / "1" / "ns" / "pid");
}

std::int64_t process_attributor::now_ms() const {
  if (options_.clock_ms) return options_.clock_ms();
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void process_attributor::rescan_logs(std::int64_t now) {
  if (logs_read_at_ms_ != std::numeric_limits<std::int64_t>::min() &&
      now - logs_read_at_ms_ < options_.retry_after.count())
    return;
  logs_read_at_ms_ = now;
  pods_by_uid_.clear();
  containers_by_id_.clear();
  std::error_code ec;
  for (fs::directory_iterator it(options_.host_root / "var" / "log" / "pods", ec), end;
       !ec && it != end; it.increment(ec)) {
    if (auto n = pod_of_log_directory(it->path().filename().string()))
      pods_by_uid_[n->pod_uid] = std::move(*n);
  }
  ec.clear();
  for (fs::directory_iterator it(options_.host_root / "var" / "log" / "containers", ec), end;
       !ec && it != end; it.increment(ec)) {
    if (auto c = container_of_log_link(it->path().filename().string()))
      containers_by_id_[c->second] = std::move(c->first);
  }
}

void process_attributor::fill_names(monitor::process_owner& o, const std::string& runtime) {
  const std::int64_t now = now_ms();
  auto take = [&](const kube_names& n) {
    if (o.container.empty()) o.container = n.container;
    if (o.pod.empty()) o.pod = n.pod;
    if (o.pod_namespace.empty()) o.pod_namespace = n.pod_namespace;
    if (o.pod_uid.empty() && is_uid(n.pod_uid)) o.pod_uid = n.pod_uid;
  };
  if (!o.container_id.empty()) {
    auto it = containers_by_id_.find(o.container_id);
    if (it == containers_by_id_.end()) {
      rescan_logs(now);
      it = containers_by_id_.find(o.container_id);
    }
    if (it != containers_by_id_.end()) {
      take(it->second);
    } else {
      // The runtimes' own records, by the container ID: no directory scan needed.
      const fs::path root = options_.host_root;
      const std::pair<const char*, fs::path> candidates[] = {
          {"containerd", root / "run/containerd/io.containerd.runtime.v2.task/k8s.io" /
                             o.container_id / "config.json"},
          {"cri-o", root / "run/containers/storage/overlay-containers" / o.container_id /
                        "userdata/config.json"},
          {"docker", root / "var/lib/docker/containers" / o.container_id / "config.v2.json"},
      };
      for (const auto& [name, path] : candidates) {
        if (!runtime.empty() && runtime != name) continue;
        if (auto text = read_text(path, 1 << 20)) {
          take(names_of_runtime_config(*text));
          break;
        }
      }
    }
  }
  if (!o.pod_uid.empty() && o.pod.empty()) {
    auto it = pods_by_uid_.find(o.pod_uid);
    if (it == pods_by_uid_.end()) {
      rescan_logs(now);
      it = pods_by_uid_.find(o.pod_uid);
    }
    if (it != pods_by_uid_.end()) take(it->second);
  }
}

monitor::process_owner process_attributor::read_owner(std::uint32_t /*pid*/, const workload& w,
                                                      const std::string& environ,
                                                      const std::string& status) {
  monitor::process_owner o;
  o.pod_uid = w.pod_uid;
  o.container_id = w.container_id;
  o.slurm_job = w.slurm_job;
  o.slurm_step = w.slurm_step;
  // Without Slurm's cgroup plugins (proctrack/linuxproc) the job is only in the environment that
  // slurmstepd gave the task.
  if (o.slurm_job.empty() && o.pod_uid.empty()) {
    if (auto job = environ_value(environ, "SLURM_JOB_ID"); job && is_digits(*job)) {
      o.slurm_job = *job;
      if (auto step = environ_value(environ, "SLURM_STEP_ID")) o.slurm_step = *step;
    }
  }
  if (!o.container_id.empty() || !o.pod_uid.empty()) fill_names(o, w.runtime);
  o.namespace_pid = namespace_pid_of_status(status);
  if (auto planned = bytes_of(environ_value(environ, "VRAMKIT_PLANNED_BYTES"))) {
    o.planned_bytes = planned;
    o.planned_from = monitor::plan_source::planned;
  } else if (auto cap = bytes_of(environ_value(environ, "VRAMKIT_POOL_MAXIMUM"))) {
    o.planned_bytes = cap;
    o.planned_from = monitor::plan_source::cap;
  }
  return o;
}

monitor::process_owner process_attributor::owner_of(std::uint32_t pid) {
  const fs::path proc = options_.host_root / "proc" / std::to_string(pid);
  // The start time tells a reused PID from the process cached under it; without a readable stat
  // (a trimmed /proc, as in some sandboxes) the cgroup file alone still names the owner.
  const auto stat = read_text(proc / "stat", 4096);
  std::optional<std::string> cgroup;
  if (!stat) {
    cgroup = read_text(proc / "cgroup", 64 * 1024);
    if (!cgroup) {
      cache_.erase(pid);
      return {};
    }
  }
  const std::uint64_t start = stat ? start_time_of_stat(*stat) : 0;
  const std::int64_t now = now_ms();
  if (auto it = cache_.find(pid);
      it != cache_.end() && it->second.start_time == start &&
      (!it->second.names_missing || now - it->second.read_at_ms < options_.retry_after.count()))
    return it->second.owner;
  if (!cgroup) cgroup = read_text(proc / "cgroup", 64 * 1024);

  const workload w = workload_of_proc_cgroup(cgroup.value_or(""));
  // The environment can be large; the variables read here come from the runtime or slurmstepd
  // and sit near its start.
  const std::string environ = read_text(proc / "environ", 256 * 1024).value_or("");
  const std::string status = read_text(proc / "status", 16 * 1024).value_or("");
  cached c;
  c.start_time = start;
  c.read_at_ms = now;
  c.pid_namespace = read_link(proc / "ns" / "pid");
  c.owner = read_owner(pid, w, environ, status);
  // A process whose cgroup path says nothing (a cgroup namespace hides it, or the process moved)
  // but that shares a PID namespace other than the host's with an attributed one is in the same
  // container.
  if (c.owner.empty() && !c.pid_namespace.empty() && c.pid_namespace != host_pid_namespace_) {
    for (const auto& [other_pid, other] : cache_) {
      if (other_pid == pid || other.pid_namespace != c.pid_namespace || other.owner.empty())
        continue;
      const auto namespace_pid = c.owner.namespace_pid;
      const auto planned = c.owner.planned_bytes;
      const auto planned_from = c.owner.planned_from;
      c.owner = other.owner;
      c.owner.namespace_pid = namespace_pid;
      if (planned) {
        c.owner.planned_bytes = planned;
        c.owner.planned_from = planned_from;
      }
      break;
    }
  }
  const bool in_container_namespace =
      !c.pid_namespace.empty() && c.pid_namespace != host_pid_namespace_;
  c.names_missing = (!c.owner.pod_uid.empty() && c.owner.pod.empty()) ||
                    (!c.owner.container_id.empty() && c.owner.container.empty()) ||
                    (c.owner.empty() && in_container_namespace);
  // Bounded: entries of processes that ended go when the cache is large.
  if (cache_.size() >= 4096) {
    for (auto it = cache_.begin(); it != cache_.end();) {
      it = now - it->second.read_at_ms > 600'000 ? cache_.erase(it) : std::next(it);
    }
    if (cache_.size() >= 4096) cache_.clear();
  }
  monitor::process_owner out = c.owner;
  cache_[pid] = std::move(c);
  return out;
}

}  // namespace vramkit::cluster

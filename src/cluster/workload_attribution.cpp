// Pod and Slurm job attribution from cgroup paths (kubelet's cgroupfs and systemd layouts,
// containerd / CRI-O / Docker scopes, Slurm's v1 and v2 hierarchies).
#include "vramkit/cluster/workload_attribution.hpp"

#include <cctype>
#include <vector>

namespace vramkit::cluster {
namespace {

std::vector<std::string_view> split_path(std::string_view path) {
  std::vector<std::string_view> parts;
  while (!path.empty()) {
    const std::size_t slash = path.find('/');
    std::string_view part = path.substr(0, slash);
    if (!part.empty()) parts.push_back(part);
    if (slash == std::string_view::npos) break;
    path.remove_prefix(slash + 1);
  }
  return parts;
}

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }
bool ends_with(std::string_view s, std::string_view p) {
  return s.size() >= p.size() && s.substr(s.size() - p.size()) == p;
}

bool is_hex(std::string_view s) {
  for (const char c : s) {
    if (std::isxdigit(static_cast<unsigned char>(c)) == 0) return false;
  }
  return !s.empty();
}

bool is_digits(std::string_view s) {
  for (const char c : s) {
    if (std::isdigit(static_cast<unsigned char>(c)) == 0) return false;
  }
  return !s.empty();
}

// A pod UID as written in a path: 8-4-4-4-12 hex with dashes (cgroupfs) or underscores (systemd).
std::optional<std::string> pod_uid(std::string_view text) {
  if (text.size() != 36) return std::nullopt;
  std::string uid(text);
  for (std::size_t i = 0; i < uid.size(); ++i) {
    const bool sep = i == 8 || i == 13 || i == 18 || i == 23;
    if (sep) {
      if (uid[i] != '-' && uid[i] != '_') return std::nullopt;
      uid[i] = '-';
    } else if (std::isxdigit(static_cast<unsigned char>(uid[i])) == 0) {
      return std::nullopt;
    }
  }
  return uid;
}

void read_pod_part(std::string_view part, workload& w) {
  // systemd: kubepods-burstable-pod<uid_with_underscores>.slice; cgroupfs: pod<uid>.
  if (ends_with(part, ".slice")) part.remove_suffix(6);
  const std::size_t at = part.rfind("pod");
  if (at == std::string_view::npos) return;
  if (auto uid = pod_uid(part.substr(at + 3))) {
    w.pod_uid = *uid;
    const std::string_view head = part.substr(0, at);
    if (head.find("burstable") != std::string_view::npos)
      w.qos = "burstable";
    else if (head.find("besteffort") != std::string_view::npos)
      w.qos = "besteffort";
  }
}

void read_container_part(std::string_view part, workload& w) {
  struct prefix {
    std::string_view text;
    std::string_view runtime;
  };
  static constexpr prefix prefixes[] = {{"cri-containerd-", "containerd"},
                                        {"crio-conmon-", ""},
                                        {"crio-", "cri-o"},
                                        {"docker-", "docker"}};
  if (ends_with(part, ".scope")) part.remove_suffix(6);
  for (const prefix& p : prefixes) {
    if (!starts_with(part, p.text)) continue;
    if (p.runtime.empty()) return;  // conmon, CRI-O's monitor: not the container's own process
    part.remove_prefix(p.text.size());
    if (part.size() == 64 && is_hex(part)) {
      w.container_id = std::string(part);
      w.runtime = std::string(p.runtime);
    }
    return;
  }
  if (part.size() == 64 && is_hex(part)) w.container_id = std::string(part);  // cgroupfs, bare ID
}

}  // namespace

workload workload_of_cgroup_path(std::string_view path) {
  workload w;
  w.cgroup_path = std::string(path);
  const std::vector<std::string_view> parts = split_path(path);
  bool kube = false;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    const std::string_view part = parts[i];
    if (starts_with(part, "kubepods")) {
      kube = true;
      read_pod_part(part, w);
      continue;
    }
    if (kube && w.pod_uid.empty() && (part == "burstable" || part == "besteffort")) {
      w.qos = std::string(part);  // cgroupfs: the QoS class is its own level
      continue;
    }
    if (kube && w.pod_uid.empty() && starts_with(part, "pod")) {
      read_pod_part(part, w);
      continue;
    }
    if (kube && !w.pod_uid.empty() && w.container_id.empty()) {
      read_container_part(part, w);
      continue;
    }
    // A plain Docker container: systemd driver docker-<id>.scope, cgroupfs driver /docker/<id>.
    if (!kube && w.container_id.empty()) {
      std::string_view id = part;
      if (starts_with(id, "docker-") && ends_with(id, ".scope")) {
        id = id.substr(7, id.size() - 13);
      } else if (i == 0 || parts[i - 1] != "docker") {
        id = {};
      }
      if (id.size() == 64 && is_hex(id)) {
        w.container_id = std::string(id);
        w.runtime = "docker";
        continue;
      }
    }
    // Slurm: .../job_<id>/step_<step>/... (v1 under slurm/uid_N, v2 under slurmstepd.scope).
    if (starts_with(part, "job_") && is_digits(part.substr(4))) {
      w.slurm_job = std::string(part.substr(4));
      if (i + 1 < parts.size() && starts_with(parts[i + 1], "step_")) {
        w.slurm_step = std::string(parts[i + 1].substr(5));
      }
    }
  }
  if (!w.pod_uid.empty() && w.qos.empty()) w.qos = "guaranteed";
  return w;
}

workload workload_of_proc_cgroup(std::string_view text) {
  workload unified;
  workload legacy;
  while (!text.empty()) {
    const std::size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    const std::size_t c1 = line.find(':');
    const std::size_t c2 = c1 == std::string_view::npos ? c1 : line.find(':', c1 + 1);
    if (c2 == std::string_view::npos) continue;
    const std::string_view controllers = line.substr(c1 + 1, c2 - c1 - 1);
    workload w = workload_of_cgroup_path(line.substr(c2 + 1));
    if (w.empty()) continue;
    if (line.substr(0, c1) == "0" && controllers.empty()) {
      if (unified.empty()) unified = std::move(w);
    } else if (legacy.empty()) {
      legacy = std::move(w);
    }
  }
  return unified.empty() ? legacy : unified;
}

}  // namespace vramkit::cluster

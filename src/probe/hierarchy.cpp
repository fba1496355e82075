// The hierarchy summary (see hierarchy.hpp).
#include "vramkit/probe/hierarchy.hpp"

#include <algorithm>
#include <cctype>
#include <set>

#include <fmt/format.h>

namespace vramkit::probe {
namespace {

const measurement* find(const probe_report& r, const std::string& key) {
  for (const auto& m : r.results)
    if (m.key == key) return &m;
  return nullptr;
}

int severity(verdict_kind v) {
  switch (v) {
    case verdict_kind::low:
      return 3;
    case verdict_kind::high:
      return 2;
    case verdict_kind::normal:
      return 1;
    default:
      return 0;
  }
}

// A level from a bandwidth key (the first of `bw_keys` present) and a latency key.
std::optional<hierarchy_level> level(const probe_report& r, std::string name, std::string device,
                                     const std::vector<std::string>& bw_keys,
                                     const std::string& lat_key) {
  hierarchy_level l;
  l.name = std::move(name);
  l.device = std::move(device);
  const measurement* bw = nullptr;
  for (const auto& k : bw_keys) {
    if ((bw = find(r, k)) != nullptr) break;
  }
  const measurement* lat = lat_key.empty() ? nullptr : find(r, lat_key);
  if (bw == nullptr && lat == nullptr) return std::nullopt;
  if (bw != nullptr) {
    l.bandwidth_gbps = bw->stats.median;
    l.bandwidth_key = bw->key;
    l.percent_of_peak = bw->percent_of_peak();
    l.verdict = bw->verdict;
    if (auto it = bw->extra.find("measured_size_bytes"); it != bw->extra.end())
      l.size_bytes = static_cast<std::uint64_t>(it->second);
  }
  if (lat != nullptr) {
    l.latency_ns = lat->stats.median;
    l.latency_key = lat->key;
    if (severity(lat->verdict) > severity(l.verdict)) l.verdict = lat->verdict;
  }
  return l;
}

std::string header(const probe_report& r, const std::string& key) {
  auto it = r.header.find(key);
  return it == r.header.end() ? std::string() : it->second;
}

}  // namespace

std::vector<hierarchy_level> hierarchy(const probe_report& report) {
  std::vector<hierarchy_level> out;
  auto push = [&](std::optional<hierarchy_level> l) {
    if (l) out.push_back(std::move(*l));
  };
  // GPUs in ordinal order, as their measurements name them.
  std::set<int> gpus;
  for (const auto& m : report.results) {
    if (m.device.rfind("gpu", 0) == 0 && m.device.find("->") == std::string::npos &&
        m.device.size() > 3 && std::isdigit(static_cast<unsigned char>(m.device[3]))) {
      gpus.insert(std::stoi(m.device.substr(3)));
    }
  }
  for (int g : gpus) {
    const std::string t = "gpu" + std::to_string(g);
    push(level(report, "L1/shared", t, {t + ".cache.l1"}, t + ".latency.l1"));
    auto l2 = level(report, "L2", t, {t + ".cache.l2"}, t + ".latency.l2");
    if (l2 && !l2->size_bytes) {
      const std::string s = header(report, "gpu." + std::to_string(g) + ".l2_bytes");
      if (!s.empty()) l2->size_bytes = std::stoull(s);
    }
    push(std::move(l2));
    auto hbm = level(report, "HBM", t, {t + ".device.read", t + ".cache.hbm"}, t + ".latency.hbm");
    if (hbm) {
      const std::string s = header(report, "gpu." + std::to_string(g) + ".memory_total");
      if (!s.empty()) hbm->size_bytes = std::stoull(s);
    }
    push(std::move(hbm));
    auto link = level(report, "host link (H2D)", t, {t + ".h2d.pinned"}, t + ".latency.zerocopy");
    if (link) {
      if (const auto* d2h = find(report, t + ".d2h.pinned"))
        link->note = fmt::format("D2H {:.1f} GB/s", d2h->stats.median);
    }
    push(std::move(link));
  }
  push(level(report, "host DRAM", "host", {"host.bw.read.all_threads", "host.bw.copy.all_threads"},
             "host.latency.dram"));
  // NUMA nodes: those with CPUs first, memory-only ones (far memory) last.
  const std::string n_nodes = header(report, "host.numa.nodes");
  const int nodes = n_nodes.empty() ? 0 : std::stoi(n_nodes);
  if (nodes > 1) {
    for (bool memory_only : {false, true}) {
      for (int n = 0; n < 64; ++n) {
        const std::string kind = header(report, fmt::format("host.numa.{}.kind", n));
        if (header(report, fmt::format("host.numa.{}.memory", n)).empty()) continue;
        if ((kind == "memory-only") != memory_only) continue;
        const std::string d = fmt::format("numa{}", n);
        auto l = level(report,
                       memory_only ? fmt::format("far memory: NUMA {} (memory-only)", n)
                                   : fmt::format("NUMA node {}", n),
                       d,
                       {fmt::format("host.{}.bw.read.all_threads", d),
                        fmt::format("host.{}.bw.copy.all_threads", d)},
                       fmt::format("host.{}.latency.dram", d));
        if (l && memory_only) l->note = "memory-only node: no CPUs of its own";
        push(std::move(l));
      }
    }
  }
  return out;
}

}  // namespace vramkit::probe

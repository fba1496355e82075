// Prometheus text exposition of a sample. Families are written whole (HELP, TYPE, then all their
// samples) in a fixed order; values in base units.
#include "vramkit/monitor/exposition.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <vector>

#include "vramkit/monitor/metrics_schema.hpp"

namespace vramkit::monitor {

std::string escape_label_value(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '"')
      out += "\\\"";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
}

std::string escape_help(std::string_view text) {
  std::string out;
  for (char c : text) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
}

std::string format_metric_value(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (v == std::floor(v) && std::fabs(v) < 9.007199254740992e15) return fmt::format("{:.0f}", v);
  return fmt::format("{}", v);
}

namespace {

struct label {
  const char* name;
  std::string value;
};

class writer {
 public:
  // Starts a family; its samples must follow before the next family starts.
  void family(std::string_view name, const char* type, std::string_view help) {
    name_ = name;
    fmt::format_to(std::back_inserter(out_), "# HELP {} {}\n# TYPE {} {}\n", name,
                   escape_help(help), name, type);
  }
  void value(std::initializer_list<label> labels, double v) {
    out_ += name_;
    if (labels.size() != 0) {
      out_ += '{';
      bool first = true;
      for (const auto& l : labels) {
        if (!first) out_ += ',';
        first = false;
        fmt::format_to(std::back_inserter(out_), "{}=\"{}\"", l.name, escape_label_value(l.value));
      }
      out_ += '}';
    }
    out_ += ' ';
    out_ += format_metric_value(v);
    out_ += '\n';
  }
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
  std::string_view name_;
};

// Writes the per-GPU gauge family of `f` when at least one device has the value.
void gpu_family(writer& w, const sample& s, const gpu_field& f) {
  const bool any = std::any_of(s.gpus.begin(), s.gpus.end(),
                               [&](const gpu_sample& g) { return field_value(g, f).has_value(); });
  if (!any) return;
  w.family(f.metric, "gauge", f.help);
  for (const auto& g : s.gpus) {
    if (auto v = field_value(g, f))
      w.value({{"gpu", std::to_string(g.index)}, {"uuid", g.uuid}, {"name", g.name}},
              *v * f.to_base_unit);
  }
}

// Command lines can be kilobytes long: the label keeps the first 128 bytes (not splitting a UTF-8
// sequence) to bound the size of every series.
std::string command_label(const std::string& command) {
  constexpr std::size_t k_max = 128;
  if (command.size() <= k_max) return command;
  std::size_t cut = k_max;
  while (cut > 0 && (static_cast<unsigned char>(command[cut]) & 0xC0) == 0x80) --cut;
  return command.substr(0, cut);
}

// The labels of one process's series: its GPU, itself, and its owner (empty when unknown, so
// that every series of a family has the same label names).
void process_value(writer& w, const gpu_sample& g, const gpu_process& p, double v) {
  w.value({{"gpu", std::to_string(g.index)},
           {"uuid", g.uuid},
           {"name", g.name},
           {"pid", std::to_string(p.pid)},
           {"command", command_label(p.command)},
           {"namespace", p.owner.pod_namespace},
           {"pod", p.owner.pod},
           {"container", p.owner.container},
           {"pod_uid", p.owner.pod_uid},
           {"slurm_job", p.owner.slurm_job}},
          v);
}

// What one workload (a container of a pod, or a Slurm job) holds on one GPU, and its plan.
struct workload_use {
  const gpu_sample* gpu = nullptr;
  const process_owner* owner = nullptr;
  std::uint64_t used_bytes = 0;
  std::optional<std::uint64_t> planned_bytes;
};

std::vector<workload_use> workload_uses(const sample& s) {
  std::vector<workload_use> out;
  for (const auto& g : s.gpus) {
    const std::size_t first = out.size();
    for (const auto& p : g.processes) {
      if (p.owner.empty() || !p.used_bytes) continue;
      const process_owner& o = p.owner;
      auto same = [&](const workload_use& u) {
        return u.owner->pod_uid == o.pod_uid && u.owner->pod == o.pod &&
               u.owner->pod_namespace == o.pod_namespace && u.owner->container == o.container &&
               u.owner->container_id == o.container_id && u.owner->slurm_job == o.slurm_job;
      };
      auto it = std::find_if(out.begin() + static_cast<std::ptrdiff_t>(first), out.end(), same);
      if (it == out.end()) {
        out.push_back({&g, &o, 0, std::nullopt});
        it = out.end() - 1;
      }
      it->used_bytes += *p.used_bytes;
      // Processes of one job normally carry one plan; when they differ the largest is the job's.
      if (o.planned_bytes)
        it->planned_bytes = std::max(it->planned_bytes.value_or(0), *o.planned_bytes);
    }
  }
  return out;
}

void workload_value(writer& w, const workload_use& u, double v) {
  w.value({{"gpu", std::to_string(u.gpu->index)},
           {"uuid", u.gpu->uuid},
           {"name", u.gpu->name},
           {"namespace", u.owner->pod_namespace},
           {"pod", u.owner->pod},
           {"container", u.owner->container},
           {"pod_uid", u.owner->pod_uid},
           {"slurm_job", u.owner->slurm_job}},
          v);
}

// Per-process device memory with its owner, the owner's plan and the use of it; the same summed
// per workload and GPU, which is what a plan is written for.
void process_families(writer& w, const sample& s) {
  bool any_used = false;
  bool any_planned = false;
  for (const auto& g : s.gpus) {
    for (const auto& p : g.processes) {
      any_used = any_used || p.used_bytes.has_value();
      any_planned = any_planned || p.owner.planned_bytes.has_value();
    }
  }
  if (!any_used) return;
  w.family("vramkit_gpu_process_memory_used_bytes", "gauge",
           "Device memory used by one process in bytes, with its pod, container and Slurm job "
           "(empty when it has none).");
  for (const auto& g : s.gpus) {
    for (const auto& p : g.processes)
      if (p.used_bytes) process_value(w, g, p, static_cast<double>(*p.used_bytes));
  }
  if (any_planned) {
    w.family("vramkit_gpu_process_memory_planned_bytes", "gauge",
             "Device memory planned for one GPU by the job of a process, in bytes "
             "(VRAMKIT_PLANNED_BYTES, else the cap VRAMKIT_POOL_MAXIMUM).");
    for (const auto& g : s.gpus) {
      for (const auto& p : g.processes) {
        if (p.used_bytes && p.owner.planned_bytes)
          process_value(w, g, p, static_cast<double>(*p.owner.planned_bytes));
      }
    }
    w.family("vramkit_gpu_process_memory_plan_ratio", "gauge",
             "Device memory used by one process divided by its job's planned bytes.");
    for (const auto& g : s.gpus) {
      for (const auto& p : g.processes) {
        if (auto r = plan_use(p.used_bytes, p.owner)) process_value(w, g, p, *r);
      }
    }
  }
  const std::vector<workload_use> uses = workload_uses(s);
  if (uses.empty()) return;
  w.family("vramkit_workload_gpu_memory_used_bytes", "gauge",
           "Device memory used on one GPU by all processes of one workload (a pod's container or "
           "a Slurm job), in bytes.");
  for (const auto& u : uses) workload_value(w, u, static_cast<double>(u.used_bytes));
  const bool planned =
      std::any_of(uses.begin(), uses.end(), [](const workload_use& u) { return u.planned_bytes; });
  if (!planned) return;
  w.family("vramkit_workload_gpu_memory_planned_bytes", "gauge",
           "Device memory one workload planned for one GPU, in bytes.");
  for (const auto& u : uses) {
    if (u.planned_bytes) workload_value(w, u, static_cast<double>(*u.planned_bytes));
  }
  w.family("vramkit_workload_gpu_memory_plan_ratio", "gauge",
           "Device memory used on one GPU by one workload divided by its planned bytes (an alert "
           "at 0.9: deploy/prometheus/vramkit-rules.yaml).");
  for (const auto& u : uses) {
    if (u.planned_bytes && *u.planned_bytes > 0)
      workload_value(w, u,
                     static_cast<double>(u.used_bytes) / static_cast<double>(*u.planned_bytes));
  }
}

}  // namespace

std::string render_metrics(const sample& s, const exporter_stats& stats) {
  std::string out = render_sample_metrics(s, stats.samples_total);
  out += render_scrape_counter(stats.scrapes_total);
  return out;
}

std::string render_scrape_counter(std::uint64_t scrapes_total) {
  writer w;
  w.family("vramkit_exporter_scrapes_total", "counter", "Scrapes of /metrics served since start.");
  w.value({}, static_cast<double>(scrapes_total));
  return w.take();
}

std::string render_sample_metrics(const sample& s, std::uint64_t samples_total) {
  writer w;
  w.family(gpu_up_metric, "gauge",
           "1 when the GPU answered its memory query in the latest sample, 0 when it is lost or in "
           "error.");
  for (const auto& g : s.gpus) {
    w.value({{"gpu", std::to_string(g.index)}, {"uuid", g.uuid}, {"name", g.name}},
            g.state == device_state::ok ? 1 : 0);
  }
  for (const auto& f : gpu_fields()) gpu_family(w, s, f);

  process_families(w, s);

  if (s.host.memory) {
    const auto& m = *s.host.memory;
    w.family("vramkit_host_memory_total_bytes", "gauge", "Host memory total in bytes (MemTotal).");
    w.value({}, static_cast<double>(m.total_bytes));
    if (m.available_bytes) {
      w.family("vramkit_host_memory_available_bytes", "gauge",
               "Host memory available for new allocations in bytes (MemAvailable).");
      w.value({}, static_cast<double>(*m.available_bytes));
    }
    if (m.cached_bytes) {
      w.family("vramkit_host_memory_cached_bytes", "gauge", "Host page cache in bytes (Cached).");
      w.value({}, static_cast<double>(*m.cached_bytes));
    }
    if (m.mlocked_bytes) {
      w.family("vramkit_host_memory_mlocked_bytes", "gauge",
               "Host memory locked with mlock in bytes (Mlocked), including pinned buffers.");
      w.value({}, static_cast<double>(*m.mlocked_bytes));
    }
    if (m.hugepages_total && m.hugepage_size_bytes) {
      w.family("vramkit_host_hugepages_total_bytes", "gauge",
               "Host huge pages configured, in bytes.");
      w.value({}, static_cast<double>(*m.hugepages_total * *m.hugepage_size_bytes));
    }
  }
  if (!s.host.numa.empty()) {
    w.family("vramkit_host_numa_memory_total_bytes", "gauge", "Memory of one NUMA node in bytes.");
    for (const auto& n : s.host.numa)
      w.value({{"node", std::to_string(n.node)}}, static_cast<double>(n.total_bytes));
    w.family("vramkit_host_numa_memory_free_bytes", "gauge",
             "Free memory of one NUMA node in bytes.");
    for (const auto& n : s.host.numa)
      w.value({{"node", std::to_string(n.node)}}, static_cast<double>(n.free_bytes));
  }
  if (s.host.cgroup) {
    if (s.host.cgroup->limit_bytes) {
      w.family("vramkit_cgroup_memory_limit_bytes", "gauge",
               "Memory limit of this process's cgroup in bytes (absent when unlimited).");
      w.value({}, static_cast<double>(*s.host.cgroup->limit_bytes));
    }
    if (s.host.cgroup->usage_bytes) {
      w.family("vramkit_cgroup_memory_usage_bytes", "gauge",
               "Memory charged to this process's cgroup in bytes.");
      w.value({}, static_cast<double>(*s.host.cgroup->usage_bytes));
    }
  }
  bool any_rss = false;
  for (const auto& p : s.host.processes) any_rss = any_rss || p.rss_bytes.has_value();
  if (any_rss) {
    w.family("vramkit_process_resident_memory_bytes", "gauge",
             "Host resident memory (VmRSS) of a process that uses a GPU, in bytes.");
    for (const auto& p : s.host.processes) {
      if (p.rss_bytes)
        w.value({{"pid", std::to_string(p.pid)}, {"command", command_label(p.command)}},
                static_cast<double>(*p.rss_bytes));
    }
  }
  w.family("vramkit_exporter_samples_total", "counter",
           "Samples taken by the background sampler since start.");
  w.value({}, static_cast<double>(samples_total));
  w.family("vramkit_exporter_sample_duration_seconds", "gauge",
           "Time the latest sample took to read every GPU and the host, in seconds.");
  w.value({}, s.sample_duration_seconds);
  w.family("vramkit_exporter_last_sample_timestamp_seconds", "gauge",
           "Unix time of the latest sample in seconds.");
  w.value({}, static_cast<double>(s.timestamp_ms) / 1000.0);
  return w.take();
}

}  // namespace vramkit::monitor

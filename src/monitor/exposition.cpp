// Prometheus text exposition of a sample. Families are written whole (HELP, TYPE, then all their
// samples) in a fixed order; values in base units.
#include "vramkit/monitor/exposition.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

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

}  // namespace

std::string render_metrics(const sample& s, const exporter_stats& stats) {
  writer w;
  w.family(gpu_up_metric, "gauge",
           "1 when the GPU answered its memory query in the latest sample, 0 when it is lost or in "
           "error.");
  for (const auto& g : s.gpus) {
    w.value({{"gpu", std::to_string(g.index)}, {"uuid", g.uuid}, {"name", g.name}},
            g.state == device_state::ok ? 1 : 0);
  }
  for (const auto& f : gpu_fields()) gpu_family(w, s, f);

  bool any_proc = false;
  for (const auto& g : s.gpus) {
    for (const auto& p : g.processes) any_proc = any_proc || p.used_bytes.has_value();
  }
  if (any_proc) {
    w.family("vramkit_gpu_process_memory_used_bytes", "gauge",
             "Device memory used by one process in bytes.");
    for (const auto& g : s.gpus) {
      for (const auto& p : g.processes) {
        if (!p.used_bytes) continue;
        w.value({{"gpu", std::to_string(g.index)},
                 {"uuid", g.uuid},
                 {"name", g.name},
                 {"pid", std::to_string(p.pid)},
                 {"command", command_label(p.command)}},
                static_cast<double>(*p.used_bytes));
      }
    }
  }

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
  w.family("vramkit_exporter_scrapes_total", "counter", "Scrapes of /metrics served since start.");
  w.value({}, static_cast<double>(stats.scrapes_total));
  w.family("vramkit_exporter_samples_total", "counter",
           "Samples taken by the background sampler since start.");
  w.value({}, static_cast<double>(stats.samples_total));
  w.family("vramkit_exporter_sample_duration_seconds", "gauge",
           "Time the latest sample took to read every GPU and the host, in seconds.");
  w.value({}, s.sample_duration_seconds);
  w.family("vramkit_exporter_last_sample_timestamp_seconds", "gauge",
           "Unix time of the latest sample in seconds.");
  w.value({}, static_cast<double>(s.timestamp_ms) / 1000.0);
  return w.take();
}

}  // namespace vramkit::monitor

// sampler: one pass over every GPU (through nvml_api) and the host readers per call.
#include "vramkit/monitor/sampler.hpp"

#include <algorithm>
#include <chrono>
#include <set>

#include "vramkit/core/error.hpp"
#include "vramkit/core/units.hpp"
#include "vramkit/monitor/host_reader.hpp"

namespace vramkit::monitor {

const char* to_string(device_state s) noexcept {
  switch (s) {
    case device_state::ok:
      return "ok";
    case device_state::lost:
      return "lost";
    case device_state::error:
      return "error";
  }
  return "error";
}

device_state device_state_from_string(const std::string& text) {
  if (text == "ok") return device_state::ok;
  if (text == "lost") return device_state::lost;
  if (text == "error") return device_state::error;
  throw invalid_input("unknown device state '" + text + "'");
}

std::int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::chrono::milliseconds parse_interval(const std::string& text) {
  const auto interval = parse_duration(text, "interval");
  if (interval < std::chrono::milliseconds(10) || interval > std::chrono::hours(1))
    throw invalid_input("interval '" + text + "' must be between 10ms and 1h");
  return interval;
}

namespace {

const char* kind_name(nvml_process_kind k) {
  switch (k) {
    case nvml_process_kind::compute:
      return "compute";
    case nvml_process_kind::graphics:
      return "graphics";
    case nvml_process_kind::compute_and_graphics:
      return "compute+graphics";
  }
  return "compute";
}

template <typename T>
void note(gpu_sample& g, const char* query, const nvml_value<T>& v) {
  if (!v.ok()) g.unavailable[query] = to_string(v.status);
}

/// Per-second rates from cumulative rx/tx counters against the previous reading `prev` (none for
/// the first reading, or when the clock or a counter went backwards); `prev` becomes this reading.
template <class Prev>
bool counter_rates(Prev& prev, std::int64_t now, std::uint64_t rx, std::uint64_t tx,
                   std::optional<double>& rx_rate, std::optional<double>& tx_rate) {
  const bool have = prev.at_ms != 0 && now > prev.at_ms && rx >= prev.rx && tx >= prev.tx;
  if (have) {
    const double secs = static_cast<double>(now - prev.at_ms) / 1000.0;
    rx_rate = static_cast<double>(rx - prev.rx) / secs;
    tx_rate = static_cast<double>(tx - prev.tx) / secs;
  }
  prev = {now, rx, tx};
  return have;
}

mig_instance to_mig_instance(const nvml_mig_instance& inst) {
  mig_instance mi;
  mi.gpu_instance_id = inst.gpu_instance_id;
  mi.compute_instance_id = inst.compute_instance_id;
  mi.uuid = inst.uuid;
  if (inst.memory) {
    mi.memory_total_bytes = inst.memory->total;
    mi.memory_used_bytes = inst.memory->used;
  }
  return mi;
}

}  // namespace

sampler::sampler(result<std::shared_ptr<nvml_api>> gpus, sampler_options options)
    : options_(std::move(options)) {
  if (gpus) {
    gpus_ = *gpus;
  } else {
    reason_ = gpus.error().reason;
  }
  if (!options_.clock_ms) options_.clock_ms = now_ms;
}

void sampler::validate_devices() {
  if (options_.devices.empty()) return;
  unsigned count = 0;
  if (gpus_ != nullptr) {
    auto c = gpus_->device_count();
    if (c.ok()) count = c.value;
  }
  for (unsigned d : options_.devices) {
    if (d >= count) {
      throw invalid_input("unknown device " + std::to_string(d) +
                          (count == 0 ? std::string(": no GPUs are visible")
                                      : ": valid devices are 0.." + std::to_string(count - 1)));
    }
  }
}

gpu_sample sampler::read_gpu(unsigned index, std::int64_t now) {
  gpu_sample g;
  g.index = index;
  auto mem = gpus_->memory(index);
  auto name = gpus_->device_name(index);
  auto uuid = gpus_->device_uuid(index);
  if (name.ok()) g.name = name.value;
  if (uuid.ok()) g.uuid = uuid.value;
  if (!mem.ok()) {
    // Memory is what this monitor is about: without it the device is lost or in error, and the
    // other queries are not worth their latency.
    g.state = (mem.status == nvml_status::gpu_lost || mem.status == nvml_status::not_found)
                  ? device_state::lost
                  : device_state::error;
    g.state_reason = "memory: " + mem.detail;
    note(g, "memory", mem);
    return g;
  }
  g.memory_total_bytes = mem.value.total;
  g.memory_used_bytes = mem.value.used;
  g.memory_free_bytes = mem.value.free;
  g.memory_reserved_bytes = mem.value.reserved;

  if (auto u = gpus_->utilization(index); u.ok()) {
    g.utilization_gpu_percent = u.value.gpu_percent;
    g.utilization_memory_percent = u.value.memory_percent;
  } else {
    note(g, "utilization", u);
  }
  // PCIe: cumulative counters differentiated between samples where the driver has them (free);
  // else, and for the first sample, the driver's windowed rate (blocks 2 x 20 ms).
  bool pcie_done = false;
  if (auto c = gpus_->pcie_counters(index); c.ok()) {
    pcie_done = counter_rates(pcie_prev_[g.uuid], now, c.value.rx_bytes, c.value.tx_bytes,
                              g.pcie_rx_bytes_per_second, g.pcie_tx_bytes_per_second);
  }
  if (!pcie_done) {
    if (auto p = gpus_->pcie_throughput(index); p.ok()) {
      g.pcie_rx_bytes_per_second = static_cast<double>(p.value.rx_bytes_per_second);
      g.pcie_tx_bytes_per_second = static_cast<double>(p.value.tx_bytes_per_second);
    } else {
      note(g, "pcie", p);
    }
  }
  if (auto n = gpus_->nvlink_counters(index); n.ok()) {
    counter_rates(nvlink_prev_[g.uuid], now, n.value.rx_bytes, n.value.tx_bytes,
                  g.nvlink_rx_bytes_per_second, g.nvlink_tx_bytes_per_second);
  } else {
    note(g, "nvlink", n);
  }
  if (auto c = gpus_->clocks(index, nvml_reading::current); c.ok()) {
    g.sm_clock_mhz = c.value.sm_mhz;
    g.memory_clock_mhz = c.value.memory_mhz;
  } else {
    note(g, "clocks", c);
  }
  if (auto t = gpus_->temperature_celsius(index); t.ok())
    g.temperature_celsius = t.value;
  else
    note(g, "temperature", t);
  if (auto p = gpus_->power_watts(index); p.ok())
    g.power_watts = p.value;
  else
    note(g, "power", p);
  if (auto e = gpus_->ecc(index); e.ok()) {
    g.ecc_corrected_errors = e.value.corrected;
    g.ecc_uncorrected_errors = e.value.uncorrected;
    g.retired_pages = e.value.retired_pages;
  } else {
    note(g, "ecc", e);
  }
  if (auto m = gpus_->mig_instances(index); m.ok()) {
    for (const auto& inst : m.value) g.mig.push_back(to_mig_instance(inst));
  } else {
    note(g, "mig", m);
  }
  if (auto procs = gpus_->processes(index); procs.ok()) {
    for (const auto& p : procs.value) {
      gpu_process gp;
      gp.pid = p.pid;
      gp.used_bytes = p.used_bytes;
      gp.kind = kind_name(p.kind);
      gp.command = p.name;
      g.processes.push_back(std::move(gp));
    }
  } else {
    note(g, "processes", procs);
  }
  return g;
}

sample sampler::take() {
  auto start = std::chrono::steady_clock::now();
  sample s;
  s.timestamp_ms = options_.clock_ms();
  if (gpus_ == nullptr) {
    s.gpu_unavailable_reason = reason_;
  } else {
    s.gpu_source = gpus_->name();
    if (auto v = gpus_->driver_version(); v.ok()) s.driver_version = v.value;
    auto count = gpus_->device_count();
    if (!count.ok()) {
      s.gpu_unavailable_reason = "device count failed: " + count.detail;
      // Devices the user asked for are still listed, each marked, so a view keeps its panels.
      for (unsigned d : options_.devices) {
        gpu_sample g;
        g.index = d;
        g.state = device_state::error;
        g.state_reason = s.gpu_unavailable_reason;
        s.gpus.push_back(std::move(g));
      }
    } else {
      std::vector<unsigned> wanted = options_.devices;
      if (wanted.empty()) {
        for (unsigned i = 0; i < count.value; ++i) wanted.push_back(i);
      }
      for (unsigned i : wanted) {
        if (i >= count.value) {
          gpu_sample g;
          g.index = i;
          g.state = device_state::lost;
          g.state_reason = "device " + std::to_string(i) + " is no longer present";
          s.gpus.push_back(std::move(g));
          continue;
        }
        s.gpus.push_back(read_gpu(i, s.timestamp_ms));
      }
      // A lost device no longer answers its name or uuid: keep the last known ones so that its
      // series (vramkit_gpu_up{uuid=...} 0) stay the same series.
      for (auto& g : s.gpus) {
        if (g.state == device_state::ok && !g.uuid.empty()) {
          known_[g.index] = {g.uuid, g.name};
        } else if (g.uuid.empty()) {
          if (auto it = known_.find(g.index); it != known_.end()) {
            g.uuid = it->second.first;
            if (g.name.empty()) g.name = it->second.second;
          }
        }
      }
    }
  }
  if (options_.read_host) {
    s.host.memory = read_host_memory(options_.host_root);
    s.host.numa = read_numa_memory(options_.host_root);
    s.host.cgroup = read_cgroup_memory(options_.host_root);
    std::set<std::uint32_t> pids;
    for (const auto& g : s.gpus) {
      for (const auto& p : g.processes) pids.insert(p.pid);
    }
    for (auto pid : pids) {
      if (auto hp = read_host_process(options_.host_root, pid))
        s.host.processes.push_back(std::move(*hp));
    }
    for (auto& g : s.gpus) {
      for (auto& p : g.processes) {
        if (options_.workload_of) {
          p.owner = options_.workload_of(p.pid);
          p.workload = workload_name(p.owner);
        }
        auto it = std::find_if(s.host.processes.begin(), s.host.processes.end(),
                               [&](const host_process& h) { return h.pid == p.pid; });
        if (it == s.host.processes.end()) continue;
        if (!it->command.empty()) p.command = it->command;
        p.user = it->user;
        p.host_rss_bytes = it->rss_bytes;
      }
    }
  }
  s.sample_duration_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return s;
}

}  // namespace vramkit::monitor

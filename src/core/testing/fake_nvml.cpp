// fake_nvml: scripted devices for tests and --fake-gpus, optionally reloaded from a JSON fixture
// when the file changes; the one reader of the fixture format. One mutex guards the device list.
#include "vramkit/core/testing/fake_nvml.hpp"

#include <cctype>
#include <cstdio>
#include <fstream>
#include <limits>
#include <sstream>
#include <type_traits>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "vramkit/core/error.hpp"

namespace vramkit::testing {

namespace {

nvml_status status_from_string(const std::string& s) {
  for (auto st : {nvml_status::ok, nvml_status::not_supported, nvml_status::no_permission,
                  nvml_status::gpu_lost, nvml_status::not_found, nvml_status::uninitialized,
                  nvml_status::error}) {
    if (s == to_string(st)) return st;
  }
  throw invalid_input(
      "unknown NVML status '" + s +
      "' (expected not_supported, no_permission, gpu_lost, not_found, uninitialized or error)");
}

// A value of type T: for an unsigned T a whole number in T's range (JSON would otherwise convert
// 1e30 or -1 to T with undefined or wrapped results), for a double any number.
template <typename T>
T checked(const nlohmann::json& v, const char* key) {
  if constexpr (std::is_unsigned_v<T>) {
    const bool whole =
        v.is_number_unsigned() || (v.is_number_integer() && v.get<std::int64_t>() >= 0);
    if (!whole || v.get<std::uint64_t>() > std::numeric_limits<T>::max())
      throw invalid_input(fmt::format("{} must be a whole number from 0 to {}", key,
                                      std::numeric_limits<T>::max()));
    return static_cast<T>(v.get<std::uint64_t>());
  } else {
    if (!v.is_number()) throw invalid_input(fmt::format("{} must be a number", key));
    return v.get<T>();
  }
}

template <typename T>
std::optional<T> opt(const nlohmann::json& j, const char* key) {
  if (!j.contains(key) || j.at(key).is_null()) return std::nullopt;
  return checked<T>(j.at(key), key);
}

// A link from two optional fixture keys; none when either is absent.
std::optional<nvml_pcie_link> link(const nlohmann::json& j, const char* generation,
                                   const char* width) {
  auto g = opt<unsigned>(j, generation);
  auto w = opt<unsigned>(j, width);
  if (!g || !w) return std::nullopt;
  return nvml_pcie_link{*g, *w};
}

// The scripted value, or not_supported when the fixture has none.
template <typename T>
nvml_value<T> scripted(const std::optional<T>& v, const char* missing) {
  if (!v) return nvml_value<T>::failure(nvml_status::not_supported, missing);
  return nvml_value<T>::success(*v);
}

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// A byte count: a non-negative integer (JSON would otherwise wrap -1 to 2^64 - 1), or nothing when
// the key is absent or null.
std::optional<std::uint64_t> byte_count(const nlohmann::json& j, const char* key) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::nullopt;
  if (it->is_number_unsigned()) return it->get<std::uint64_t>();
  if (it->is_number_integer() && it->get<std::int64_t>() >= 0) return it->get<std::uint64_t>();
  throw invalid_input(fmt::format("{} must be a non-negative integer", key));
}

nvml_process parse_process(const nlohmann::json& p) {
  nvml_process proc;
  if (!p.is_object() || !p.contains("pid")) throw invalid_input("a process without a pid");
  proc.pid = checked<std::uint32_t>(p.at("pid"), "pid");
  proc.used_bytes = byte_count(p, "used_bytes");
  proc.name = p.value("name", std::string());
  const std::string kind = p.value("kind", std::string("compute"));
  proc.kind = kind == "graphics"           ? nvml_process_kind::graphics
              : kind == "compute+graphics" ? nvml_process_kind::compute_and_graphics
                                           : nvml_process_kind::compute;
  return proc;
}

fake_gpu parse_gpu(const nlohmann::json& g, std::size_t i) {
  if (!g.is_object()) throw invalid_input("not an object");
  fake_gpu gpu;
  gpu.name = g.value("name", std::string("Fake GPU"));
  gpu.uuid = g.value("uuid", "GPU-fake-" + std::to_string(i));
  const auto total = byte_count(g, "memory_total_bytes");
  if (!total) throw invalid_input("no memory_total_bytes");
  gpu.memory_total_bytes = *total;
  gpu.memory_used_bytes = byte_count(g, "memory_used_bytes").value_or(0);
  gpu.memory_reserved_bytes = byte_count(g, "memory_reserved_bytes");
  if (gpu.memory_used_bytes + gpu.memory_reserved_bytes.value_or(0) > gpu.memory_total_bytes) {
    throw invalid_input("memory_used_bytes + memory_reserved_bytes exceed memory_total_bytes");
  }
  // The fixture's flat fields, as each query answers them: the GPU's utilization without the
  // memory's reads as 0 there; either PCIe direction alone gives the other as 0; the current
  // clocks need the SM's, the maximum ones both.
  if (const auto busy = opt<unsigned>(g, "utilization_gpu"))
    gpu.utilization = nvml_utilization{*busy, opt<unsigned>(g, "utilization_memory").value_or(0)};
  gpu.temperature_celsius = opt<double>(g, "temperature_celsius");
  gpu.power_watts = opt<double>(g, "power_watts");
  const auto rx = byte_count(g, "pcie_rx_bytes_per_second");
  const auto tx = byte_count(g, "pcie_tx_bytes_per_second");
  if (rx || tx) gpu.pcie_throughput = nvml_pcie{rx.value_or(0), tx.value_or(0)};
  if (const auto sm = opt<unsigned>(g, "sm_clock_mhz"))
    gpu.clocks = nvml_clocks{*sm, opt<unsigned>(g, "memory_clock_mhz").value_or(0)};
  const auto sm_max = opt<unsigned>(g, "sm_clock_max_mhz");
  const auto memory_max = opt<unsigned>(g, "memory_clock_max_mhz");
  if (sm_max && memory_max) gpu.max_clocks = nvml_clocks{*sm_max, *memory_max};
  gpu.memory_bus_width_bits = opt<unsigned>(g, "memory_bus_width_bits");
  gpu.pci_bus_id = g.value("pci_bus_id", std::string());
  gpu.pcie_link = link(g, "pcie_link_generation", "pcie_link_width");
  gpu.max_pcie_link = link(g, "pcie_link_generation_max", "pcie_link_width_max");
  gpu.lost = g.value("lost", false);
  if (g.contains("processes")) {
    for (const auto& p : g.at("processes")) gpu.processes.push_back(parse_process(p));
  }
  if (g.contains("fail")) {
    for (const auto& [query, status] : g.at("fail").items())
      gpu.failures[query] = status_from_string(status.get<std::string>());
  }
  return gpu;
}

std::string read_file_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw invalid_input(fmt::format("cannot read fixture '{}'", path.string()));
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

fake_nvml::fake_nvml(std::vector<fake_gpu> gpus) : gpus_(std::move(gpus)) {}

std::vector<fake_gpu> fake_nvml::parse(std::string_view json_text, std::string_view origin) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(json_text);
  } catch (const nlohmann::json::exception& e) {
    throw invalid_input(fmt::format("{}: not valid JSON ({})", origin, e.what()));
  }
  if (!j.is_object() || !j.contains("gpus") || !j.at("gpus").is_array()) {
    throw invalid_input(fmt::format("{}: expected an object with a \"gpus\" array", origin));
  }
  std::vector<fake_gpu> out;
  const auto& list = j.at("gpus");
  for (std::size_t i = 0; i < list.size(); ++i) {
    try {
      out.push_back(parse_gpu(list[i], i));
    } catch (const nlohmann::json::exception& e) {
      throw invalid_input(fmt::format("{}: gpus[{}]: {}", origin, i, e.what()));
    } catch (const invalid_input& e) {
      throw invalid_input(fmt::format("{}: gpus[{}]: {}", origin, i, e.what()));
    }
  }
  return out;
}

std::shared_ptr<fake_nvml> fake_nvml::from_file(const std::filesystem::path& path) {
  auto fake = std::make_shared<fake_nvml>(parse(read_file_text(path), path.string()));
  std::error_code ec;
  fake->file_ = path;
  fake->file_mtime_ = std::filesystem::last_write_time(path, ec);
  fake->file_size_ = std::filesystem::file_size(path, ec);
  return fake;
}

void fake_nvml::reload_if_changed() {
  if (file_.empty()) return;
  std::error_code ec;
  auto mtime = std::filesystem::last_write_time(file_, ec);
  if (ec) return;  // being replaced: keep the current figures
  auto size = std::filesystem::file_size(file_, ec);
  if (ec || (mtime == file_mtime_ && size == file_size_)) return;
  try {
    gpus_ = parse(read_file_text(file_), file_.string());
    file_mtime_ = mtime;
    file_size_ = size;
  } catch (const std::exception& e) {
    // A half-written file is retried next time; the old figures stay.
    std::fprintf(stderr, "vramkit: keeping previous fake GPUs: %s\n", e.what());
  }
}

void fake_nvml::set_gpus(std::vector<fake_gpu> gpus) {
  std::lock_guard lock(mutex_);
  gpus_ = std::move(gpus);
}

void fake_nvml::add_gpu(fake_gpu gpu) {
  std::lock_guard lock(mutex_);
  gpus_.push_back(std::move(gpu));
}

void fake_nvml::remove_gpu(unsigned index) {
  std::lock_guard lock(mutex_);
  gpus_.erase(gpus_.begin() + static_cast<std::ptrdiff_t>(index));
}

void fake_nvml::fail_all(std::optional<nvml_status> status) {
  std::lock_guard lock(mutex_);
  fail_all_ = status;
}

std::size_t fake_nvml::calls() const {
  std::lock_guard lock(mutex_);
  return calls_;
}

std::optional<nvml_status> fake_nvml::check(unsigned index, const char* query,
                                            const fake_gpu** gpu) {
  ++calls_;
  if (fail_all_) return fail_all_;
  if (index >= gpus_.size()) return nvml_status::not_found;
  const fake_gpu& g = gpus_[index];
  if (g.lost) return nvml_status::gpu_lost;
  if (auto it = g.failures.find(query); it != g.failures.end()) return it->second;
  *gpu = &g;
  return std::nullopt;
}

#define VRAMKIT_FAKE_QUERY(T, query)                                                            \
  std::lock_guard lock(mutex_);                                                                 \
  const fake_gpu* g = nullptr;                                                                  \
  if (auto st = check(index, query, &g)) {                                                      \
    return nvml_value<T>::failure(*st, std::string("fake: ") + (query) + " " + to_string(*st)); \
  }

nvml_value<std::string> fake_nvml::driver_version() {
  std::lock_guard lock(mutex_);
  if (fail_all_) return nvml_value<std::string>::failure(*fail_all_, "fake: driver unavailable");
  return nvml_value<std::string>::success("fake");
}

nvml_value<unsigned> fake_nvml::device_count() {
  std::lock_guard lock(mutex_);
  ++calls_;
  reload_if_changed();
  if (fail_all_) return nvml_value<unsigned>::failure(*fail_all_, "fake: device count failed");
  return nvml_value<unsigned>::success(static_cast<unsigned>(gpus_.size()));
}

nvml_value<unsigned> fake_nvml::device_index_by_pci_bus_id(const std::string& pci_bus_id) {
  std::lock_guard lock(mutex_);
  ++calls_;
  if (fail_all_) return nvml_value<unsigned>::failure(*fail_all_, "fake: driver unavailable");
  for (std::size_t i = 0; i < gpus_.size(); ++i) {
    if (!gpus_[i].pci_bus_id.empty() && lower(gpus_[i].pci_bus_id) == lower(pci_bus_id)) {
      return nvml_value<unsigned>::success(static_cast<unsigned>(i));
    }
  }
  return nvml_value<unsigned>::failure(nvml_status::not_found, "fake: no GPU at " + pci_bus_id);
}

nvml_value<std::string> fake_nvml::device_name(unsigned index) {
  VRAMKIT_FAKE_QUERY(std::string, "name")
  return nvml_value<std::string>::success(g->name);
}

nvml_value<std::string> fake_nvml::device_uuid(unsigned index) {
  VRAMKIT_FAKE_QUERY(std::string, "uuid")
  return nvml_value<std::string>::success(g->uuid);
}

nvml_value<nvml_memory> fake_nvml::memory(unsigned index) {
  VRAMKIT_FAKE_QUERY(nvml_memory, "memory")
  nvml_memory m;
  m.total = g->memory_total_bytes;
  m.used = g->memory_used_bytes;
  m.reserved = g->memory_reserved_bytes;
  // As the driver's v2 query: total = used + reserved + free.
  std::uint64_t taken = m.used + m.reserved.value_or(0);
  m.free = taken < m.total ? m.total - taken : 0;
  return nvml_value<nvml_memory>::success(m);
}

nvml_value<std::vector<nvml_process>> fake_nvml::processes(unsigned index) {
  VRAMKIT_FAKE_QUERY(std::vector<nvml_process>, "processes")
  return nvml_value<std::vector<nvml_process>>::success(g->processes);
}

template <typename T>
nvml_value<T> fake_nvml::answer(unsigned index, const char* query,
                                std::optional<T> fake_gpu::*field, const char* missing) {
  VRAMKIT_FAKE_QUERY(T, query)
  return scripted(g->*field, missing);
}

// The queries a fake_gpu field of the method's name answers whole, one line each: the field's
// value, "fake: no QUERY" (not_supported) when it is empty, or the failure QUERY is scripted to
// give.
#define VRAMKIT_FAKE_SCRIPTED(T, method, query)                        \
  nvml_value<T> fake_nvml::method(unsigned index) {                    \
    return answer(index, query, &fake_gpu::method, "fake: no " query); \
  }
VRAMKIT_FAKE_SCRIPTED(nvml_utilization, utilization, "utilization")
VRAMKIT_FAKE_SCRIPTED(nvml_pcie, pcie_throughput, "pcie")
VRAMKIT_FAKE_SCRIPTED(unsigned, memory_bus_width_bits, "bus_width")
VRAMKIT_FAKE_SCRIPTED(double, temperature_celsius, "temperature")
VRAMKIT_FAKE_SCRIPTED(double, power_watts, "power")
#undef VRAMKIT_FAKE_SCRIPTED

nvml_value<nvml_pcie_counters> fake_nvml::pcie_counters(unsigned index) {
  VRAMKIT_FAKE_QUERY(nvml_pcie_counters, "pcie")
  // The fake gives rates directly (pcie_throughput), as older drivers do.
  return nvml_value<nvml_pcie_counters>::failure(nvml_status::not_supported,
                                                 "fake: no PCIe counters");
}

nvml_value<nvml_nvlink> fake_nvml::nvlink_counters(unsigned index) {
  VRAMKIT_FAKE_QUERY(nvml_nvlink, "nvlink")
  return nvml_value<nvml_nvlink>::failure(nvml_status::not_supported, "fake: no NVLink");
}

nvml_value<nvml_clocks> fake_nvml::clocks(unsigned index, nvml_reading which) {
  if (which == nvml_reading::max)
    return answer(index, "max_clocks", &fake_gpu::max_clocks, "fake: no max clocks");
  return answer(index, "clocks", &fake_gpu::clocks, "fake: no clocks");
}

nvml_value<nvml_pcie_link> fake_nvml::pcie_link(unsigned index, nvml_reading which) {
  if (which == nvml_reading::max)
    return answer(index, "max_pcie_link", &fake_gpu::max_pcie_link, "fake: no maximum PCIe link");
  return answer(index, "pcie_link", &fake_gpu::pcie_link, "fake: no PCIe link");
}

nvml_value<nvml_ecc> fake_nvml::ecc(unsigned index) {
  VRAMKIT_FAKE_QUERY(nvml_ecc, "ecc")
  return nvml_value<nvml_ecc>::failure(nvml_status::not_supported, "fake: no ECC");
}

nvml_value<std::vector<nvml_mig_instance>> fake_nvml::mig_instances(unsigned index) {
  VRAMKIT_FAKE_QUERY(std::vector<nvml_mig_instance>, "mig")
  return nvml_value<std::vector<nvml_mig_instance>>::success({});
}

#undef VRAMKIT_FAKE_QUERY

}  // namespace vramkit::testing

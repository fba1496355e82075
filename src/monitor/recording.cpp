// JSON Lines and CSV recording of samples, and the tolerant reader used by --replay.
#include "vramkit/monitor/recording.hpp"
#include "vramkit/monitor/safe_text.hpp"

#include <fmt/format.h>

#include <cmath>
#include <ctime>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string_view>
#include <type_traits>
#include <utility>

#include "vramkit/core/error.hpp"
#include "vramkit/monitor/metrics_schema.hpp"

namespace vramkit::monitor {

using nlohmann::json;

namespace {

template <typename T>
void put(json& j, const char* key, const std::optional<T>& v) {
  if (v) j[key] = *v;
}
// `v` as a T, refusing what a plain get<T>() would wrap or truncate: a negative or fractional
// value for an unsigned field (a negative byte count would show as 16384 PiB), or one past T's
// range.
template <typename T>
T number(const json& v, std::string_view key) {
  if constexpr (std::is_floating_point_v<T>) {
    if (!v.is_number()) throw invalid_input(fmt::format("{} is not a number", key));
    return v.get<T>();
  } else {
    if (!v.is_number_integer())
      throw invalid_input(fmt::format("{} is not an integer: {}", key, v.dump()));
    if (v.is_number_unsigned()) {
      const auto u = v.get<std::uint64_t>();
      if (u > static_cast<std::uint64_t>(std::numeric_limits<T>::max()))
        throw invalid_input(fmt::format("{} is out of range: {}", key, u));
      return static_cast<T>(u);
    }
    const auto i = v.get<std::int64_t>();
    if (i < static_cast<std::int64_t>(std::numeric_limits<T>::min()))
      throw invalid_input(fmt::format("{} is negative: {}", key, i));
    return static_cast<T>(i);
  }
}
template <typename T>
T number_at(const json& j, const char* key) {
  return number<T>(j.at(key), key);
}
template <typename T>
void take(const json& j, const char* key, std::optional<T>& v) {
  if (auto it = j.find(key); it != j.end() && !it->is_null()) v = number<T>(*it, key);
}

// The text fields of a process's owner, by their key in a recording.
constexpr std::pair<const char*, std::string process_owner::*> owner_text_fields[] = {
    {"pod", &process_owner::pod},
    {"namespace", &process_owner::pod_namespace},
    {"pod_uid", &process_owner::pod_uid},
    {"container", &process_owner::container},
    {"container_id", &process_owner::container_id},
    {"slurm_job", &process_owner::slurm_job},
    {"slurm_step", &process_owner::slurm_step}};

// A process's owner: only the fields that are known, so that recordings of plain hosts stay
// as they were.
json owner_to_json(const process_owner& o) {
  json j = json::object();
  for (const auto& [key, member] : owner_text_fields) {
    if (!(o.*member).empty()) j[key] = o.*member;
  }
  put(j, "namespace_pid", o.namespace_pid);
  put(j, "planned_bytes", o.planned_bytes);
  if (o.planned_from != plan_source::none) j["planned_from"] = to_string(o.planned_from);
  return j;
}

process_owner owner_from_json(const json& j) {
  if (!j.is_object()) throw invalid_input("a process's owner is not a JSON object");
  process_owner o;
  auto text = [&](const char* key, std::string& v) {
    if (auto it = j.find(key); it != j.end()) {
      if (!it->is_string()) throw invalid_input(fmt::format("owner {} is not a string", key));
      v = it->get<std::string>();
    }
  };
  for (const auto& [key, member] : owner_text_fields) text(key, o.*member);
  take(j, "namespace_pid", o.namespace_pid);
  take(j, "planned_bytes", o.planned_bytes);
  std::string from;
  text("planned_from", from);
  o.planned_from = plan_source_from_string(from);
  return o;
}

json gpu_to_json(const gpu_sample& g) {
  json j;
  j["index"] = g.index;
  j["uuid"] = g.uuid;
  j["name"] = g.name;
  j["state"] = to_string(g.state);
  if (!g.state_reason.empty()) j["state_reason"] = g.state_reason;
  for (const auto& f : gpu_fields()) {
    std::visit(
        [&](auto member) {
          if (const auto& v = g.*member) j[std::string(f.key)] = *v;
        },
        f.member);
  }
  if (!g.mig.empty()) {
    json mig = json::array();
    for (const auto& m : g.mig) {
      json mj{{"gpu_instance_id", m.gpu_instance_id},
              {"compute_instance_id", m.compute_instance_id},
              {"uuid", m.uuid}};
      put(mj, "memory_total_bytes", m.memory_total_bytes);
      put(mj, "memory_used_bytes", m.memory_used_bytes);
      mig.push_back(std::move(mj));
    }
    j["mig"] = std::move(mig);
  }
  json procs = json::array();
  for (const auto& p : g.processes) {
    json pj{{"pid", p.pid}, {"kind", p.kind}, {"command", p.command}, {"user", p.user}};
    put(pj, "used_bytes", p.used_bytes);
    put(pj, "host_rss_bytes", p.host_rss_bytes);
    if (!p.workload.empty()) pj["workload"] = p.workload;
    if (!p.owner.empty() || p.owner.planned_bytes) pj["owner"] = owner_to_json(p.owner);
    procs.push_back(std::move(pj));
  }
  j["processes"] = std::move(procs);
  if (!g.unavailable.empty()) j["unavailable"] = g.unavailable;
  return j;
}

gpu_sample gpu_from_json(const json& j) {
  gpu_sample g;
  g.index = number_at<unsigned>(j, "index");
  g.uuid = j.value("uuid", std::string());
  g.name = j.value("name", std::string());
  g.state = device_state_from_string(j.value("state", std::string("ok")));
  g.state_reason = j.value("state_reason", std::string());
  for (const auto& f : gpu_fields()) {
    std::visit([&](auto member) { take(j, std::string(f.key).c_str(), g.*member); }, f.member);
  }
  if (auto it = j.find("mig"); it != j.end()) {
    for (const auto& mj : *it) {
      mig_instance m;
      m.gpu_instance_id =
          mj.contains("gpu_instance_id") ? number_at<unsigned>(mj, "gpu_instance_id") : 0;
      m.compute_instance_id =
          mj.contains("compute_instance_id") ? number_at<unsigned>(mj, "compute_instance_id") : 0;
      m.uuid = mj.value("uuid", std::string());
      take(mj, "memory_total_bytes", m.memory_total_bytes);
      take(mj, "memory_used_bytes", m.memory_used_bytes);
      g.mig.push_back(std::move(m));
    }
  }
  if (auto it = j.find("processes"); it != j.end()) {
    for (const auto& pj : *it) {
      gpu_process p;
      p.pid = number_at<std::uint32_t>(pj, "pid");
      p.kind = pj.value("kind", std::string("compute"));
      p.command = pj.value("command", std::string());
      p.user = pj.value("user", std::string());
      take(pj, "used_bytes", p.used_bytes);
      take(pj, "host_rss_bytes", p.host_rss_bytes);
      p.workload = pj.value("workload", std::string());
      if (auto o = pj.find("owner"); o != pj.end()) p.owner = owner_from_json(*o);
      g.processes.push_back(std::move(p));
    }
  }
  if (auto it = j.find("unavailable"); it != j.end())
    g.unavailable = it->get<std::map<std::string, std::string>>();
  return g;
}

json host_to_json(const host_sample& h) {
  json j = json::object();
  if (h.memory) {
    const auto& m = *h.memory;
    json mj{{"total_bytes", m.total_bytes}};
    put(mj, "available_bytes", m.available_bytes);
    put(mj, "free_bytes", m.free_bytes);
    put(mj, "cached_bytes", m.cached_bytes);
    put(mj, "buffers_bytes", m.buffers_bytes);
    put(mj, "swap_total_bytes", m.swap_total_bytes);
    put(mj, "swap_free_bytes", m.swap_free_bytes);
    put(mj, "hugepages_total", m.hugepages_total);
    put(mj, "hugepages_free", m.hugepages_free);
    put(mj, "hugepage_size_bytes", m.hugepage_size_bytes);
    put(mj, "mlocked_bytes", m.mlocked_bytes);
    put(mj, "unevictable_bytes", m.unevictable_bytes);
    j["memory"] = std::move(mj);
  }
  json numa = json::array();
  for (const auto& n : h.numa) {
    json nj{{"node", n.node}, {"total_bytes", n.total_bytes}, {"free_bytes", n.free_bytes}};
    put(nj, "used_bytes", n.used_bytes);
    numa.push_back(std::move(nj));
  }
  j["numa"] = std::move(numa);
  if (h.cgroup) {
    json cj{{"version", h.cgroup->version}, {"path", h.cgroup->path}};
    put(cj, "limit_bytes", h.cgroup->limit_bytes);
    put(cj, "usage_bytes", h.cgroup->usage_bytes);
    j["cgroup"] = std::move(cj);
  }
  json procs = json::array();
  for (const auto& p : h.processes) {
    json pj{{"pid", p.pid}, {"command", p.command}, {"user", p.user}};
    put(pj, "rss_bytes", p.rss_bytes);
    put(pj, "locked_bytes", p.locked_bytes);
    put(pj, "pinned_bytes", p.pinned_bytes);
    procs.push_back(std::move(pj));
  }
  j["processes"] = std::move(procs);
  return j;
}

host_sample host_from_json(const json& j) {
  host_sample h;
  if (auto it = j.find("memory"); it != j.end()) {
    host_memory m;
    m.total_bytes = number_at<std::uint64_t>(*it, "total_bytes");
    take(*it, "available_bytes", m.available_bytes);
    take(*it, "free_bytes", m.free_bytes);
    take(*it, "cached_bytes", m.cached_bytes);
    take(*it, "buffers_bytes", m.buffers_bytes);
    take(*it, "swap_total_bytes", m.swap_total_bytes);
    take(*it, "swap_free_bytes", m.swap_free_bytes);
    take(*it, "hugepages_total", m.hugepages_total);
    take(*it, "hugepages_free", m.hugepages_free);
    take(*it, "hugepage_size_bytes", m.hugepage_size_bytes);
    take(*it, "mlocked_bytes", m.mlocked_bytes);
    take(*it, "unevictable_bytes", m.unevictable_bytes);
    h.memory = m;
  }
  if (auto it = j.find("numa"); it != j.end()) {
    for (const auto& nj : *it) {
      numa_node_memory n;
      n.node = number_at<unsigned>(nj, "node");
      n.total_bytes = number_at<std::uint64_t>(nj, "total_bytes");
      n.free_bytes = number_at<std::uint64_t>(nj, "free_bytes");
      take(nj, "used_bytes", n.used_bytes);
      h.numa.push_back(n);
    }
  }
  if (auto it = j.find("cgroup"); it != j.end()) {
    cgroup_memory c;
    c.version = it->value("version", 2);
    c.path = it->value("path", std::string());
    take(*it, "limit_bytes", c.limit_bytes);
    take(*it, "usage_bytes", c.usage_bytes);
    h.cgroup = c;
  }
  if (auto it = j.find("processes"); it != j.end()) {
    for (const auto& pj : *it) {
      host_process p;
      p.pid = number_at<std::uint32_t>(pj, "pid");
      p.command = pj.value("command", std::string());
      p.user = pj.value("user", std::string());
      take(pj, "rss_bytes", p.rss_bytes);
      take(pj, "locked_bytes", p.locked_bytes);
      take(pj, "pinned_bytes", p.pinned_bytes);
      h.processes.push_back(std::move(p));
    }
  }
  return h;
}

std::string csv_quote(const std::string& s) {
  if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) {
    if (c == '"') out += '"';
    out += (c == '\n' || c == '\r') ? ' ' : c;
  }
  return out + "\"";
}

std::string csv_num(const std::optional<std::uint64_t>& v) {
  return v ? std::to_string(*v) : std::string();
}

// Splits one CSV line (RFC 4180 quoting); throws invalid_input on an unterminated quote.
std::vector<std::string> csv_split(const std::string& line) {
  std::vector<std::string> out;
  std::string cur;
  bool quoted = false;
  for (std::size_t i = 0; i < line.size(); ++i) {
    char c = line[i];
    if (quoted) {
      if (c == '"') {
        if (i + 1 < line.size() && line[i + 1] == '"') {
          cur += '"';
          ++i;
        } else {
          quoted = false;
        }
      } else {
        cur += c;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      out.push_back(std::move(cur));
      cur.clear();
    } else if (c != '\r') {
      cur += c;
    }
  }
  if (quoted) throw invalid_input("unterminated quoted field");
  out.push_back(std::move(cur));
  return out;
}

// timestamp, epoch_ms, device, uuid, name, state, the GPU figures of the schema, process_count,
// and the two host figures.
const std::vector<std::string>& csv_columns() {
  static const std::vector<std::string> cols = [] {
    std::vector<std::string> out = {"timestamp", "epoch_ms", "device", "uuid", "name", "state"};
    for (const gpu_field* f : gpu_csv_fields()) out.emplace_back(f->key);
    out.insert(out.end(),
               {"process_count", "host_memory_total_bytes", "host_memory_available_bytes"});
    return out;
  }();
  return cols;
}

template <typename T>
std::optional<T> csv_parse(const std::string& field, const char* column) {
  return detail::parse_number<T>(field, column);
}

}  // namespace

std::string format_iso8601_ms(std::int64_t epoch_ms) {
  std::time_t secs = static_cast<std::time_t>(epoch_ms / 1000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  return fmt::format("{}.{:03d}Z", buf, static_cast<int>(epoch_ms % 1000));
}

std::string to_json_line(const sample& s) {
  json j;
  j["schema_version"] = sample_schema_version;
  j["timestamp"] = format_iso8601_ms(s.timestamp_ms);
  j["timestamp_ms"] = s.timestamp_ms;
  j["sample_duration_seconds"] = s.sample_duration_seconds;
  j["gpu_source"] = s.gpu_source;
  if (!s.gpu_unavailable_reason.empty()) j["gpu_unavailable_reason"] = s.gpu_unavailable_reason;
  if (!s.driver_version.empty()) j["driver_version"] = s.driver_version;
  json gpus = json::array();
  for (const auto& g : s.gpus) gpus.push_back(gpu_to_json(g));
  j["gpus"] = std::move(gpus);
  j["host"] = host_to_json(s.host);
  // Command lines are not guaranteed UTF-8: replace bad bytes rather than fail the sample.
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

sample sample_from_json(const std::string& line) {
  try {
    json j = json::parse(line);
    if (!j.is_object()) throw invalid_input("not a JSON object");
    const int version = j.contains("schema_version") ? number_at<int>(j, "schema_version") : 0;
    if (version != sample_schema_version) {
      throw invalid_input("schema_version " + std::to_string(version) + " (this vramkit reads " +
                          std::to_string(sample_schema_version) + ")");
    }
    sample s;
    s.timestamp_ms = number_at<std::int64_t>(j, "timestamp_ms");
    if (auto it = j.find("sample_duration_seconds"); it != j.end() && !it->is_null())
      s.sample_duration_seconds = number<double>(*it, "sample_duration_seconds");
    s.gpu_source = j.value("gpu_source", std::string());
    s.gpu_unavailable_reason = j.value("gpu_unavailable_reason", std::string());
    s.driver_version = j.value("driver_version", std::string());
    for (const auto& g : j.at("gpus")) s.gpus.push_back(gpu_from_json(g));
    if (auto it = j.find("host"); it != j.end()) s.host = host_from_json(*it);
    return s;
  } catch (const json::exception& e) {
    throw invalid_input(std::string("invalid sample JSON: ") + e.what());
  }
}

std::string csv_header() {
  std::string out;
  for (const auto& c : csv_columns()) {
    if (!out.empty()) out += ',';
    out += c;
  }
  return out;
}

std::vector<std::string> to_csv_lines(const sample& s) {
  std::vector<std::string> out;
  std::optional<std::uint64_t> host_total, host_avail;
  if (s.host.memory) {
    host_total = s.host.memory->total_bytes;
    host_avail = s.host.memory->available_bytes;
  }
  auto row = [&](const gpu_sample* g) {
    std::vector<std::string> f;
    f.push_back(format_iso8601_ms(s.timestamp_ms));
    f.push_back(std::to_string(s.timestamp_ms));
    if (g == nullptr) {
      f.push_back("-");
      f.resize(csv_columns().size() - 2);
    } else {
      f.push_back(std::to_string(g->index));
      f.push_back(csv_quote(printable(g->uuid)));
      f.push_back(csv_quote(printable(g->name)));
      f.push_back(to_string(g->state));
      for (const gpu_field* field : gpu_csv_fields()) f.push_back(field_text(*g, *field));
      f.push_back(std::to_string(g->processes.size()));
    }
    f.push_back(csv_num(host_total));
    f.push_back(csv_num(host_avail));
    std::string line;
    for (std::size_t i = 0; i < f.size(); ++i) {
      if (i != 0) line += ',';
      line += f[i];
    }
    return line;
  };
  if (s.gpus.empty()) out.push_back(row(nullptr));
  for (const auto& g : s.gpus) out.push_back(row(&g));
  return out;
}

recording parse_recording(const std::string& text) {
  recording rec;
  std::istringstream in(text);
  std::string line;
  std::size_t line_no = 0;
  bool header_seen = false;
  std::map<std::string, std::size_t> col;  // CSV column name -> index
  while (std::getline(in, line)) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    if (rec.format.empty()) rec.format = line.front() == '{' ? "jsonl" : "csv";
    try {
      if (rec.format == "jsonl") {
        rec.samples.push_back(sample_from_json(line));
        continue;
      }
      auto fields = csv_split(line);
      if (!header_seen) {
        col.clear();
        for (std::size_t i = 0; i < fields.size(); ++i) {
          // A repeated name would leave fewer columns than fields, and rows of that many fields
          // would then be read past their end.
          if (!col.emplace(fields[i], i).second)
            throw invalid_input("CSV header repeats column " + fields[i]);
        }
        for (const char* need : {"epoch_ms", "device"}) {
          if (!col.count(need)) throw invalid_input(std::string("CSV header lacks column ") + need);
        }
        header_seen = true;
        continue;
      }
      if (fields.size() != col.size()) {
        throw invalid_input(std::to_string(fields.size()) + " fields, header has " +
                            std::to_string(col.size()));
      }
      auto field = [&](std::string_view name) -> std::string {
        auto it = col.find(std::string(name));
        return it == col.end() ? std::string() : fields[it->second];
      };
      // Everything of the row is parsed before the recording changes: a bad line leaves no
      // half-filled sample behind.
      auto ts = csv_parse<std::int64_t>(field("epoch_ms"), "epoch_ms");
      if (!ts) throw invalid_input("column epoch_ms is empty");
      std::optional<host_memory> host;
      if (auto total = csv_parse<std::uint64_t>(field("host_memory_total_bytes"),
                                                "host_memory_total_bytes")) {
        host_memory m;
        m.total_bytes = *total;
        m.available_bytes = csv_parse<std::uint64_t>(field("host_memory_available_bytes"),
                                                     "host_memory_available_bytes");
        host = m;
      }
      std::optional<gpu_sample> gpu;
      if (field("device") != "-") {
        gpu_sample g;
        auto idx = csv_parse<unsigned>(field("device"), "device");
        if (!idx) throw invalid_input("column device is empty");
        g.index = *idx;
        g.uuid = field("uuid");
        g.name = field("name");
        std::string state = field("state");
        g.state = state.empty() ? device_state::ok : device_state_from_string(state);
        for (const gpu_field* f : gpu_csv_fields()) set_field_text(g, *f, field(f->key));
        gpu = std::move(g);
      }
      if (rec.samples.empty() || rec.samples.back().timestamp_ms != *ts) {
        sample s;
        s.timestamp_ms = *ts;
        s.gpu_source = "replay";
        rec.samples.push_back(std::move(s));
      }
      sample& s = rec.samples.back();
      if (host) s.host.memory = host;
      if (gpu) s.gpus.push_back(std::move(*gpu));
    } catch (const invalid_input& e) {
      rec.errors.push_back({line_no, e.what()});
    }
  }
  return rec;
}

recording read_recording(const std::filesystem::path& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw invalid_input("recording " + path.string() + " is a directory");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw invalid_input("cannot read recording " + path.string());
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw invalid_input("cannot read recording " + path.string());
  return parse_recording(ss.str());
}

}  // namespace vramkit::monitor

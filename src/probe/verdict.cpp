// Verdicts against the reference table (see verdict.hpp and docs/probe.md).
#include "vramkit/probe/verdict.hpp"

#include <algorithm>
#include <cctype>
#include <regex>

#include <fmt/format.h>

#include "vramkit/core/error.hpp"
#include "vramkit_probe_reference_json.hpp"

namespace vramkit::probe {
namespace {

using nlohmann::json;

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

std::optional<double> header_number(const probe_report& r, const std::string& key) {
  const auto it = r.header.find(key);
  if (it == r.header.end()) return std::nullopt;
  try {
    std::size_t used = 0;
    const double v = std::stod(it->second, &used);
    return v;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

std::string trim_number(double v) { return fmt::format("{:.4g}", v); }

// "gpu3" -> 3, "gpu0->gpu1" -> 0; nullopt for host devices.
std::optional<int> gpu_index(const std::string& device) {
  if (device.rfind("gpu", 0) != 0) return std::nullopt;
  std::size_t i = 3;
  int n = 0;
  bool any = false;
  while (i < device.size() && std::isdigit(static_cast<unsigned char>(device[i]))) {
    n = n * 10 + (device[i] - '0');
    ++i;
    any = true;
  }
  return any ? std::optional<int>(n) : std::nullopt;
}

bool link_bound(const std::string& key) {
  for (const char* part : {".h2d.", ".d2h.", ".bidir.", ".zerocopy", ".managed."}) {
    if (key.find(part) != std::string::npos) return true;
  }
  return false;
}

// Likely causes of a low GPU figure, from the header fields the GPU side fills.
std::vector<std::string> low_causes(const probe_report& r, const measurement& m, int n,
                                    const reference_model& model) {
  std::vector<std::string> causes;
  const std::string g = fmt::format("gpu.{}.", n);
  if (link_bound(m.key)) {
    const auto gen = header_number(r, g + "pcie.gen.current");
    const auto gen_max = header_number(r, g + "pcie.gen.max");
    const auto width = header_number(r, g + "pcie.width.current");
    const auto width_max = header_number(r, g + "pcie.width.max");
    const bool slow_gen = gen && gen_max && *gen < *gen_max;
    const bool narrow = width && width_max && *width < *width_max;
    if (slow_gen || narrow) {
      causes.push_back(fmt::format("PCIe link trained at gen {} x{}, below its maximum gen {} x{}",
                                   gen ? trim_number(*gen) : "?", width ? trim_number(*width) : "?",
                                   gen_max ? trim_number(*gen_max) : "?",
                                   width_max ? trim_number(*width_max) : "?"));
    } else {
      const auto ds_gen = model.datasheet.find("pcie_gen");
      if (gen_max && ds_gen != model.datasheet.end() && *gen_max < ds_gen->second) {
        causes.push_back(
            fmt::format("PCIe link at most gen {} here, the card supports gen {}: the "
                        "slot or host limits it",
                        trim_number(*gen_max), trim_number(ds_gen->second)));
      }
    }
    if (m.key.find("pageable") != std::string::npos) {
      causes.push_back(
          "pageable memory: the driver stages it through pinned buffers (use pinned "
          "memory for full speed)");
    }
    const auto node = m.extra.find("host_numa_node");
    const auto gpu_node = header_number(r, g + "numa_node");
    if (node != m.extra.end() && gpu_node && *gpu_node >= 0 && node->second != *gpu_node) {
      causes.push_back(
          fmt::format("buffer on the far NUMA node (host memory on node {}, GPU "
                      "attached to node {})",
                      trim_number(node->second), trim_number(*gpu_node)));
    }
  }
  for (const char* clock : {"sm", "memory"}) {
    const auto cur = header_number(r, g + "clock." + clock + ".current");
    const auto max = header_number(r, g + "clock." + clock + ".max");
    if (cur && max && *max > 0 && *cur < 0.9 * *max) {
      causes.push_back(
          fmt::format("{} clock {} MHz, below its maximum {} MHz (power or thermal "
                      "limit, or an application clock setting)",
                      clock, trim_number(*cur), trim_number(*max)));
    }
  }
  return causes;
}

std::string join(const std::vector<std::string>& parts, const char* sep) {
  std::string out;
  for (const auto& p : parts) out += (out.empty() ? "" : sep) + p;
  return out;
}

void judge_gpu(probe_report& r, measurement& m, int n, const reference_table& table) {
  const auto name_it = r.header.find(fmt::format("gpu.{}.name", n));
  if (name_it == r.header.end()) {
    m.verdict = verdict_kind::unknown;
    m.verdict_reason = fmt::format("no reference: the header has no name for gpu {}", n);
    return;
  }
  const reference_model* model = table.find(name_it->second);
  if (!model) {
    m.verdict = verdict_kind::unknown;
    m.verdict_reason = "no reference for " + name_it->second;
    return;
  }
  const auto range =
      std::find_if(model->ranges.begin(), model->ranges.end(),
                   [&](const reference_range& rr) { return key_matches(rr.key_pattern, m.key); });
  if (range == model->ranges.end()) {
    m.verdict = verdict_kind::unknown;
    m.verdict_reason = fmt::format("no reference range for {} on {}", m.key, model->name);
    return;
  }
  std::optional<double> value;
  if (range->unit == "%") {
    value = m.percent_of_peak();
    if (!value && !range->of_datasheet.empty()) {
      const auto ds = model->datasheet.find(range->of_datasheet);
      if (ds != model->datasheet.end() && ds->second > 0)
        value = 100.0 * m.stats.median / ds->second;
    }
    if (!value) {
      m.verdict = verdict_kind::unknown;
      m.verdict_reason = "no peak to compare with";
      return;
    }
  } else if (range->unit == m.unit) {
    value = m.stats.median;
  } else {
    m.verdict = verdict_kind::unknown;
    m.verdict_reason =
        fmt::format("reference range is in {}, the figure in {}", range->unit, m.unit);
    return;
  }
  const std::string span =
      fmt::format("{}-{} {} ({}: {})", trim_number(range->min), trim_number(range->max),
                  range->unit, range->kind, range->source);
  if (*value < range->min) {
    m.verdict = verdict_kind::low;
    const auto causes = low_causes(r, m, n, *model);
    m.verdict_reason =
        fmt::format("{} {} below the known-good {}: {}", trim_number(*value), range->unit, span,
                    causes.empty() ? "no likely cause in the header (check other "
                                     "load on the GPU or the host)"
                                   : join(causes, "; "));
  } else if (*value > range->max) {
    m.verdict = verdict_kind::high;
    m.verdict_reason = fmt::format(
        "{} {} above the known-good {}: check the byte convention or "
        "whether the data stayed in a cache",
        trim_number(*value), range->unit, span);
  } else {
    m.verdict = verdict_kind::normal;
    m.verdict_reason = "within " + span;
  }
}

void judge_host(probe_report& r, measurement& m) {
  // Far-memory figures are judged against the local figure of the same threads.
  const auto arrow = m.key.find("->");
  if (arrow != std::string::npos && m.key.rfind("host.", 0) == 0) {
    const std::string threads_node = m.key.substr(5, arrow - 5);  // "numa0"
    const auto rest = m.key.find('.', arrow);                     // ".bw.copy.all_threads"
    const std::string local_key = "host." + threads_node + m.key.substr(rest);
    const auto local = std::find_if(r.results.begin(), r.results.end(),
                                    [&](const measurement& x) { return x.key == local_key; });
    if (local != r.results.end() && local->stats.median > 0) {
      const double ratio = m.stats.median / local->stats.median;
      if (ratio < 0.85) {
        m.verdict = verdict_kind::low;
        m.verdict_reason = fmt::format(
            "buffer on the far NUMA node: {:.0f}% of the node-local "
            "figure ({})",
            100 * ratio, local_key);
      } else {
        m.verdict = verdict_kind::normal;
        m.verdict_reason = fmt::format("{:.0f}% of the node-local figure", 100 * ratio);
      }
      return;
    }
  }
  m.verdict = verdict_kind::unknown;
  m.verdict_reason = "no reference for host memory (its peak depends on the DIMMs fitted)";
}

reference_range range_from_json(const json& j) {
  reference_range rr;
  try {
    rr.key_pattern = j.at("key").get<std::string>();
    rr.unit = j.at("unit").get<std::string>();
    rr.min = j.at("min").get<double>();
    rr.max = j.at("max").get<double>();
    rr.of_datasheet = j.value("of", std::string{});
    rr.kind = j.at("kind").get<std::string>();
    rr.source = j.at("source").get<std::string>();
  } catch (const json::exception& e) {
    throw invalid_input(std::string("probe reference table: a range is malformed: ") + e.what());
  }
  if (rr.kind != "datasheet" && rr.kind != "measured" && rr.kind != "expectation") {
    throw invalid_input("probe reference table: range kind '" + rr.kind +
                        "' is not datasheet, measured or expectation");
  }
  if (rr.min > rr.max)
    throw invalid_input("probe reference table: range for " + rr.key_pattern + " has min > max");
  return rr;
}

}  // namespace

bool key_matches(const std::string& pattern, const std::string& key) {
  std::string rx;
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '{') {
      const auto close = pattern.find('}', i);
      if (close == std::string::npos) return false;
      const std::string name = pattern.substr(i + 1, close - i - 1);
      rx += name == "N" || name == "A" || name == "B" ? "[0-9]+" : "[A-Za-z0-9_]+";
      i = close;
    } else if (c == '*') {
      rx += ".*";
    } else if (std::isalnum(static_cast<unsigned char>(c)) || c == '_') {
      rx += c;
    } else {
      rx += '\\';
      rx += c;
    }
  }
  return std::regex_match(key, std::regex(rx));
}

reference_table reference_table::from_json(const json& doc) {
  reference_table t;
  if (!doc.is_object() || !doc.contains("models") || !doc.at("models").is_array()) {
    throw invalid_input("probe reference table: no 'models' array");
  }
  for (const auto& mj : doc.at("models")) {
    reference_model m;
    try {
      m.name = mj.at("name").get<std::string>();
      for (const auto& alt : mj.at("match")) {
        std::vector<std::string> parts;
        for (const auto& s : alt) parts.push_back(lower(s.get<std::string>()));
        m.match.push_back(std::move(parts));
      }
      if (mj.contains("datasheet")) {
        for (const auto& [k, v] : mj.at("datasheet").items()) {
          if (k == "source") {
            m.datasheet_source = v.get<std::string>();
          } else if (v.is_number()) {
            m.datasheet[k] = v.get<double>();
          }
        }
      }
    } catch (const json::exception& e) {
      throw invalid_input(std::string("probe reference table: a model is malformed: ") + e.what());
    }
    for (const auto& rj : mj.value("ranges", json::array()))
      m.ranges.push_back(range_from_json(rj));
    t.models.push_back(std::move(m));
  }
  return t;
}

const reference_table& reference_table::embedded() {
  static const reference_table table = from_json(json::parse(detail::embedded_reference_json));
  return table;
}

const reference_model* reference_table::find(const std::string& device_name) const {
  const std::string name = lower(device_name);
  for (const auto& m : models) {
    for (const auto& alt : m.match) {
      const bool all = std::all_of(alt.begin(), alt.end(), [&](const std::string& part) {
        return name.find(part) != std::string::npos;
      });
      if (all && !alt.empty()) return &m;
    }
  }
  return nullptr;
}

void apply_verdicts(probe_report& report, const reference_table& table) {
  for (auto& m : report.results) {
    if (const auto n = gpu_index(m.device)) {
      judge_gpu(report, m, *n, table);
    } else {
      judge_host(report, m);
    }
  }
}

void apply_verdicts(probe_report& report) { apply_verdicts(report, reference_table::embedded()); }

}  // namespace vramkit::probe

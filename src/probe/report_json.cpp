// JSON form of the probe report (docs/probe-schema.md).
#include "vramkit/probe/report_json.hpp"

#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include <nlohmann/json.hpp>

#include "vramkit/core/error.hpp"

namespace vramkit::probe {
namespace {

using nlohmann::json;

// JSON has no NaN or infinity: such a value is written as null and read back as 0.
json number(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }
json numbers(const std::vector<double>& v) {
  json a = json::array();
  for (double x : v) a.push_back(number(x));
  return a;
}
json stats_json(const sample_stats& s) {
  return {{"min", number(s.min)}, {"median", number(s.median)}, {"max", number(s.max)}};
}

invalid_input wrong_type(const char* field, const char* where) {
  // NOLINTNEXTLINE(modernize-return-braced-init-list): the constructor is explicit.
  return invalid_input(std::string("probe report JSON: field '") + field + "' of " + where +
                       " has the wrong type");
}

// A number of a result or curve: null reads as 0 (as it was written for NaN or infinity).
double number_value(const json& v, const char* field, const char* where) {
  if (v.is_null()) return 0.0;
  if (!v.is_number()) throw wrong_type(field, where);
  return v.get<double>();
}

// `field` of `obj` as a T; a whole-number T takes only a whole number in its range (a plain
// get<T>() converts 1e30 with undefined behaviour and wraps -1).
template <class T>
T get(const json& obj, const char* field, const char* where) {
  if (!obj.is_object() || !obj.contains(field)) {
    throw invalid_input(std::string("probe report JSON: ") + where + " has no field '" + field +
                        "'");
  }
  const json& v = obj.at(field);
  if constexpr (std::is_same_v<T, double>) {
    return number_value(v, field, where);
  } else if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    const bool in_range =
        v.is_number_unsigned()
            ? v.get<std::uint64_t>() <= static_cast<std::uint64_t>(std::numeric_limits<T>::max())
        : v.is_number_integer()
            ? std::is_signed_v<T> &&
                  v.get<std::int64_t>() >= static_cast<std::int64_t>(std::numeric_limits<T>::min())
            : false;
    if (!in_range) {
      throw invalid_input(std::string("probe report JSON: field '") + field + "' of " + where +
                          " is not a whole number in range");
    }
    return v.is_number_unsigned() ? static_cast<T>(v.get<std::uint64_t>())
                                  : static_cast<T>(v.get<std::int64_t>());
  } else {
    try {
      return v.get<T>();
    } catch (const json::exception&) {
      throw wrong_type(field, where);
    }
  }
}
template <class T>
T get_or(const json& obj, const char* field, T fallback, const char* where) {
  if (!obj.contains(field) || obj.at(field).is_null()) return fallback;
  return get<T>(obj, field, where);
}
std::vector<double> get_numbers(const json& obj, const char* field, const char* where) {
  std::vector<double> out;
  if (!obj.contains(field)) return out;
  const json& a = obj.at(field);
  if (!a.is_array())
    throw invalid_input(std::string("probe report JSON: '") + field + "' of " + where +
                        " is not an array");
  for (const auto& x : a) out.push_back(number_value(x, field, where));
  return out;
}
sample_stats get_stats(const json& obj, const char* where) {
  sample_stats s;
  if (!obj.contains("stats")) return s;
  const json& st = obj.at("stats");
  s.min = get_or<double>(st, "min", 0.0, where);
  s.median = get_or<double>(st, "median", 0.0, where);
  s.max = get_or<double>(st, "max", 0.0, where);
  return s;
}
verdict_kind verdict_from_string(const std::string& s) {
  if (s == "normal") return verdict_kind::normal;
  if (s == "low") return verdict_kind::low;
  if (s == "high") return verdict_kind::high;
  if (s == "unknown") return verdict_kind::unknown;
  throw invalid_input("probe report JSON: unknown verdict '" + s + "'");
}

}  // namespace

byte_convention byte_convention_from_string(const std::string& text) {
  for (auto c :
       {byte_convention::none, byte_convention::copied_once, byte_convention::read_plus_written,
        byte_convention::read, byte_convention::written}) {
    if (text == to_string(c)) return c;
  }
  throw invalid_input("probe report JSON: unknown byte convention '" + text + "'");
}

namespace {

json report_document(const probe_report& report) {
  json doc;
  doc["schema_version"] = report.schema;
  doc["header"] = report.header;
  json results = json::array();
  for (const auto& m : report.results) {
    json extra = json::object();
    for (const auto& [k, v] : m.extra) extra[k] = number(v);
    const auto pct = m.percent_of_peak();
    results.push_back({{"key", m.key},
                       {"section", m.section},
                       {"title", m.title},
                       {"device", m.device},
                       {"unit", m.unit},
                       {"convention", to_string(m.convention)},
                       {"size_bytes", m.size_bytes},
                       {"repetitions", m.repetitions},
                       {"samples", numbers(m.samples)},
                       {"stats", stats_json(m.stats)},
                       {"peak", m.peak ? number(*m.peak) : json(nullptr)},
                       {"peak_basis", m.peak_basis},
                       {"percent_of_peak", pct ? number(*pct) : json(nullptr)},
                       {"verified", m.verified},
                       {"note", m.note},
                       {"verdict", to_string(m.verdict)},
                       {"verdict_reason", m.verdict_reason},
                       {"extra", std::move(extra)}});
  }
  doc["results"] = std::move(results);
  json curves = json::array();
  for (const auto& c : report.curves) {
    json pts = json::array();
    for (const auto& p : c.points) {
      pts.push_back(
          {{"x", number(p.x)}, {"stats", stats_json(p.y)}, {"samples", numbers(p.samples)}});
    }
    curves.push_back({{"key", c.key},
                      {"section", c.section},
                      {"title", c.title},
                      {"x_label", c.x_label},
                      {"y_unit", c.y_unit},
                      {"log_x", c.log_x},
                      {"points", std::move(pts)}});
  }
  doc["curves"] = std::move(curves);
  json levels = json::array();
  for (const auto& l : report.levels) {
    levels.push_back({{"name", l.name},
                      {"device", l.device},
                      {"latency_ns", number(l.latency_ns)},
                      {"measured_size_bytes", l.measured_size_bytes},
                      {"reported_size_bytes",
                       l.reported_size_bytes ? json(*l.reported_size_bytes) : json(nullptr)}});
  }
  doc["levels"] = std::move(levels);
  json skips = json::array();
  for (const auto& s : report.skips) {
    skips.push_back({{"key", s.key}, {"reason", s.reason}, {"failed", s.failed}});
  }
  doc["skipped"] = std::move(skips);
  return doc;
}

probe_report report_from_document(const json& doc) {
  if (!doc.is_object()) throw invalid_input("probe report JSON: the document is not an object");
  probe_report r;
  r.schema = get<int>(doc, "schema_version", "the report");
  if (r.schema > schema_version || r.schema < 1) {
    throw invalid_input("probe report JSON: schema_version " + std::to_string(r.schema) +
                        " is not supported (this build reads 1.." + std::to_string(schema_version) +
                        ")");
  }
  if (doc.contains("header")) {
    for (const auto& [k, v] : doc.at("header").items()) {
      if (!v.is_string())
        throw invalid_input("probe report JSON: header field '" + k + "' is not a string");
      r.header[k] = v.get<std::string>();
    }
  }
  for (const auto& rj : doc.value("results", json::array())) {
    measurement m;
    const char* w = "a result";
    m.key = get<std::string>(rj, "key", w);
    m.section = get_or<std::string>(rj, "section", "", w);
    m.title = get_or<std::string>(rj, "title", "", w);
    m.device = get_or<std::string>(rj, "device", "", w);
    m.unit = get<std::string>(rj, "unit", w);
    m.convention = byte_convention_from_string(get_or<std::string>(rj, "convention", "none", w));
    m.size_bytes = get_or<std::uint64_t>(rj, "size_bytes", 0, w);
    m.repetitions = get_or<int>(rj, "repetitions", 0, w);
    m.samples = get_numbers(rj, "samples", w);
    m.stats = get_stats(rj, w);
    if (rj.contains("peak") && !rj.at("peak").is_null()) m.peak = get<double>(rj, "peak", w);
    m.peak_basis = get_or<std::string>(rj, "peak_basis", "", w);
    m.verified = get_or<bool>(rj, "verified", false, w);
    m.note = get_or<std::string>(rj, "note", "", w);
    m.verdict = verdict_from_string(get_or<std::string>(rj, "verdict", "unknown", w));
    m.verdict_reason = get_or<std::string>(rj, "verdict_reason", "", w);
    if (rj.contains("extra")) {
      if (!rj.at("extra").is_object()) throw wrong_type("extra", w);
      for (const auto& [k, v] : rj.at("extra").items()) m.extra[k] = number_value(v, "extra", w);
    }
    r.results.push_back(std::move(m));
  }
  for (const auto& cj : doc.value("curves", json::array())) {
    curve c;
    const char* w = "a curve";
    c.key = get<std::string>(cj, "key", w);
    c.section = get_or<std::string>(cj, "section", "", w);
    c.title = get_or<std::string>(cj, "title", "", w);
    c.x_label = get_or<std::string>(cj, "x_label", "", w);
    c.y_unit = get_or<std::string>(cj, "y_unit", "", w);
    c.log_x = get_or<bool>(cj, "log_x", true, w);
    for (const auto& pj : cj.value("points", json::array())) {
      curve::point p;
      p.x = get<double>(pj, "x", "a curve point");
      p.y = get_stats(pj, "a curve point");
      p.samples = get_numbers(pj, "samples", "a curve point");
      c.points.push_back(std::move(p));
    }
    r.curves.push_back(std::move(c));
  }
  for (const auto& lj : doc.value("levels", json::array())) {
    memory_level l;
    const char* w = "a level";
    l.name = get<std::string>(lj, "name", w);
    l.device = get_or<std::string>(lj, "device", "", w);
    l.latency_ns = get_or<double>(lj, "latency_ns", 0.0, w);
    l.measured_size_bytes = get_or<std::uint64_t>(lj, "measured_size_bytes", 0, w);
    if (lj.contains("reported_size_bytes") && !lj.at("reported_size_bytes").is_null()) {
      l.reported_size_bytes = get<std::uint64_t>(lj, "reported_size_bytes", w);
    }
    r.levels.push_back(std::move(l));
  }
  for (const auto& sj : doc.value("skipped", json::array())) {
    skipped s;
    s.key = get<std::string>(sj, "key", "a skipped entry");
    s.reason = get_or<std::string>(sj, "reason", "", "a skipped entry");
    s.failed = get_or<bool>(sj, "failed", false, "a skipped entry");
    r.skips.push_back(std::move(s));
  }
  return r;
}

}  // namespace

std::string to_json(const probe_report& report) { return report_document(report).dump(2); }

probe_report report_from_json(std::string_view json_text) {
  json doc;
  try {
    doc = json::parse(json_text);
  } catch (const json::exception& e) {  // parse_error, or out_of_range for 1e999
    throw invalid_input(std::string("probe report JSON: not valid JSON (") + e.what() + ")");
  }
  return report_from_document(doc);
}

}  // namespace vramkit::probe

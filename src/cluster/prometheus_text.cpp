// Prometheus text exposition format reader and the exporter-metrics -> GPU state mapping.
#include "vramkit/cluster/prometheus_text.hpp"

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <map>

#include <fmt/format.h>

#include "vramkit/core/error.hpp"

namespace vramkit::cluster {
namespace {

bool is_name_start(char c) {
  return std::isalpha(static_cast<unsigned char>(c)) || c == '_' || c == ':';
}
bool is_name_char(char c) {
  return is_name_start(c) || std::isdigit(static_cast<unsigned char>(c));
}
bool is_blank(char c) { return c == ' ' || c == '\t'; }

class line_parser {
 public:
  line_parser(std::string_view line, std::size_t number) : s_(line), line_(number) {}

  metric_sample parse() {
    metric_sample m;
    m.name = name(true);
    skip_blanks();
    if (peek() == '{') labels(m);
    skip_blanks();
    m.value = value();
    if (!at_end()) {
      if (!is_blank(s_[i_])) fail("expected a space after the value");
      skip_blanks();
      if (!at_end()) m.timestamp_ms = timestamp();
    }
    skip_blanks();
    if (!at_end()) fail("unexpected text after the timestamp");
    return m;
  }

 private:
  [[noreturn]] void fail(const char* why) const {
    throw invalid_input(fmt::format("metrics line {}: {} (column {})", line_, why, i_ + 1));
  }
  [[nodiscard]] bool at_end() const { return i_ >= s_.size(); }
  [[nodiscard]] char peek() const { return at_end() ? '\0' : s_[i_]; }
  void skip_blanks() {
    while (!at_end() && is_blank(s_[i_])) ++i_;
  }

  std::string name(bool metric) {
    const std::size_t start = i_;
    if (at_end() || !is_name_start(s_[i_]) || (!metric && s_[i_] == ':')) {
      fail(metric ? "expected a metric name" : "expected a label name");
    }
    while (!at_end() && is_name_char(s_[i_]) && (metric || s_[i_] != ':')) ++i_;
    return std::string(s_.substr(start, i_ - start));
  }

  void labels(metric_sample& m) {
    ++i_;  // '{'
    for (;;) {
      skip_blanks();
      if (peek() == '}') {
        ++i_;
        return;
      }
      std::string key = name(false);
      skip_blanks();
      if (peek() != '=') fail("expected '=' after a label name");
      ++i_;
      skip_blanks();
      if (peek() != '"') fail("expected a quoted label value");
      ++i_;
      std::string val;
      for (;;) {
        if (at_end()) fail("unterminated label value");
        const char c = s_[i_++];
        if (c == '"') break;
        if (c == '\\') {
          if (at_end()) fail("unterminated escape in a label value");
          const char e = s_[i_++];
          if (e == 'n')
            val.push_back('\n');
          else if (e == '\\' || e == '"')
            val.push_back(e);
          else
            fail("unknown escape in a label value (allowed: \\\\, \\\", \\n)");
        } else {
          val.push_back(c);
        }
      }
      m.labels.emplace_back(std::move(key), std::move(val));
      skip_blanks();
      if (peek() == ',') {
        ++i_;
        continue;
      }
      if (peek() == '}') {
        ++i_;
        return;
      }
      fail("expected ',' or '}' in the label set");
    }
  }

  std::string token() {
    const std::size_t start = i_;
    while (!at_end() && !is_blank(s_[i_])) ++i_;
    return std::string(s_.substr(start, i_ - start));
  }

  double value() {
    const std::string t = token();
    if (t.empty()) fail("expected a value");
    errno = 0;
    char* end = nullptr;
    const double v = std::strtod(t.c_str(), &end);
    if (end != t.c_str() + t.size()) fail("value is not a number");
    // strtod also takes hex floats; the exposition format does not.
    if (t.find_first_of("xX") != std::string::npos) fail("value is not a number");
    return v;
  }

  std::int64_t timestamp() {
    const std::string t = token();
    errno = 0;
    char* end = nullptr;
    const long long v = std::strtoll(t.c_str(), &end, 10);
    if (t.empty() || end != t.c_str() + t.size() || errno == ERANGE)
      fail("timestamp is not an integer");
    return v;
  }

  std::string_view s_;
  std::size_t line_;
  std::size_t i_ = 0;
};

}  // namespace

const std::string* metric_sample::label(std::string_view key) const noexcept {
  for (const auto& [k, v] : labels) {
    if (k == key) return &v;
  }
  return nullptr;
}

std::vector<metric_sample> parse_prometheus_text(std::string_view text) {
  std::vector<metric_sample> out;
  std::size_t line_number = 0;
  while (!text.empty()) {
    const std::size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view{} : text.substr(nl + 1);
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    std::size_t first = 0;
    while (first < line.size() && is_blank(line[first])) ++first;
    line = line.substr(first);
    if (line.empty() || line.front() == '#') continue;
    out.push_back(line_parser(line, line_number).parse());
  }
  return out;
}

std::vector<gpu_state> gpus_from_metrics(const std::vector<metric_sample>& samples) {
  struct partial {
    gpu_state gpu;
    bool has_total = false;
    bool has_free = false;
  };
  std::map<int, partial> by_index;
  auto to_bytes = [](double v) -> std::uint64_t {
    if (!(v > 0)) return 0;  // NaN and negatives read as nothing
    if (v >= 1.8e19) return UINT64_MAX;
    return static_cast<std::uint64_t>(std::llround(v));
  };
  for (const metric_sample& s : samples) {
    if (s.name.rfind("vramkit_gpu_", 0) != 0) continue;
    const std::string* gpu_label = s.label("gpu");
    if (gpu_label == nullptr) continue;
    char* end = nullptr;
    const long idx = std::strtol(gpu_label->c_str(), &end, 10);
    if (gpu_label->empty() || *end != '\0' || idx < 0 || idx > 65535) {
      throw invalid_input(
          fmt::format("metric {} has gpu=\"{}\", not a GPU index", s.name, *gpu_label));
    }
    partial& p = by_index[static_cast<int>(idx)];
    p.gpu.index = static_cast<int>(idx);
    if (const std::string* u = s.label("uuid")) p.gpu.uuid = *u;
    if (const std::string* n = s.label("name")) p.gpu.name = *n;
    if (s.name == "vramkit_gpu_memory_total_bytes") {
      p.gpu.total_bytes = to_bytes(s.value);
      p.has_total = true;
    } else if (s.name == "vramkit_gpu_memory_used_bytes") {
      p.gpu.used_bytes = to_bytes(s.value);
    } else if (s.name == "vramkit_gpu_memory_free_bytes") {
      p.gpu.free_bytes = to_bytes(s.value);
      p.has_free = true;
    } else if (s.name == "vramkit_gpu_memory_reserved_bytes") {
      p.gpu.reserved_bytes = to_bytes(s.value);
    } else if (s.name == "vramkit_gpu_up") {
      p.gpu.up = s.value == 1.0;
    }
  }
  std::vector<gpu_state> gpus;
  for (auto& [idx, p] : by_index) {
    if (!p.has_total) continue;
    if (!p.has_free) {
      p.gpu.free_bytes = derived_free_bytes(p.gpu.total_bytes, p.gpu.used_bytes);
    }
    gpus.push_back(std::move(p.gpu));
  }
  return gpus;
}

}  // namespace vramkit::cluster

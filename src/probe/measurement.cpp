// byte_convention and verdict names, and the measurement and curve makers, of the probe's
// result model.
#include "vramkit/probe/measurement.hpp"

#include <utility>

namespace vramkit::probe {

const char* to_string(byte_convention c) noexcept {
  switch (c) {
    case byte_convention::none:
      return "none";
    case byte_convention::copied_once:
      return "copied_once";
    case byte_convention::read_plus_written:
      return "read_plus_written";
    case byte_convention::read:
      return "read";
    case byte_convention::written:
      return "written";
  }
  return "none";
}

const char* to_string(verdict_kind v) noexcept {
  switch (v) {
    case verdict_kind::normal:
      return "normal";
    case verdict_kind::low:
      return "low";
    case verdict_kind::high:
      return "high";
    case verdict_kind::unknown:
      return "unknown";
  }
  return "unknown";
}

namespace {

/// A figure or curve with its identity: the stable key, the --only section and the title.
template <class Figure>
Figure titled(std::string&& key, std::string&& section, std::string&& title) {
  Figure f;
  f.key = std::move(key);
  f.section = std::move(section);
  f.title = std::move(title);
  return f;
}

}  // namespace

measurement make_measurement(std::string key, std::string section, std::string title,
                             std::string device, std::string unit, std::vector<double> samples) {
  auto m = titled<measurement>(std::move(key), std::move(section), std::move(title));
  m.device = std::move(device);
  m.unit = std::move(unit);
  m.repetitions = static_cast<int>(samples.size());
  m.samples = std::move(samples);
  m.stats = sample_stats::of(m.samples);
  return m;
}

curve make_curve(std::string key, std::string section, std::string title, std::string x_label,
                 std::string y_unit, bool log_x) {
  auto c = titled<curve>(std::move(key), std::move(section), std::move(title));
  c.x_label = std::move(x_label);
  c.y_unit = std::move(y_unit);
  c.log_x = log_x;
  return c;
}

}  // namespace vramkit::probe

// byte_convention and verdict names for the probe's result model.
#include "vramkit/probe/measurement.hpp"

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

}  // namespace vramkit::probe

// Helpers shared by the libFuzzer harnesses: the input as text, and the one rule every harness
// checks. A parser given any bytes either returns or throws a vramkit::error (a clean one-line
// error); any other exception, a crash, a hang or a sanitizer report is a finding.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "vramkit/core/error.hpp"

namespace vramkit::fuzz {

inline std::string as_text(const std::uint8_t* data, std::size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

/// Runs `parse`; a vramkit::error is the expected answer to bad input and is swallowed.
template <class Parse>
void expect_clean(Parse&& parse) {
  try {
    parse();
  } catch (const vramkit::error&) {
  }
}

/// Stops the run with a message: a property the harness checks does not hold.
[[noreturn]] inline void property_failed(const char* what) {
  std::fprintf(stderr, "fuzz property failed: %s\n", what);
  std::abort();
}

}  // namespace vramkit::fuzz

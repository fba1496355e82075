// Fuzzes the allocation-trace reader (mr::parse_trace, format vramkit-trace v1). A trace that
// parses must survive write_trace and a second parse unchanged.
#include <cstddef>
#include <cstdint>
#include <sstream>

#include "fuzz_input.hpp"
#include "vramkit/mr/trace.hpp"

// The entry point libFuzzer calls (its name is libFuzzer's).
// NOLINTNEXTLINE(readability-identifier-naming)
extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::istringstream in(vramkit::fuzz::as_text(data, size));
  vramkit::mr::trace parsed;
  try {
    parsed = vramkit::mr::parse_trace(in, "fuzz");
  } catch (const vramkit::error&) {
    return 0;
  }
  std::ostringstream out;
  vramkit::mr::write_trace(out, parsed);
  std::istringstream again(out.str());
  const auto reread = vramkit::mr::parse_trace(again, "fuzz-rewritten");
  if (reread.events != parsed.events) {
    vramkit::fuzz::property_failed("trace events changed through write_trace and parse_trace");
  }
  return 0;
}

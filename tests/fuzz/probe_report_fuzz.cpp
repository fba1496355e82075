// Fuzzes the probe report reader (probe::report_from_json, used to compare reports and render
// them): it returns or throws invalid_input, and a report it reads writes out and reads back to
// the same text (its contract: to_json(report_from_json(to_json(r))) == to_json(r)).
#include <cstddef>
#include <cstdint>

#include "fuzz_input.hpp"
#include "vramkit/probe/report_json.hpp"

// The entry point libFuzzer calls (its name is libFuzzer's).
// NOLINTNEXTLINE(readability-identifier-naming)
extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text = vramkit::fuzz::as_text(data, size);
  vramkit::fuzz::expect_clean([&] {
    const auto once = vramkit::probe::to_json(vramkit::probe::report_from_json(text));
    if (vramkit::probe::to_json(vramkit::probe::report_from_json(once)) != once) {
      vramkit::fuzz::property_failed("a report that does not read back as written");
    }
  });
  return 0;
}

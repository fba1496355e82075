// Fuzzes the duration reader of --interval (monitor::parse_interval): any answer lies between
// 10 ms and 1 h, as its contract says.
#include <cstddef>
#include <cstdint>

#include "fuzz_input.hpp"
#include "vramkit/monitor/sampler.hpp"

// The entry point libFuzzer calls (its name is libFuzzer's).
// NOLINTNEXTLINE(readability-identifier-naming)
extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text = vramkit::fuzz::as_text(data, size);
  vramkit::fuzz::expect_clean([&] {
    const auto ms = vramkit::monitor::parse_interval(text).count();
    if (ms < 10 || ms > 3600000) vramkit::fuzz::property_failed("an interval outside 10ms..1h");
  });
  return 0;
}

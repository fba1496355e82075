// Fuzzes the duration readers: core's parse_duration (--scrape-ttl, --timeout and the like) and
// the --interval reader built on it (monitor::parse_interval). Any answer is non-negative, and an
// interval lies between 10 ms and 1 h, as their contracts say.
#include <cstddef>
#include <cstdint>

#include "fuzz_input.hpp"
#include "vramkit/core/units.hpp"
#include "vramkit/monitor/sampler.hpp"

// The entry point libFuzzer calls (its name is libFuzzer's).
// NOLINTNEXTLINE(readability-identifier-naming)
extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text = vramkit::fuzz::as_text(data, size);
  vramkit::fuzz::expect_clean([&] {
    if (vramkit::parse_duration(text, "fuzz").count() < 0) {
      vramkit::fuzz::property_failed("a negative duration");
    }
  });
  vramkit::fuzz::expect_clean([&] {
    const auto ms = vramkit::monitor::parse_interval(text).count();
    if (ms < 10 || ms > 3600000) vramkit::fuzz::property_failed("an interval outside 10ms..1h");
  });
  return 0;
}

// Fuzzes the recording reader (monitor::parse_recording: JSON Lines and CSV) and the one-line
// JSON sample reader. parse_recording reports malformed lines as errors and never throws.
#include <cstddef>
#include <cstdint>

#include "fuzz_input.hpp"
#include "vramkit/monitor/recording.hpp"

// The entry point libFuzzer calls (its name is libFuzzer's).
// NOLINTNEXTLINE(readability-identifier-naming)
extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text = vramkit::fuzz::as_text(data, size);
  const auto rec = vramkit::monitor::parse_recording(text);
  if (rec.format != "jsonl" && rec.format != "csv" && !rec.samples.empty()) {
    vramkit::fuzz::property_failed("samples without a format");
  }
  // Whatever was read is written again without a throw.
  for (const auto& s : rec.samples) {
    (void)vramkit::monitor::to_json_line(s);
    (void)vramkit::monitor::to_csv_lines(s);
  }
  vramkit::fuzz::expect_clean([&] { (void)vramkit::monitor::sample_from_json(text); });
  return 0;
}

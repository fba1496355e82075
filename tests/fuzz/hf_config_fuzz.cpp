// Fuzzes the planner's Hugging Face config.json loader (plan::parse_model_config).
#include <cstddef>
#include <cstdint>

#include "fuzz_input.hpp"
#include "vramkit/plan/config_loader.hpp"

// The entry point libFuzzer calls (its name is libFuzzer's).
// NOLINTNEXTLINE(readability-identifier-naming)
extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text = vramkit::fuzz::as_text(data, size);
  vramkit::fuzz::expect_clean([&] { (void)vramkit::plan::parse_model_config(text, "fuzz"); });
  return 0;
}

// Fuzzes the extender's node map reader (JSON object or "node URL" lines).
#include <cstddef>
#include <cstdint>

#include "fuzz_input.hpp"
#include "vramkit/cluster/exporter_scraper.hpp"

// The entry point libFuzzer calls (its name is libFuzzer's).
// NOLINTNEXTLINE(readability-identifier-naming)
extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text = vramkit::fuzz::as_text(data, size);
  vramkit::fuzz::expect_clean([&] {
    for (const auto& [node, url] : vramkit::cluster::parse_node_map(text, "fuzz")) {
      if (node.empty() || url.empty()) vramkit::fuzz::property_failed("an empty node or URL");
    }
  });
  return 0;
}

// Fuzzes the reader of the Kubernetes pod list that exporter discovery GETs from the API server
// (cluster::exporters_from_pod_list): it returns or throws invalid_input, and every URL it gives
// is an http:// URL of the port asked for.
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz_input.hpp"
#include "vramkit/cluster/exporter_discovery.hpp"

// The entry point libFuzzer calls (its name is libFuzzer's).
// NOLINTNEXTLINE(readability-identifier-naming)
extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text = vramkit::fuzz::as_text(data, size);
  vramkit::fuzz::expect_clean([&] {
    for (const auto& [node, url] : vramkit::cluster::exporters_from_pod_list(text, 9410)) {
      if (url.rfind("http://", 0) != 0 || url.find(":9410/metrics") == std::string::npos) {
        vramkit::fuzz::property_failed("an exporter URL that is not http://HOST:9410/metrics");
      }
    }
  });
  return 0;
}

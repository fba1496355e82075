// Fuzzes the cluster's Prometheus text reader and its mapping of exporter metrics to GPU states.
#include <cstddef>
#include <cstdint>

#include "fuzz_input.hpp"
#include "vramkit/cluster/prometheus_text.hpp"

// The entry point libFuzzer calls (its name is libFuzzer's).
// NOLINTNEXTLINE(readability-identifier-naming)
extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text = vramkit::fuzz::as_text(data, size);
  vramkit::fuzz::expect_clean([&] {
    const auto samples = vramkit::cluster::parse_prometheus_text(text);
    (void)vramkit::cluster::gpus_from_metrics(samples);
  });
  return 0;
}

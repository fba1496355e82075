// Fuzzes the byte-size readers: core's parse_bytes (--size, --shard-size), the cluster's memory
// request and Kubernetes quantity readers, and the headroom setting ("2GiB" or "5%").
#include <cstddef>
#include <cstdint>

#include "fuzz_input.hpp"
#include "vramkit/cluster/memory_request.hpp"
#include "vramkit/cluster/placement.hpp"
#include "vramkit/core/units.hpp"

// The entry point libFuzzer calls (its name is libFuzzer's).
// NOLINTNEXTLINE(readability-identifier-naming)
extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text = vramkit::fuzz::as_text(data, size);
  vramkit::fuzz::expect_clean([&] { (void)vramkit::parse_bytes(text); });
  vramkit::fuzz::expect_clean([&] { (void)vramkit::cluster::parse_memory_request(text); });
  vramkit::fuzz::expect_clean([&] { (void)vramkit::cluster::parse_kube_quantity(text); });
  vramkit::fuzz::expect_clean([&] {
    const auto h = vramkit::cluster::parse_headroom(text);
    if (!(h.fraction >= 0.0 && h.fraction < 1.0)) {
      vramkit::fuzz::property_failed("a headroom fraction outside [0, 1)");
    }
  });
  return 0;
}

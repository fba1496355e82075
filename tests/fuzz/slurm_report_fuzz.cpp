// Fuzzes the readers of Slurm's accounting output (`sacct --parsable2`, cluster::parse_sacct_usage)
// and of its TRES sizes (parse_tres_bytes): each returns or throws invalid_input, and a size read
// from text is the same whatever shard size prices the jobs.
#include <cstddef>
#include <cstdint>

#include "fuzz_input.hpp"
#include "vramkit/cluster/slurm_report.hpp"

// The entry point libFuzzer calls (its name is libFuzzer's).
// NOLINTNEXTLINE(readability-identifier-naming)
extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text = vramkit::fuzz::as_text(data, size);
  (void)vramkit::cluster::parse_tres_bytes(text);
  vramkit::fuzz::expect_clean([&] {
    const auto unpriced = vramkit::cluster::parse_sacct_usage(text, 0);
    const auto priced = vramkit::cluster::parse_sacct_usage(text, std::uint64_t{1} << 30);
    if (unpriced.size() != priced.size()) {
      vramkit::fuzz::property_failed("the shard size changed how many jobs were read");
    }
  });
  return 0;
}

// A job's view of its GPU memory cap: allocates each size given on the command line, in order and
// kept, through the vramkit C API (the pool the PyTorch allocator uses), which reads
// VRAMKIT_POOL_MAXIMUM from the environment. The device is simulated with 64 GiB and untouched
// pages, so that only the cap can refuse. Prints one line per allocation; exits 0 when all were
// given, 3 at the first out-of-memory, 2 on bad arguments.
#include <cstdio>
#include <memory>
#include <string>

#include "mr/c_api_testing.hpp"
#include "vramkit/core/host_sim_device.hpp"
#include "vramkit/core/units.hpp"
#include "vramkit/mr/c_api.h"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: pool_cap_probe SIZE...\n");
    return 2;
  }
  vramkit::host_sim_options o;
  o.device_memory_bytes = std::size_t{64} << 30;
  o.poison_byte = -1;
  o.commit_physical =
      false;  // the default pool maps physical memory: leave its pages untouched too
  vramkit::mr::detail::set_c_api_device_api(std::make_shared<vramkit::host_sim_device>(o));
  for (int i = 1; i < argc; ++i) {
    std::uint64_t bytes = 0;
    try {
      bytes = vramkit::parse_bytes(argv[i]);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "pool_cap_probe: %s\n", e.what());
      return 2;
    }
    void* p = vramkit_malloc(static_cast<ssize_t>(bytes), 0, nullptr);
    if (p == nullptr) {
      std::printf("out of memory at %s\n", argv[i]);
      return 3;
    }
    std::printf("allocated %s\n", argv[i]);
  }
  return 0;
}

// Helper for the monitor's GPU tests: allocates N bytes of device memory through vramkit's device
// API, fills it (so the pages are really backed), verifies the fill, prints "ready <pid>" and
// holds the memory until stdin closes. Exit 0 on success, 1 with one line on stderr otherwise.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "vramkit/core/cuda_device_api.hpp"
#include "vramkit/core/units.hpp"

int main(int argc, char** argv) {
  std::size_t bytes = argc > 1 ? vramkit::parse_bytes(argv[1]) : vramkit::GiB;
  try {
    auto api = vramkit::cuda_device_api();
    if (!api) {
      std::fprintf(stderr, "alloc_helper: %s\n", api.error().reason.c_str());
      return 1;
    }
    auto& dev = **api;
    dev.set_device(0);
    void* p = dev.allocate_device(bytes);
    dev.fill_async(p, 0x5A, bytes, vramkit::stream_view{});
    dev.synchronize_device();
    // Check the fill at a few places spread over the buffer.
    std::vector<unsigned char> probe(4096);
    for (std::size_t off : {std::size_t{0}, bytes / 2, bytes - probe.size()}) {
      dev.copy_async(probe.data(), static_cast<char*>(p) + off, probe.size(),
                     vramkit::copy_kind::device_to_host, vramkit::stream_view{});
      dev.synchronize_device();
      for (unsigned char c : probe) {
        if (c != 0x5A) {
          std::fprintf(stderr, "alloc_helper: fill check failed at offset %zu\n", off);
          return 1;
        }
      }
    }
    std::printf("ready %d\n", static_cast<int>(getpid()));
    std::fflush(stdout);
    char buf[64];
    while (read(STDIN_FILENO, buf, sizeof buf) > 0) {
    }
    dev.free_device(p);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "alloc_helper: %s\n", e.what());
    return 1;
  }
}

// A user's program built against an installed vramkit: a pool on the simulated device, one round
// trip of bytes through it, and the figures the pool reports. Exit code 0 only when all agree.
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include "vramkit/config.hpp"
#include "vramkit/core/host_sim_device.hpp"
#include "vramkit/mr/device_api_resource.hpp"
#include "vramkit/mr/memory_summary.hpp"
#include "vramkit/mr/pool_resource.hpp"

// The version the CMake package announced (vramkit_VERSION), set by this project's CMakeLists.
#ifndef EXPECTED_VERSION
#error "build with tests/package/consumer/CMakeLists.txt, which defines EXPECTED_VERSION"
#endif

namespace {

int fail(const char* what) {
  std::fprintf(stderr, "consumer: %s\n", what);
  return 1;
}

}  // namespace

int main() {
  if (std::strcmp(VRAMKIT_VERSION_STRING, EXPECTED_VERSION) != 0) {
    return fail("config.hpp and the CMake package disagree on the version");
  }
  auto dev = std::make_shared<vramkit::host_sim_device>();
  auto upstream = std::make_shared<vramkit::mr::device_api_resource>(dev);
  vramkit::mr::pool_resource pool(upstream, dev);
  const vramkit::stream_view stream;

  constexpr std::size_t bytes = 4096;
  std::vector<unsigned char> in(bytes);
  std::vector<unsigned char> out(bytes, 0);
  for (std::size_t i = 0; i < bytes; ++i) {
    in[i] = static_cast<unsigned char>(i * 7 + 3);
  }
  void* block = pool.allocate(bytes, 256, stream);
  dev->copy_async(block, in.data(), bytes, vramkit::copy_kind::host_to_device, stream);
  dev->copy_async(out.data(), block, bytes, vramkit::copy_kind::device_to_host, stream);
  dev->synchronize(stream);
  if (in != out) {
    return fail("bytes changed on their way through the pool");
  }
  if (pool.allocated_bytes() < bytes || pool.reserved_bytes() < pool.allocated_bytes()) {
    return fail("the pool's figures do not cover the block");
  }
  pool.deallocate(block, bytes, 256, stream);
  if (pool.allocated_bytes() != 0) {
    return fail("bytes still allocated after the free");
  }
  std::printf("vramkit %s consumer: ok (%s)\n", VRAMKIT_VERSION_STRING, pool.name().c_str());
  return 0;
}

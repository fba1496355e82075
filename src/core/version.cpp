// Version and build facts.
#include "vramkit/core/version.hpp"

#include <fmt/format.h>

#include "vramkit/config.hpp"
#include "vramkit/core/cuda_device_api.hpp"

namespace vramkit {

std::string version() { return VRAMKIT_VERSION_STRING; }

std::string format_cuda_version(int version) {
  return std::to_string(version / 1000) + "." + std::to_string((version % 1000) / 10);
}

std::string build_summary() {
#if defined(__clang__)
  const std::string compiler = fmt::format("clang {}.{}", __clang_major__, __clang_minor__);
#elif defined(__GNUC__)
  const std::string compiler = fmt::format("gcc {}.{}", __GNUC__, __GNUC_MINOR__);
#else
  const std::string compiler = "unknown compiler";
#endif
  std::string cuda = "without CUDA";
  if (built_with_cuda()) {
    auto status = cuda_runtime_status();
    cuda = "with CUDA";
    if (status) cuda += " runtime " + format_cuda_version(status->runtime_version);
  }
  return fmt::format("vramkit {} ({}, {})", version(), cuda, compiler);
}

}  // namespace vramkit

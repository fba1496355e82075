// NVTX through the CUDA toolkit's nvtx3 headers (header-only: they load an injection library such
// as Nsight Systems' only when a tool has set one, and are no-ops otherwise).
#include "mr/nvtx_range.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "vramkit/core/error.hpp"

#if VRAMKIT_WITH_NVTX
#include <nvtx3/nvToolsExt.h>
#endif

namespace vramkit::mr::detail {
namespace {

const char* setting() {
  const char* v = std::getenv("VRAMKIT_NVTX");
  return (v != nullptr && *v != '\0') ? v : "0";
}

#if VRAMKIT_WITH_NVTX
nvtxDomainHandle_t domain() {
  static nvtxDomainHandle_t d = nvtxDomainCreateA("vramkit");
  return d;
}

nvtxEventAttributes_t attributes(const char* message) {
  nvtxEventAttributes_t a{};
  a.version = NVTX_VERSION;
  a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  a.messageType = NVTX_MESSAGE_TYPE_ASCII;
  a.message.ascii = message;
  return a;
}
#endif

}  // namespace

bool nvtx_enabled() noexcept {
#if VRAMKIT_WITH_NVTX
  static const bool on = std::strcmp(setting(), "1") == 0;
  return on;
#else
  return false;
#endif
}

void check_nvtx_setting() {
  const std::string v = setting();
  if (v != "0" && v != "1") {
    throw invalid_input("VRAMKIT_NVTX must be '0' or '1' (got '" + v + "')");
  }
#if !VRAMKIT_WITH_NVTX
  static bool warned = false;
  if (v == "1" && !warned) {
    warned = true;
    std::fprintf(stderr,
                 "vramkit: VRAMKIT_NVTX=1 has no effect: built without NVTX (configure with "
                 "-DVRAMKIT_NVTX=ON)\n");
  }
#endif
}

nvtx_range::nvtx_range(const char* name) noexcept {
#if VRAMKIT_WITH_NVTX
  if (nvtx_enabled()) {
    nvtxEventAttributes_t a = attributes(name);
    nvtxDomainRangePushEx(domain(), &a);
    active_ = true;
  }
#else
  (void)name;
#endif
}

nvtx_range::~nvtx_range() {
#if VRAMKIT_WITH_NVTX
  if (active_) nvtxDomainRangePop(domain());
#endif
}

void nvtx_mark(const char* message) noexcept {
#if VRAMKIT_WITH_NVTX
  if (nvtx_enabled()) {
    nvtxEventAttributes_t a = attributes(message);
    nvtxDomainMarkEx(domain(), &a);
  }
#else
  (void)message;
#endif
}

}  // namespace vramkit::mr::detail

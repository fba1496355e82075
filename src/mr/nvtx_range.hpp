// Internal: NVTX ranges around the pools' slow paths (growth, remap, trim) and a mark at each
// out-of-memory error, in an NVTX domain "vramkit", so they show on an Nsight Systems timeline.
// Compiled in with -DVRAMKIT_NVTX=ON (the CUDA toolkit's header-only nvtx3); at run time off
// unless VRAMKIT_NVTX=1, read once per process. Thread-safe; a disabled range costs one load.
#pragma once

namespace vramkit::mr::detail {

/// True when this build has NVTX and VRAMKIT_NVTX=1 was set when first asked.
[[nodiscard]] bool nvtx_enabled() noexcept;
/// Checks VRAMKIT_NVTX: throws vramkit::invalid_input unless unset, "0" or "1" (the C API calls it
/// when it builds a pool); prints one line to stderr when it is "1" in a build without NVTX.
void check_nvtx_setting();

/// Pushes an NVTX range named `name` (a string literal) for its lifetime when enabled.
class nvtx_range {
 public:
  explicit nvtx_range(const char* name) noexcept;
  ~nvtx_range();
  nvtx_range(const nvtx_range&) = delete;
  nvtx_range& operator=(const nvtx_range&) = delete;

 private:
  bool active_ = false;
};

/// An instantaneous NVTX mark with `message` when enabled.
void nvtx_mark(const char* message) noexcept;

}  // namespace vramkit::mr::detail

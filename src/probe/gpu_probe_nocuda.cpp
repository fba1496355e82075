// The GPU probe of a build without CUDA: it reports the "gpu" section as skipped, with the reason.
#include "cuda/gpu_probe_keys.hpp"
#include "vramkit/core/cuda_device_api.hpp"
#include "vramkit/probe/gpu_probe.hpp"

namespace vramkit::probe {

void run_gpu_probe(const probe_options& options, probe_report& report) {
  if (!detail::wants_any_gpu_section(options)) return;
  auto status = cuda_runtime_status();
  report.skips.push_back(
      {"gpu", status ? std::string("this vramkit was built without CUDA") : status.error().reason});
}

std::vector<std::pair<std::string, std::string>> gpu_probe_keys() {
  return detail::gpu_keys_table();
}

std::vector<std::string> gpu_probe_sections() { return detail::gpu_sections_table(); }

}  // namespace vramkit::probe

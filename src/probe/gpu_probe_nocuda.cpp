// The GPU probe of a build without CUDA: it reports the "gpu" section as skipped, with the reason.
// The case table, --list and --only names are the same as in a CUDA build (gpu_cases.cpp).
#include "gpu_cases.hpp"
#include "vramkit/core/cuda_device_api.hpp"
#include "vramkit/probe/gpu_probe.hpp"

namespace vramkit::probe {

void run_gpu_probe(const probe_options& options, probe_report& report) {
  if (!detail::wants_any_gpu_section(options)) return;
  auto status = cuda_runtime_status();
  report.skips.push_back(
      {"gpu", status ? std::string("this vramkit was built without CUDA") : status.error().reason});
}

}  // namespace vramkit::probe

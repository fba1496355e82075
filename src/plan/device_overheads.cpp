// Default overheads and reading them from a probe report.
#include "vramkit/plan/device_overheads.hpp"

#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "vramkit/core/error.hpp"
#include "vramkit/core/units.hpp"

namespace vramkit::plan {

device_overheads default_overheads() {
  device_overheads o;
  // Measured on the H200 ground-truth run (tests/data/plan/ground_truth.json, torch 2.11,
  // CUDA 13, driver 580): context_bytes is 612 MiB in every case; nvidia-smi minus
  // max_memory_reserved after the run is 742-762 MiB for training steps and 678-698 MiB for
  // generate(), i.e. about 140 MiB and 80 MiB of lazily loaded kernel modules. (PyTorch PR
  // #86509 reports 287 MB for a bare lazy context on an older stack.)
  o.context_bytes = 612 * MiB;
  o.train_modules_bytes = 140 * MiB;
  o.infer_modules_bytes = 80 * MiB;
  // DDP on 2 H200s over NVLink (tests/data/plan/ground_truth_ddp.json, NCCL as PyTorch 2.11
  // ships it): the context is 978 MiB once the process group is up, and nvidia-smi minus
  // max_memory_reserved after three steps is 1588-1606 MiB in every case, 836-854 MiB more than
  // one GPU's 752 MiB. NCCL sizes its buffers by channels and peers (NCCL_BUFFSIZE, 4 MiB per
  // channel and peer by default), so other topologies differ.
  o.collective_bytes = 850 * MiB;
  // PCIe Gen5 x16 pinned host-to-device copies reach about 50 GB/s (H100/H200 class hosts).
  o.h2d_bytes_per_s = 50e9;
  o.source = "default";
  return o;
}

device_overheads overheads_from_probe(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw invalid_input(fmt::format("--probe {}: cannot read the file", path));
  std::stringstream ss;
  ss << in.rdbuf();
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(ss.str());
  } catch (const nlohmann::json::exception& e) {
    throw invalid_input(fmt::format("--probe {}: not valid JSON: {}", path, e.what()));
  }
  device_overheads o = default_overheads();
  o.source = path;
  if (!j.is_object() || !j.contains("results") || !j["results"].is_array())
    throw invalid_input(
        fmt::format("--probe {}: not a vramkit probe report (no 'results' array)", path));
  for (const auto& r : j["results"]) {
    if (!r.is_object() || !r.contains("key") || !r["key"].is_string()) continue;
    const auto key = r["key"].get<std::string>();
    double median = 0;
    if (r.contains("stats") && r["stats"].is_object() && r["stats"].contains("median") &&
        r["stats"]["median"].is_number())
      median = r["stats"]["median"].get<double>();
    const std::string unit =
        r.contains("unit") && r["unit"].is_string() ? r["unit"].get<std::string>() : "";
    if (median <= 0) continue;
    if (key.find("h2d.pinned") != std::string::npos && unit == "GB/s" &&
        key.find("sweep") == std::string::npos) {
      o.h2d_bytes_per_s = median * 1e9;
    } else if (key.find("device.copy") != std::string::npos && unit == "GB/s") {
      o.memory_bytes_per_s = median * 1e9;
    } else if (key.find("gemm.bf16") != std::string::npos && unit == "TFLOP/s") {
      o.gemm_flops = median * 1e12;
    } else if (key.find("attention.bf16") != std::string::npos && unit == "TFLOP/s") {
      o.attention_flops = median * 1e12;
    } else if (key.find("context") != std::string::npos) {
      if (unit == "MiB")
        o.context_bytes = static_cast<std::uint64_t>(median * MiB);
      else if (unit == "B" || unit == "bytes")
        o.context_bytes = static_cast<std::uint64_t>(median);
    }
  }
  return o;
}

}  // namespace vramkit::plan

// Ground-truth files: peak memory measured with real PyTorch runs
// (bench/plan/measure_ground_truth.py writes them; tests/data/plan/ground_truth.json is the
// committed one), read into the planner's own types so that the accuracy test and the accuracy
// report plan exactly the same requests.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "vramkit/plan/model_description.hpp"
#include "vramkit/plan/plan_request.hpp"

namespace vramkit::plan {

/// One measured case. When `error` is set the measurement failed and only `name` is meaningful.
struct ground_truth_case {
  std::string name;
  std::string error;
  model_description model;
  plan_request request;
  std::optional<std::uint64_t> params;          ///< parameter count PyTorch reported
  double max_allocated_bytes = 0;               ///< torch.cuda.max_memory_allocated
  double max_reserved_bytes = 0;                ///< torch.cuda.max_memory_reserved
  std::optional<double> nvidia_smi_used_bytes;  ///< device memory in use at the peak
};

struct ground_truth {
  std::string gpu, driver, torch, transformers, date;
  std::vector<ground_truth_case> cases;
};

/// Reads a ground-truth file. A case's "config" path is resolved against `config_dir` (default:
/// the file's folder); a case without one uses the preset named by "model". Throws invalid_input
/// naming the file and the case for a missing or malformed field.
ground_truth load_ground_truth(const std::string& path, const std::string& config_dir = "");

/// Reads a list of cases known to lie outside a ground-truth file's bar, each with the reason
/// (`{"cases": {"NAME": "why", ...}}`), so that the report and the accuracy test list them apart
/// instead of hiding them. Throws invalid_input naming the file for a missing or malformed list.
std::map<std::string, std::string> load_known_outside(const std::string& path);

}  // namespace vramkit::plan

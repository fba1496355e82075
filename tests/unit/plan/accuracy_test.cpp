// Accuracy against real PyTorch: every committed case of tests/data/plan/ground_truth.json
// without an error must be predicted within +-10% (allocated; median |error| <= 5%), +-15%
// (reserved) and +-15% (nvidia-smi used, where measured). Skips only while the file is absent.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "vramkit/plan/config_loader.hpp"
#include "vramkit/plan/memory_model.hpp"

using namespace vramkit::plan;

namespace {

const std::string k_dir = std::string(VRAMKIT_SOURCE_DIR) + "/tests/data/plan/";

plan_request request_of(const nlohmann::json& c) {
  plan_request r;
  r.mode = parse_mode(c.at("mode").get<std::string>());
  r.batch = c.at("batch");
  if (!c.at("seq").is_null()) r.seq = c.at("seq");
  if (!c.at("image_size").is_null()) r.image_size = c.at("image_size");
  if (!c.at("prompt").is_null()) r.prompt = c.at("prompt");
  if (!c.at("new_tokens").is_null()) r.new_tokens = c.at("new_tokens");
  r.prec = parse_precision(c.at("precision").get<std::string>());
  if (!c.at("optimizer").is_null()) r.optimizer = parse_optimizer(c.at("optimizer").get<std::string>());
  r.ckpt = parse_checkpointing(c.at("checkpointing").get<std::string>());
  r.attention = parse_attention(c.at("attention").get<std::string>());
  if (c.contains("quant") && c.at("quant").is_string()) r.quant = parse_quant(c.at("quant").get<std::string>());
  if (c.contains("steps") && !c.at("steps").is_null()) r.steps = c.at("steps");
  return r;
}

}  // namespace

TEST(PlanAccuracy, EveryGroundTruthCaseWithinTolerance) {
  std::ifstream in(k_dir + "ground_truth.json");
  if (!in) GTEST_SKIP() << "tests/data/plan/ground_truth.json does not exist yet (bench/plan/measure_ground_truth.py writes it)";
  const auto doc = nlohmann::json::parse(in);
  std::vector<double> alloc_err;
  int checked = 0;
  for (const auto& c : doc.at("cases")) {
    const std::string name = c.at("name");
    if (!c.at("error").is_null()) continue;
    SCOPED_TRACE(name);
    const auto m = c.at("config").is_null() ? preset_model(c.at("model").get<std::string>())
                                            : load_model_config(k_dir + c.at("config").get<std::string>());
    // Parameter counts must agree exactly: a wrong count means a wrong model, not a wrong plan.
    if (!c.at("params").is_null()) EXPECT_EQ(parameter_count(m), c.at("params").get<std::uint64_t>());
    const auto p = make_plan(m, request_of(c), default_overheads());
    const double ma = c.at("max_allocated_bytes").get<double>();
    const double mr = c.at("max_reserved_bytes").get<double>();
    const double ea = (static_cast<double>(p.allocated_peak_bytes) - ma) / ma;
    const double er = (static_cast<double>(p.reserved_peak_bytes) - mr) / mr;
    EXPECT_LE(std::fabs(ea), 0.10) << "allocated predicted " << p.allocated_peak_bytes << " measured " << ma;
    EXPECT_LE(std::fabs(er), 0.15) << "reserved predicted " << p.reserved_peak_bytes << " measured " << mr;
    if (!c.at("nvidia_smi_used_bytes").is_null()) {
      const double ms = c.at("nvidia_smi_used_bytes").get<double>();
      const double ed = (static_cast<double>(p.device_peak_bytes) - ms) / ms;
      EXPECT_LE(std::fabs(ed), 0.15) << "device predicted " << p.device_peak_bytes << " nvidia-smi " << ms;
    }
    alloc_err.push_back(std::fabs(ea));
    ++checked;
  }
  ASSERT_GT(checked, 0) << "no case without an error in ground_truth.json";
  std::sort(alloc_err.begin(), alloc_err.end());
  const double median = alloc_err[alloc_err.size() / 2];
  EXPECT_LE(median, 0.05) << "median |allocated error| over " << checked << " cases";
}

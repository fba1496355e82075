// Accuracy against real PyTorch: every committed case of tests/data/plan/ground_truth.json (one
// GPU), ground_truth_ddp.json (DistributedDataParallel) and ground_truth_fsdp.json (FSDP2 full
// shard, as --zero 3; both the most loaded of 2 ranks) without an error
// must be predicted within +-10% (allocated; median |error| <= 5%), +-15% (reserved) and +-15%
// (nvidia-smi used, where measured); ground_truth_new_families.json within +-5% allocated (median
// 2%) and +-5% reserved, apart from the cases listed with their reasons in
// known_outside_new_families.json: those must still be outside that bar or be a
// different model than planned (the list is kept true) and within +-35%. Skips only while a file is
// absent.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "vramkit/core/error.hpp"
#include "vramkit/plan/ground_truth.hpp"
#include "vramkit/plan/memory_model.hpp"

using namespace vramkit::plan;

namespace {

/// Largest |error| allowed: allocated per case and as the median, reserved and nvidia-smi per case.
struct tolerance {
  double allocated = 0.10, median = 0.05, reserved = 0.15, device = 0.15;
};

/// Issue 17's bar for the families and fine-tuning cases of the second round.
constexpr tolerance k_strict{0.05, 0.02, 0.05, 0.15};

/// Known-outside cases are held to this gross bar only (no silent regression of a listed case).
constexpr double k_known_outside_bound = 0.35;

void expect_within_tolerance(const std::string& file, tolerance tol = {},
                             const std::string& known_file = "") {
  const std::string dir = std::string(VRAMKIT_SOURCE_DIR) + "/tests/data/plan/";
  const std::string path = dir + file;
  if (!std::ifstream(path))
    GTEST_SKIP() << "tests/data/plan/" << file
                 << " does not exist yet (bench/plan/measure_*.py write it)";
  const auto doc = load_ground_truth(path);
  const std::map<std::string, std::string> known = known_file.empty()
                                                       ? std::map<std::string, std::string>{}
                                                       : load_known_outside(dir + known_file);
  for (const auto& [name, why] : known) {
    const bool listed = std::any_of(doc.cases.begin(), doc.cases.end(), [&](const auto& c) {
      return c.name == name && c.error.empty();
    });
    EXPECT_TRUE(listed) << known_file << " lists " << name << ", not a measured case of " << file;
  }
  std::vector<double> alloc_err;
  int checked = 0;
  for (const auto& c : doc.cases) {
    if (!c.error.empty()) continue;
    SCOPED_TRACE(c.name);
    const auto k = known.find(c.name);
    // Parameter counts must agree exactly: a wrong count means a wrong model, not a wrong plan
    // (a known-outside case may be listed for that reason).
    const bool same_model = !c.params || parameter_count(c.model) == *c.params;
    if (k == known.end()) {
      EXPECT_TRUE(same_model) << "parameters planned " << parameter_count(c.model) << ", measured "
                              << *c.params;
    }
    const auto p = make_plan(c.model, c.request, default_overheads());
    const double ma = c.max_allocated_bytes;
    const double mr = c.max_reserved_bytes;
    const double ea = (static_cast<double>(p.allocated_peak_bytes) - ma) / ma;
    const double er = (static_cast<double>(p.reserved_peak_bytes) - mr) / mr;
    alloc_err.push_back(std::fabs(ea));
    ++checked;
    if (k != known.end()) {
      // Listed as outside: still outside or a different model (else the list is stale), and
      // not grossly outside.
      EXPECT_TRUE(std::fabs(ea) > tol.allocated || std::fabs(er) > tol.reserved || !same_model)
          << c.name << " is within the bar now: drop it from " << known_file;
      EXPECT_LE(std::fabs(ea), k_known_outside_bound) << "known outside (" << k->second << ")";
      EXPECT_LE(std::fabs(er), k_known_outside_bound) << "known outside (" << k->second << ")";
      continue;
    }
    EXPECT_LE(std::fabs(ea), tol.allocated)
        << "allocated predicted " << p.allocated_peak_bytes << " measured " << ma;
    EXPECT_LE(std::fabs(er), tol.reserved)
        << "reserved predicted " << p.reserved_peak_bytes << " measured " << mr;
    if (c.nvidia_smi_used_bytes) {
      const double ms = *c.nvidia_smi_used_bytes;
      const double ed = (static_cast<double>(p.device_peak_bytes) - ms) / ms;
      EXPECT_LE(std::fabs(ed), tol.device)
          << "device predicted " << p.device_peak_bytes << " nvidia-smi " << ms;
    }
  }
  ASSERT_GT(checked, 0) << "no case without an error in " << file;
  std::sort(alloc_err.begin(), alloc_err.end());
  const double median = alloc_err[alloc_err.size() / 2];
  EXPECT_LE(median, tol.median) << "median |allocated error| over " << checked << " cases";
}

}  // namespace

TEST(PlanAccuracy, EveryGroundTruthCaseWithinTolerance) {
  expect_within_tolerance("ground_truth.json");
}

TEST(PlanAccuracy, EveryDataParallelCaseWithinTolerance) {
  expect_within_tolerance("ground_truth_ddp.json");
}

TEST(PlanAccuracy, EveryFullyShardedCaseWithinTolerance) {
  expect_within_tolerance("ground_truth_fsdp.json");
}

TEST(PlanAccuracy, EveryParallelCaseWithinTolerance) {
  // measure_parallel.py: TP / SP / EP on several GPUs, each case planned with its gpus, tp, sp
  // and ep (the figures are the most loaded rank's).
  expect_within_tolerance("ground_truth_parallel.json");
}

TEST(PlanAccuracy, EveryNewFamilyCaseWithinTolerance) {
  // gpu-check's plan stage writes plan-new-families.json (bench/plan/measure_ground_truth.py
  // --group new: MoE, latent attention, Gemma, Falcon, RoBERTa, ViT, LoRA/QLoRA, optimizer in
  // backward, fused and 8-bit AdamW); committed as ground_truth_new_families.json. Issue 17's bar:
  // allocated within 5% (median 2%), reserved within 5%.
  expect_within_tolerance("ground_truth_new_families.json", k_strict,
                          "known_outside_new_families.json");
}

TEST(PlanAccuracy, MalformedGroundTruthNamesFileAndCase) {
  const std::string path = testing::TempDir() + "/vramkit_bad_ground_truth.json";
  {
    std::ofstream out(path);
    out << R"({"cases": [{"name": "broken", "model": "gpt2", "mode": "train", "batch": 8,
               "precision": "fp32", "checkpointing": "none", "attention": "sdpa",
               "max_reserved_bytes": 1}]})";
  }
  try {
    (void)load_ground_truth(path);
    FAIL() << "a case without max_allocated_bytes was accepted";
  } catch (const vramkit::invalid_input& e) {
    EXPECT_NE(std::string(e.what()).find("broken"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
}

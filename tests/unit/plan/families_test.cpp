// Families added after the walker's split: parameter counts against the published figures and
// the ops that set each family apart.
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "vramkit/plan/config_loader.hpp"
#include "vramkit/plan/memory_model.hpp"
#include "vramkit/plan/training_schedule.hpp"

using namespace vramkit::plan;

namespace {

std::string data(const char* file) {
  return std::string(VRAMKIT_SOURCE_DIR) + "/tests/data/plan/configs/" + file;
}

int count(const schedule& s, const char* label) {
  int n = 0;
  for (const auto& t : s.tensors) n += std::strcmp(t.label, label) == 0;
  return n;
}

}  // namespace

TEST(Families, Phi3MiniHasItsPublishedParameterCount) {
  const auto m = load_model_config(data("phi-3-mini.json"));
  EXPECT_EQ(m.family, model_family::phi3);
  EXPECT_EQ(parameter_count(m), 3821079552u);  // Phi-3-mini-4k-instruct: 3.82B
  EXPECT_EQ(m.t.sliding_window, 2047);
}

TEST(Families, Phi3PacksQkvAndGateUpIntoOneProjectionEach) {
  auto m = load_model_config(data("phi-3-mini-l8.json"));
  plan_request r;
  r.batch = 1, r.seq = 256, r.prec = precision::amp_bf16;
  r.validate(m);
  const auto phi = build_schedule(m, r);
  // One autocast cast of the norm output per projection group: qkv and gate_up.
  EXPECT_EQ(count(phi, "qkv"), 8 * 3);  // 3 training steps
  EXPECT_EQ(count(phi, "query"), 0);
  EXPECT_EQ(count(phi, "mlp gate_up"), 8 * 3);
  auto llama = m;
  llama.family = model_family::llama;
  llama.t.mlp = mlp_kind::swiglu;
  const auto l = build_schedule(llama, r);
  EXPECT_LT(count(phi, "autocast input cast"), count(l, "autocast input cast"));
  // With activations dominating (SGD, longer sequences) the saved casts show in the peak.
  r.optimizer = optimizer_kind::sgd, r.batch = 4, r.seq = 1024;
  EXPECT_LT(make_plan(m, r).allocated_peak_bytes, make_plan(llama, r).allocated_peak_bytes);
}

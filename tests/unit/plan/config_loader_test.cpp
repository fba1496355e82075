// Config parsing for every family, tied/untied embeddings, grouped-query heads, parameter counts
// against published figures, and the errors for bad configs.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <utility>

#include "vramkit/core/error.hpp"
#include "vramkit/plan/config_loader.hpp"

using namespace vramkit::plan;
using ::testing::HasSubstr;

namespace {

std::string error_of(const std::string& json, const std::string& source = "cfg.json") {
  try {
    parse_model_config(json, source);
  } catch (const vramkit::invalid_input& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace

TEST(ConfigLoader, PublishedParameterCounts) {
  // Counts as torch's sum(p.numel() for p in model.parameters()) reports them (bert-base as
  // BertForMaskedLM).
  const std::pair<const char*, std::uint64_t> published[] = {
      {"gpt2", 124439808u},
      {"gpt2-medium", 354823168u},
      {"gpt2-large", 774030080u},
      {"gpt2-xl", 1557611200u},
      {"llama-2-7b", 6738415616u},
      {"llama-3-8b", 8030261248u},
      {"mistral-7b", 7241732096u},
      {"bert-base", 109514298u},
      {"resnet-18", 11689512u},
      {"resnet-50", 25557032u},
      {"resnet-101", 44549160u},
      {"vit-b-16", 86567656u},
      {"tinyllama-1.1b", 1100048384u},
      {"qwen2-0.5b", 494032768u},
      {"qwen2-7b", 7615616512u},
  };
  for (const auto& [name, count] : published)
    EXPECT_EQ(parameter_count(preset_model(name)), count) << name;
}

TEST(ConfigLoader, ParsesEveryFamily) {
  const std::pair<const char*, model_family> families[] = {
      {"gpt2", model_family::gpt2},
      {"tinyllama-1.1b", model_family::llama},
      {"mistral-7b", model_family::llama},
      {"qwen2-0.5b", model_family::llama},
      {"pythia-410m", model_family::gpt_neox},
      {"bert-large", model_family::bert},
      {"resnet-50", model_family::resnet},
      {"vit-b-16", model_family::vit},
  };
  for (const auto& [name, family] : families) EXPECT_EQ(preset_model(name).family, family) << name;
}

TEST(ConfigLoader, GroupedQueryHeadsAndHeadDim) {
  const auto m = preset_model("llama-3-8b");
  EXPECT_EQ(m.t.heads, 32);
  EXPECT_EQ(m.t.kv_heads, 8);
  EXPECT_EQ(m.t.head_dim, 128);
  // head_dim from the config wins over hidden / heads.
  const auto q =
      parse_model_config(R"({"model_type":"llama","hidden_size":1024,"intermediate_size":3072,
    "num_hidden_layers":2,"num_attention_heads":16,"num_key_value_heads":8,"head_dim":128,"vocab_size":1000})",
                         "x.json");
  EXPECT_EQ(q.t.head_dim, 128);
  EXPECT_EQ(q.t.kv_heads, 8);
}

TEST(ConfigLoader, TiedAndUntiedEmbeddings) {
  const std::string base =
      R"({"model_type":"llama","hidden_size":64,"intermediate_size":128,"num_hidden_layers":1,
    "num_attention_heads":4,"vocab_size":1000)";
  const auto untied = parse_model_config(base + "}", "a.json");
  const auto tied = parse_model_config(base + R"(,"tie_word_embeddings":true})", "b.json");
  EXPECT_FALSE(untied.t.tied_embeddings);
  EXPECT_TRUE(tied.t.tied_embeddings);
  EXPECT_EQ(parameter_count(untied) - parameter_count(tied), 1000u * 64u);
  EXPECT_TRUE(preset_model("qwen2-0.5b").t.tied_embeddings);
  EXPECT_FALSE(preset_model("qwen2-7b").t.tied_embeddings);
  EXPECT_TRUE(preset_model("qwen2-0.5b").t.qkv_bias);
}

TEST(ConfigLoader, MissingFieldNamesFileAndField) {
  const auto msg = error_of(R"({"model_type":"gpt2","n_embd":768,"n_head":12,"vocab_size":50257})",
                            "my/config.json");
  EXPECT_THAT(msg, HasSubstr("my/config.json"));
  EXPECT_THAT(msg, HasSubstr("n_layer"));
}

TEST(ConfigLoader, WrongTypeNamesField) {
  const auto msg = error_of(
      R"({"model_type":"bert","hidden_size":"big","num_hidden_layers":2,"num_attention_heads":2,
    "intermediate_size":8,"vocab_size":10})");
  EXPECT_THAT(msg, HasSubstr("hidden_size"));
  EXPECT_THAT(msg, HasSubstr("integer"));
}

TEST(ConfigLoader, UnknownArchitectureListsSupported) {
  const auto msg = error_of(R"({"model_type":"mamba","hidden_size":8})");
  EXPECT_THAT(msg, HasSubstr("mamba"));
  EXPECT_THAT(msg, HasSubstr("gpt2"));
  EXPECT_THAT(msg, HasSubstr("gpt_neox"));
  EXPECT_THAT(msg, HasSubstr("bert"));
}

TEST(ConfigLoader, RefusesAbsurdAndZeroSizes) {
  EXPECT_THAT(
      error_of(R"({"model_type":"gpt2","n_embd":0,"n_layer":2,"n_head":1,"vocab_size":10})"),
      HasSubstr("n_embd"));
  EXPECT_THAT(
      error_of(R"({"model_type":"gpt2","n_embd":64,"n_layer":100000,"n_head":1,"vocab_size":10})"),
      HasSubstr("out of range"));
  EXPECT_THAT(
      error_of(R"({"model_type":"gpt2","n_embd":64,"n_layer":2,"n_head":5,"vocab_size":10})"),
      HasSubstr("not divisible"));
}

TEST(ConfigLoader, MalformedJsonAndMissingFile) {
  EXPECT_THAT(error_of("{not json", "broken.json"), HasSubstr("broken.json"));
  EXPECT_THROW(load_model_config("/nonexistent/config.json"), vramkit::invalid_input);
  EXPECT_THROW(preset_model("gpt5"), vramkit::invalid_input);
}

TEST(ConfigLoader, ResolvesPathsAndPresets) {
  const auto m =
      resolve_model(std::string(VRAMKIT_SOURCE_DIR) + "/tests/data/plan/configs/gpt2.json");
  EXPECT_EQ(parameter_count(m), 124439808u);
  EXPECT_EQ(resolve_model("bert-base").name, "bert-base");
}

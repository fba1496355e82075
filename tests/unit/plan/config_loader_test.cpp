// Config parsing for every family, tied/untied embeddings, grouped-query heads, parameter counts
// against published figures, and the errors for bad configs.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

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
  // Counts as torch's sum(p.numel() for p in model.parameters()) reports them.
  EXPECT_EQ(parameter_count(preset_model("gpt2")), 124439808u);
  EXPECT_EQ(parameter_count(preset_model("gpt2-medium")), 354823168u);
  EXPECT_EQ(parameter_count(preset_model("gpt2-large")), 774030080u);
  EXPECT_EQ(parameter_count(preset_model("gpt2-xl")), 1557611200u);
  EXPECT_EQ(parameter_count(preset_model("llama-2-7b")), 6738415616u);
  EXPECT_EQ(parameter_count(preset_model("llama-3-8b")), 8030261248u);
  EXPECT_EQ(parameter_count(preset_model("mistral-7b")), 7241732096u);
  EXPECT_EQ(parameter_count(preset_model("bert-base")), 109514298u);  // BertForMaskedLM
  EXPECT_EQ(parameter_count(preset_model("resnet-18")), 11689512u);
  EXPECT_EQ(parameter_count(preset_model("resnet-50")), 25557032u);
  EXPECT_EQ(parameter_count(preset_model("resnet-101")), 44549160u);
  EXPECT_EQ(parameter_count(preset_model("vit-b-16")), 86567656u);
  EXPECT_EQ(parameter_count(preset_model("tinyllama-1.1b")), 1100048384u);
  EXPECT_EQ(parameter_count(preset_model("qwen2-0.5b")), 494032768u);
  EXPECT_EQ(parameter_count(preset_model("qwen2-7b")), 7615616512u);
}

TEST(ConfigLoader, ParsesEveryFamily) {
  EXPECT_EQ(preset_model("gpt2").family, model_family::gpt2);
  EXPECT_EQ(preset_model("tinyllama-1.1b").family, model_family::llama);
  EXPECT_EQ(preset_model("mistral-7b").family, model_family::llama);
  EXPECT_EQ(preset_model("qwen2-0.5b").family, model_family::llama);
  EXPECT_EQ(preset_model("pythia-410m").family, model_family::gpt_neox);
  EXPECT_EQ(preset_model("bert-large").family, model_family::bert);
  EXPECT_EQ(preset_model("resnet-50").family, model_family::resnet);
  EXPECT_EQ(preset_model("vit-b-16").family, model_family::vit);
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

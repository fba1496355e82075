// The transformer families and what sets each apart. A new family is a row here plus its
// self-attention function (or an existing one) and its config reader.
#include <array>

#include "transformer.hpp"
#include "vramkit/core/error.hpp"

namespace vramkit::plan::detail {

namespace {

constexpr std::array<transformer_family, 11> k_families{{
    {model_family::gpt2, &gpt2_attention, block_layout::pre_norm},
    {model_family::llama, &llama_attention, block_layout::pre_norm},
    {model_family::gpt_neox, &gpt_neox_attention, block_layout::pre_norm},
    {model_family::bert, &bert_attention, block_layout::post_norm},
    {model_family::phi3, &phi3_attention, block_layout::pre_norm},
    {model_family::moe, &llama_attention, block_layout::pre_norm},
    {model_family::deepseek, &deepseek_attention, block_layout::pre_norm},
    {model_family::gemma, &llama_attention, block_layout::pre_norm},
    {model_family::hf_vit, &bert_attention, block_layout::pre_norm},
    {model_family::falcon, &falcon_attention, block_layout::pre_norm},
    {model_family::llava, &llama_attention, block_layout::pre_norm},
}};

}  // namespace

const transformer_family& transformer_family_of(model_family f) {
  for (const auto& e : k_families)
    if (e.family == f) return e;
  throw logic_error(std::string("plan walker: ") + to_string(f) + " is not a transformer family");
}

}  // namespace vramkit::plan::detail

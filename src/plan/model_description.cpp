// Parameter tensors and counts of the supported families, in torch's model.parameters() order
// and with its deduplication of tied weights.
#include "vramkit/plan/model_description.hpp"

#include <numeric>

namespace vramkit::plan {

const char* to_string(model_family f) noexcept {
  switch (f) {
    case model_family::gpt2:
      return "gpt2";
    case model_family::llama:
      return "llama";
    case model_family::gpt_neox:
      return "gpt_neox";
    case model_family::bert:
      return "bert";
    case model_family::resnet:
      return "resnet";
    case model_family::vit:
      return "vit";
    case model_family::phi3:
      return "phi3";
    case model_family::moe:
      return "moe";
    case model_family::deepseek:
      return "deepseek";
    case model_family::gemma:
      return "gemma";
    case model_family::falcon:
      return "falcon";
    case model_family::t5:
      return "t5";
    case model_family::hf_vit:
      return "hf_vit";
    case model_family::llava:
      return "llava";
  }
  return "?";
}

namespace {

using list = std::vector<parameter_tensor>;

void add(list& out, const char* name, std::int64_t elements, int layer = -1) {
  out.push_back({name, elements, layer});
}

/// A Linear module's weight and, when it has one, its bias: two nn.Parameters, each with its own
/// allocation, gradient and optimizer states (the bias listed right after its weight, named
/// NAME_bias).
void add_linear(list& out, const char* name, std::int64_t weight, std::int64_t bias,
                int layer = -1) {
  out.push_back({name, weight, layer});
  if (bias > 0) out.push_back({std::string(name) + "_bias", bias, layer});
}

/// Whether the parameters are listed as the LLaMA-style modules hold them: separate q_proj,
/// k_proj and v_proj (and gate_proj and up_proj in the gated MLP), each an nn.Parameter with its
/// own gradient, optimizer states and autocast cast, instead of one fused tensor per role (as
/// GPT-2, GPT-NeoX, Falcon and Phi-3 have them). Listed apart, LLaVA-1.5 training's peak
/// reserved went from +6.6% to +1.8% of the H200 figure and TinyLlama's with checkpointing from
/// -5.3% to 0.0%. BERT/RoBERTa are listed apart too: H200 allocator traces of their amp-fp16
/// training make eight 2.25 MiB Adam states per RoBERTa-base layer (q, k, v, output), and with
/// them apart BERT-base's large segments come out as PyTorch's (reserved +12.0% -> -0.7%); the
/// fp32 BERT-base case falls from -0.1% to -9.5% (one 954 MiB segment fewer; no fp32 trace yet).
/// transformers' ViT has separate modules too but is still listed fused; DeepSeek's dense MLPs
/// are listed apart in mlp_params (its attention is MLA's own projections).
bool separate_projections(const model_description& m) {
  switch (m.family) {
    case model_family::llama:
    case model_family::llava:
    case model_family::moe:
    case model_family::gemma:
    case model_family::bert:
      return true;
    default:
      return false;
  }
}

// T5ForConditionalGeneration: shared embedding, encoder blocks (self-attention, feed-forward, the
// first with the relative-position bias), final norm, decoder blocks (self-attention,
// cross-attention, feed-forward), final norm, lm_head unless tied. Norms are weight-only.
void t5_params(const model_description& m, list& out) {
  const auto& t = m.t;
  const std::int64_t h = t.hidden, f = t.intermediate, vocab = t.vocab;
  const std::int64_t inner = t.heads * t.head_dim;
  const std::int64_t enc = t.layers - t.decoder_layers;
  const std::int64_t ffn = t.mlp == mlp_kind::swiglu ? 2 * h * f : h * f;
  add(out, "embed_tokens", vocab * h);
  for (int l = 0; l < t.layers; ++l) {
    const bool first = l == 0 || l == enc;
    add(out, "attn_qkv", 3 * h * inner, l);
    add(out, "attn_out", inner * h, l);
    if (first) add(out, "rel_bias", t.relative_buckets * t.heads, l);
    add(out, "attn_norm", h, l);
    if (l >= enc) {
      add(out, "cross_q", h * inner, l);
      add(out, "cross_kv", 2 * h * inner, l);
      add(out, "cross_out", inner * h, l);
      add(out, "cross_norm", h, l);
    }
    add(out, t.mlp == mlp_kind::swiglu ? "mlp_gate_up" : "mlp_up", ffn, l);
    add(out, "mlp_down", f * h, l);
    add(out, "mlp_norm", h, l);
    if (l == enc - 1) add(out, "enc_final_norm", h, -1);
  }
  add(out, "final_norm", h);
  if (!t.tied_embeddings) add(out, "lm_head", vocab * h);
}

// The embeddings ahead of the first block (and LLaVA's vision tower and projector).
void embedding_params(const model_description& m, list& out) {
  const auto& t = m.t;
  const std::int64_t h = t.hidden, vocab = t.vocab;
  const std::int64_t norm = t.layer_norm ? 2 * h : h;
  if (m.family == model_family::hf_vit) {
    // ViTEmbeddings: cls_token, position_embeddings, the patch projection (a conv).
    add(out, "cls_token", h);
    add(out, "embed_positions", t.max_positions * h);
    add(out, "patch_embed", m.vit.channels * m.vit.patch * m.vit.patch * h + h);
  } else {
    if (m.family == model_family::llava) {
      // CLIPVisionModel (embeddings, pre-norm, encoder layers with biases, post-norm) as one
      // tensor (frozen in LLaVA's recipes), then the projector's two Linear layers.
      const auto& v = m.vit;
      const std::int64_t vh = v.hidden, grid = (v.image / v.patch) * (v.image / v.patch);
      const std::int64_t per_layer =
          4 * (vh * vh + vh) + 4 * vh + (vh * v.mlp_dim + v.mlp_dim) + (v.mlp_dim * vh + vh);
      add(out, "vision_tower",
          vh + v.channels * v.patch * v.patch * vh + (grid + 1) * vh + 2 * vh +
              v.layers * per_layer + 2 * vh);
      add(out, "projector_1", vh * h + h);
      add(out, "projector_2", h * h + h);
    }
    // Gemma-3's vision tower and projector, which text batches leave idle (frozen in effect).
    if (m.idle_vision_parameters > 0) add(out, "vision_tower", m.idle_vision_parameters);
    add(out, "embed_tokens", vocab * h);
  }
  if (t.max_positions > 0 && m.family != model_family::hf_vit)
    add(out, "embed_positions", t.max_positions * h);
  if (t.type_vocab > 0) add(out, "embed_token_types", t.type_vocab * h);
  if (m.family == model_family::bert) add(out, "embed_norm", norm);
}

// Layer l's attention projections (MLA, separate q/k/v, or one packed qkv).
void attention_params(const model_description& m, int l, list& out) {
  const auto& t = m.t;
  const std::int64_t h = t.hidden, q = t.heads * t.head_dim, kv = t.kv_heads * t.head_dim;
  const auto& mla = t.mla;
  if (t.latent_attention()) {
    // DeepseekV3Attention: q through a low-rank pair (or one q_proj), the compressed KV and
    // the shared rotary key from kv_a_proj_with_mqa, then kv_b_proj to per-head keys/values.
    const std::int64_t qh = t.heads * (mla.qk_nope + mla.qk_rope);
    if (mla.q_lora_rank > 0) {
      add(out, "mla_q_a", h * mla.q_lora_rank, l);
      add(out, "mla_q_a_norm", mla.q_lora_rank, l);
      add(out, "mla_q_b", mla.q_lora_rank * qh, l);
    } else {
      add(out, "mla_q", h * qh, l);
    }
    add(out, "mla_kv_a", h * (mla.kv_lora_rank + mla.qk_rope), l);
    add(out, "mla_kv_a_norm", mla.kv_lora_rank, l);
    add(out, "mla_kv_b", mla.kv_lora_rank * t.heads * (mla.qk_nope + mla.v_head), l);
    add(out, "attn_out", t.heads * mla.v_head * h, l);
  } else {
    if (separate_projections(m)) {
      const std::int64_t bias = t.qkv_bias ? 1 : 0;
      add_linear(out, "attn_q", h * q, bias * q, l);
      add_linear(out, "attn_k", h * kv, bias * kv, l);
      add_linear(out, "attn_v", h * kv, bias * kv, l);
    } else {
      add_linear(out, "attn_qkv", h * (q + 2 * kv), t.qkv_bias ? q + 2 * kv : 0, l);
    }
    if (t.qk_norm) add(out, "attn_qk_norm", 2 * t.head_dim, l);
    add_linear(out, "attn_out", q * h, t.out_bias ? h : 0, l);
  }
}

// Layer l's feed-forward: routed and shared experts, or one gated or plain MLP.
void mlp_params(const model_description& m, int l, list& out) {
  const auto& t = m.t;
  const std::int64_t h = t.hidden, f = t.intermediate;
  const auto& moe = t.moe;
  if (t.sparse(l)) {
    // transformers 5 keeps the routed experts as two 3-D parameters per layer.
    add(out, "moe_router", moe.experts * h, l);
    add(out, "moe_experts_gate_up", moe.experts * 2 * h * moe.expert_ffn, l);
    add(out, "moe_experts_down", moe.experts * moe.expert_ffn * h, l);
    if (moe.shared_ffn > 0) {
      // The shared expert is a plain MLP module: gate_proj and up_proj are separate Linears.
      add(out, "moe_shared_gate_proj", h * moe.shared_ffn, l);
      add(out, "moe_shared_up_proj", h * moe.shared_ffn, l);
      add(out, "moe_shared_down", moe.shared_ffn * h, l);
    }
    if (moe.shared_gate) add(out, "moe_shared_gate", h, l);
    return;
  }
  // DeepseekV3MLP (the dense first layers) holds gate_proj and up_proj as two Linears, each with
  // its own gradient and Adam states: listed fused, DeepSeek-V2-Lite's two-layer training step
  // came out at -6.0% of the H200's peak reserved; apart, -0.6%.
  if (t.mlp == mlp_kind::swiglu &&
      (separate_projections(m) || m.family == model_family::deepseek)) {
    add_linear(out, "mlp_gate", h * f, t.mlp_bias ? f : 0, l);
    add_linear(out, "mlp_up_proj", h * f, t.mlp_bias ? f : 0, l);
  } else if (t.mlp == mlp_kind::swiglu || t.mlp == mlp_kind::swiglu_packed) {
    add_linear(out, "mlp_gate_up", 2 * h * f, t.mlp_bias ? 2 * f : 0, l);
  } else {
    add_linear(out, "mlp_up", h * f, t.mlp_bias ? f : 0, l);
  }
  add_linear(out, "mlp_down", f * h, t.mlp_bias ? h : 0, l);
}

void transformer_params(const model_description& m, list& out) {
  if (m.family == model_family::t5) {
    t5_params(m, out);
    return;
  }
  const auto& t = m.t;
  const std::int64_t h = t.hidden, vocab = t.vocab;
  const std::int64_t norm = t.layer_norm ? 2 * h : h;
  embedding_params(m, out);
  for (int l = 0; l < t.layers; ++l) {
    add(out, "attn_norm", norm, l);
    attention_params(m, l, out);
    if (t.sandwich_norm) add(out, "post_attn_norm", norm, l);
    if (!t.shared_parallel_norm) add(out, "mlp_norm", norm, l);
    mlp_params(m, l, out);
    if (t.sandwich_norm && !t.sparse(l)) add(out, "post_mlp_norm", norm, l);
  }
  if (m.family == model_family::bert) {
    // BertForMaskedLM's prediction head: transform dense + LayerNorm, decoder bias (weight tied).
    add_linear(out, "head_transform", h * h, h);
    add(out, "head_transform_norm", norm);
    add(out, "head_bias", vocab);
  } else {
    add(out, "final_norm", norm);
  }
  if (m.family == model_family::hf_vit) {
    add(out, "classifier", h * vocab + vocab);  // vocab: the number of labels
    return;
  }
  if (!t.tied_embeddings) add(out, "lm_head", vocab * h);
}

struct conv_counter {
  list* out;
  int stage;
  void conv(std::int64_t cin, std::int64_t cout, int k) {
    add(*out, "conv", cin * cout * k * k, stage);
  }
  void bn(std::int64_t c) { add(*out, "bn", 2 * c, stage); }
};

void resnet_params(const model_description& m, list& out) {
  conv_counter c{&out, -1};
  c.conv(3, 64, 7);
  c.bn(64);
  std::int64_t in = 64;
  const std::int64_t widths[4] = {64, 128, 256, 512};
  const std::int64_t expansion = m.resnet.bottleneck ? 4 : 1;
  for (int s = 0; s < 4; ++s) {
    c.stage = s;
    for (int b = 0; b < m.resnet.blocks[s]; ++b) {
      const std::int64_t w = widths[s], outc = w * expansion;
      const bool down = b == 0 && (s > 0 || in != outc);
      if (m.resnet.bottleneck) {
        c.conv(in, w, 1), c.bn(w), c.conv(w, w, 3), c.bn(w), c.conv(w, outc, 1), c.bn(outc);
      } else {
        c.conv(in, w, 3), c.bn(w), c.conv(w, w, 3), c.bn(w);
      }
      if (down) c.conv(in, outc, 1), c.bn(outc);
      in = outc;
    }
  }
  add(out, "fc", in * m.resnet.num_classes + m.resnet.num_classes);
}

void vit_params(const model_description& m, list& out) {
  const auto& v = m.vit;
  const std::int64_t h = v.hidden;
  add(out, "class_token", h);
  add(out, "conv_proj", 3 * h * v.patch * v.patch + h);
  // The position table depends on the image size; torchvision builds it for 224 (14x14+1).
  add(out, "pos_embedding", (224 / v.patch) * (224 / v.patch) * h + h);
  for (int l = 0; l < v.layers; ++l) {
    add(out, "ln_1", 2 * h, static_cast<int>(l));
    add(out, "in_proj", 3 * h * h + 3 * h, l);
    add(out, "out_proj", h * h + h, l);
    add(out, "ln_2", 2 * h, l);
    add(out, "mlp_1", h * v.mlp_dim + v.mlp_dim, l);
    add(out, "mlp_2", v.mlp_dim * h + h, l);
  }
  add(out, "encoder_ln", 2 * h);
  add(out, "head", h * v.num_classes + v.num_classes);
}

}  // namespace

std::vector<parameter_tensor> parameter_tensors(const model_description& m) {
  list out;
  switch (m.family) {
    case model_family::resnet:
      resnet_params(m, out);
      break;
    case model_family::vit:
      vit_params(m, out);
      break;
    default:
      transformer_params(m, out);
      break;
  }
  return out;
}

std::uint64_t parameter_count(const model_description& m) {
  std::uint64_t n = 0;
  for (const auto& p : parameter_tensors(m)) n += static_cast<std::uint64_t>(p.elements);
  return n;
}

std::uint64_t buffer_bytes(const model_description& m) {
  if (m.family == model_family::resnet) {
    // BatchNorm running_mean + running_var (fp32) and num_batches_tracked (int64) per layer.
    std::uint64_t bytes = 0;
    for (const auto& p : parameter_tensors(m))
      if (p.name == "bn") bytes += static_cast<std::uint64_t>(p.elements) * 4 + 8;
    return bytes;
  }
  if (m.family == model_family::bert) {
    // position_ids and token_type_ids buffers (int64, max_positions each).
    return static_cast<std::uint64_t>(m.t.max_positions) * 16;
  }
  return 0;
}

}  // namespace vramkit::plan

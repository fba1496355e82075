// Forward and loss of one micro-batch of a language model: inputs, embeddings (token, learned
// positions, token types, BERT's embedding norm, dropout), the layers, the final norm or BERT's
// prediction-head transform, the logits and the loss.
#include "transformer.hpp"

namespace vramkit::plan::detail {

namespace {

tensor embeddings(walker& w, const dims& D, const tensor& ids) {
  const auto& t = w.model().t;
  const auto& lm = w.lm();
  const u64 nh = static_cast<u64>(D.tok() * D.h);
  const int eb = w.dt().act;  // embedding output: fp32 under autocast (embedding is not cast)
  tensor x = w.op(nh * eb, "token embeddings", {}, {ids}, {lm.embed});
  // Gemma: embeddings * sqrt(hidden) (a 0-dim tensor in the embedding dtype).
  if (t.embed_scale) x = w.op(nh * eb, "scaled embeddings", {edge{x, nh * eb}}, {});
  if (lm.pos >= 0) {
    tensor pe = w.op(static_cast<u64>(D.s * D.h) * eb, "position embeddings", {}, {}, {lm.pos});
    x = add(w, x, eb, pe, eb, nh, "embeddings sum");
    pe.reset();
  }
  if (lm.types >= 0) {
    tensor te = w.op(nh * eb, "token type embeddings", {}, {}, {lm.types});
    x = add(w, x, eb, te, eb, nh, "embeddings sum");
    te.reset();
  }
  if (lm.embed_norm >= 0) x = layer_norm(w, x, D.tok(), D.h, eb, lm.embed_norm);
  if (t.embedding_dropout > 0)
    x = dropout(w, x, nh, w.dt().amp && lm.embed_norm >= 0 ? 4 : eb, t.embedding_dropout,
                "embedding dropout");
  return x;
}

/// The final norm, or BERT's prediction-head transform (dense, GELU, LayerNorm).
tensor head_input(walker& w, const dims& D, const tensor& x, int xb) {
  const auto& lm = w.lm();
  if (w.model().family != model_family::bert) return norm(w, x, D.tok(), D.h, xb, lm.final_norm);
  const u64 nh = static_cast<u64>(D.tok() * D.h);
  const int low = w.dt().low;
  tensor d = w.linear(x, D.tok(), D.h, D.h, lm.head_transform, xb, "head transform");
  tensor g = w.op(nh * low, "head gelu", {edge{d, nh * low}}, {d});
  d.reset();
  return layer_norm(w, g, D.tok(), D.h, low, lm.head_transform_norm);
}

}  // namespace

tensor lm_forward_loss(walker& w, bool with_loss) {
  const auto& t = w.model().t;
  const auto& r = w.request();
  const dims D = lm_dims(w);
  const u64 rows = static_cast<u64>(D.tok());
  const int eb = w.dt().act;
  w.set_phase(phase::forward);
  w.set_layer(-1);
  tensor ids = w.alloc(rows * 8, component::inputs, "input ids");
  tensor labels = with_loss ? w.alloc(rows * 8, component::inputs, "labels") : tensor{};
  tensor x = embeddings(w, D, ids);
  if (w.model().family == model_family::llava) {
    // One image per sample: its features replace the prompt's image tokens (masked_scatter makes
    // a new tensor; the mask is an expanded bool view).
    tensor img = llava_image_features(w, D.b);
    const u64 nh = static_cast<u64>(D.tok() * D.h);
    const u64 ni = static_cast<u64>(D.b * w.model().image_tokens() * D.h);
    x = w.op(nh * eb, "embeddings with image features",
             {edge{x, nh * eb}, edge{img, ni * w.dt().low}}, {});
  }
  // A causal eager mask (b, 1, s, s) in the residual dtype lives through the forward.
  tensor mask;
  if (r.attention == attention_kind::eager && w.model().family != model_family::bert)
    mask = w.alloc(
        static_cast<u64>(D.b) * static_cast<u64>(D.s * D.sp) * static_cast<u64>(D.s * D.sp) * eb,
        component::temporaries, "causal mask");
  int xb = eb;
  const i64 layers = t.layers / r.pp;
  for (int l = 0; l < layers; ++l) {
    x = run_layer(w, x, l);
    xb = w.dt().act;
  }
  w.set_layer(-1);
  tensor hidden = head_input(w, D, x, xb);
  // The base model's output object holds its last hidden state until the head model's forward
  // returns: the final norm's output (BERT: the encoder's output; its prediction-head transform
  // is a local of the head module) lives through the loss (H200 trace of Llama amp training).
  const bool bert = w.model().family == model_family::bert;
  tensor last_hidden = bert ? x : hidden;
  x.reset();
  const int head = w.lm().head >= 0 ? w.lm().head : w.lm().embed;
  const int hb = w.dt().amp ? 4 : w.dt().act;
  tensor logits =
      w.linear(hidden, D.tok(), D.h, D.V / r.tp, head, hb, "logits", component::logits_and_loss);
  hidden.reset();
  if (t.final_softcap > 0) {
    // Gemma-2: logits / cap, tanh (saves its output), * cap, each a (tokens, V) tensor.
    const u64 nl = w.bytes(logits);
    constexpr auto ll = component::logits_and_loss;
    logits = w.op(nl, "logits softcap divided", {edge{logits, nl}}, {}, {}, 0, ll);
    logits = w.op(nl, "logits softcap tanh", {edge{logits, nl}}, {}, {}, 0, ll);
    w.save_output(logits);
    logits = w.op(nl, "logits softcap scaled", {edge{logits, nl}}, {}, {}, 0, ll);
  }
  if (!with_loss) {
    logits.reset();
    last_hidden.reset();
    w.clear_autocast_cache();
    mask.reset();
    ids.reset();
    return {};
  }
  // transformers' ForCausalLMLoss calls logits.float(); BertForMaskedLM hands 16-bit logits to
  // CrossEntropyLoss.
  tensor loss = lm_loss(w, logits, rows, D.V / r.tp, !bert);
  last_hidden.reset();
  // The model output (holding the logits) dies when the statement returns the loss.
  logits.reset();
  w.clear_autocast_cache();
  mask.reset();
  ids.reset();
  labels.reset();
  return loss;
}

}  // namespace vramkit::plan::detail

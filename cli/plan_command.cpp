// `vramkit plan MODEL [options]`: predicts peak device and host memory of a training step or a
// generate() call, or with --fit searches the configurations that fit a GPU. Parses into the
// library's plan_request, calls the vramkit::plan library and prints what it renders.
#include <cctype>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "commands.hpp"
#include "vramkit/core/error.hpp"
#include "vramkit/core/units.hpp"
#include "vramkit/plan/config_loader.hpp"
#include "vramkit/plan/fit_search.hpp"
#include "vramkit/plan/gpu_catalogue.hpp"
#include "vramkit/plan/memory_model.hpp"
#include "vramkit/plan/offload_plan.hpp"
#include "vramkit/plan/serving_capacity.hpp"

namespace vramkit::cli {

namespace {

/// The request itself, plus what only the command needs.
struct plan_args {
  plan::plan_request request;
  std::string model, probe, gpu;
  std::string offload;   ///< vramkit offload (activations[:N], both[:N]); empty: none
  std::string compress;  ///< --compress-activations; empty: none
  bool json = false, fit = false, list = false, allow_lossy = false;
  bool serve = false;
  plan::serve_options serve_opt;
  /// Options given on the command line that --serve does not use, or that only --serve uses.
  std::vector<std::string> given_not_for_serve, given_serve_only;
};

void print_list() {
  std::string out = "presets:";
  for (const auto& n : plan::preset_names()) out += " " + n;
  out += "\nGPUs:";
  for (const auto& g : plan::gpu_catalogue())
    out += fmt::format("\n  {:<16} {:>10}  {}", g.name,
                       format_bytes(static_cast<double>(g.memory_bytes)), g.source);
  std::printf("%s\n", out.c_str());
}

/// --gpu NAME|CAPACITY: the catalogue's GPU, or a capacity.
plan::fit_options gpu_options(const std::string& gpu) {
  plan::fit_options opt;
  if (gpu.empty()) return opt;
  const auto target = plan::parse_gpu_target(gpu);
  if (target.gpu != nullptr) opt.gpu = *target.gpu;
  opt.capacity_bytes = target.capacity_bytes;
  return opt;
}

/// `--serve`: vLLM-style capacity of one replica on --gpu.
void run_serve(const plan_args& a, const plan::model_description& model,
               const plan::device_overheads& overheads, command_context& ctx) {
  if (a.fit) throw invalid_input("--serve answers capacity for one setup; drop --fit");
  if (a.gpu.empty())
    throw invalid_input("--serve needs --gpu NAME or --gpu BYTES (e.g. --gpu h100)");
  if (!a.given_not_for_serve.empty())
    throw invalid_input(a.given_not_for_serve.front() +
                        " does not apply to --serve (it plans the engine's own batches; give "
                        "--max-num-seqs, --max-model-len or --concurrency)");
  plan::plan_request r = a.request;
  r.mode = plan::run_mode::infer;
  r.gpus = r.tp * r.pp;
  const auto s =
      plan::plan_serving(model, r, a.serve_opt, gpu_options(a.gpu).capacity_bytes, overheads);
  std::printf("%s\n", a.json ? plan::to_json(s).c_str() : plan::to_table(s).c_str());
  if (!s.fits) ctx.exit_code = 1;
}

void run_plan(const plan_args& a, command_context& ctx) {
  if (a.list) return print_list();
  if (a.model.empty())
    throw invalid_input(
        "plan needs a MODEL: a preset name (vramkit plan --list) or a path to a config.json");
  if (!a.serve && !a.given_serve_only.empty())
    throw invalid_input(a.given_serve_only.front() + " applies to --serve");
  const auto model = plan::resolve_model(a.model);
  plan::plan_request r = a.request;
  const auto overheads =
      a.probe.empty() ? plan::default_overheads() : plan::overheads_from_probe(a.probe);
  if (a.serve) return run_serve(a, model, overheads, ctx);
  const plan::fit_options opt = gpu_options(a.gpu);
  const plan::compress_option compress =
      plan::parse_compress_option(a.compress.empty() ? "none" : a.compress);
  if (a.allow_lossy && !a.fit)
    throw invalid_input("--allow-lossy lets --fit consider lossy options; it needs --fit");
  // `--compress-activations none` asks for the offload model's figures without compression (and
  // without offload unless --offload activations/both says so): every block kept, or
  // checkpointed with --checkpointing full.
  const bool offload_model = !a.offload.empty() || !a.compress.empty();
  if (offload_model) {
    if (a.fit && !a.offload.empty())
      throw invalid_input("--fit chooses the offload mix itself: drop --offload " + a.offload);
    if (a.fit && compress.enabled && !a.allow_lossy)
      throw invalid_input("--compress-activations is lossy: --fit considers it with --allow-lossy");
    if (r.ckpt == plan::checkpointing::selective && !a.fit)
      throw invalid_input(
          "--offload activations/--compress-activations with --checkpointing: give none or full "
          "(full checkpoints the blocks not offloaded; --fit mixes checkpointing per block)");
  }
  if (!a.fit && offload_model) {
    const auto oo = plan::parse_offload_option(a.offload.empty() ? "none" : a.offload,
                                               static_cast<int>(model.t.layers));
    r.device_capacity_bytes = 0;
    const auto p = plan::make_plan(model, r, overheads);
    const plan::gpu_spec& gpu = opt.gpu ? *opt.gpu : plan::find_gpu("H100 SXM 80GB");
    const auto op = plan::plan_offload(model, r, oo, compress, gpu, overheads);
    std::printf("%s\n", a.json ? plan::to_json(p, op).c_str()
                               : (plan::to_table(p) + plan::to_table(op)).c_str());
    if (opt.capacity_bytes != 0 && op.device_peak_bytes > opt.capacity_bytes) {
      std::fprintf(stderr, "vramkit plan: does NOT fit in %s per GPU even with offload\n",
                   format_bytes(static_cast<double>(opt.capacity_bytes)).c_str());
      ctx.exit_code = 1;
    }
    return;
  }
  if (!a.fit) {
    // With --gpu the allocator is modelled under that capacity and the plan says whether it fits.
    r.device_capacity_bytes = opt.capacity_bytes;
    const auto p = plan::make_plan(model, r, overheads);
    std::printf("%s\n", a.json ? plan::to_json(p).c_str() : plan::to_table(p).c_str());
    if (!p.fits()) {
      std::fprintf(stderr,
                   "vramkit plan: does NOT fit in %s per GPU (%zu allocations fail even after "
                   "the allocator frees its cache); add --fit to search the configurations "
                   "that fit\n",
                   format_bytes(static_cast<double>(r.device_capacity_bytes)).c_str(),
                   p.out_of_memory);
      ctx.exit_code = 1;
    }
    return;
  }
  if (a.gpu.empty())
    throw invalid_input("--fit needs --gpu NAME or --gpu BYTES (e.g. --gpu h100 or --gpu 24GiB)");
  const auto res = plan::fit_search_with_offload(model, r, opt, a.allow_lossy, compress, overheads);
  if (a.json)
    std::printf("%s\n", plan::to_json(res).c_str());
  else
    std::printf("%s", plan::to_table(res).c_str());
  if (res.fits.empty()) ctx.exit_code = 1;
}

/// An option parsed by one of the library's parse_* functions straight into a request field.
template <typename Enum>
void add_enum(CLI::App* sub, const char* flag, Enum& field, Enum (*parse)(std::string_view),
              const char* help) {
  sub->add_option_function<std::string>(
         flag, [&field, parse](const std::string& s) { field = parse(s); }, help)
      ->default_str(plan::to_string(field));
}

void add_request_options(CLI::App* sub, plan::plan_request& r, plan_args& a) {
  add_enum(sub, "--mode", r.mode, &plan::parse_mode, "train or infer");
  sub->add_option("--batch", r.batch, "global batch (samples per optimizer step)")
      ->capture_default_str();
  sub->add_option("--micro-batch", r.micro_batch,
                  "samples per forward/backward per GPU (default: batch / data-parallel ranks)");
  sub->add_option("--seq", r.seq,
                  "tokens per sample for training (default 1024, capped at the model's positions)");
  sub->add_option("--prompt", r.prompt, "inference: prompt tokens (default 512)");
  sub->add_option("--new-tokens", r.new_tokens, "inference: generated tokens (default 128)");
  sub->add_option("--image-size", r.image_size, "CNN/ViT input side")->capture_default_str();
  add_enum(sub, "--precision", r.prec, &plan::parse_precision,
           "fp32, amp-bf16, amp-fp16, bf16 or fp8");
  add_enum(sub, "--optimizer", r.optimizer, &plan::parse_optimizer,
           "sgd, sgd-momentum, adam, adamw, adamw-fused, adamw-8bit or paged-adamw-8bit "
           "(bitsandbytes; paged: states in CUDA managed memory)");
  sub->add_flag("--optimizer-in-backward", r.optimizer_in_backward,
                "step each parameter in its gradient hook and free the gradient at once "
                "(torchtune's optimizer_in_bwd; one GPU, no gradient accumulation)");
  sub->add_option("--lora-rank", r.lora_rank,
                  "LoRA (PEFT) adapters of this rank, base frozen in the precision's 16-bit type; "
                  "with --quant nf4: QLoRA");
  sub->add_option_function<std::string>(
         "--lora-targets",
         [&r](const std::string& s) { r.lora_targets = plan::parse_lora_targets(s); },
         "layers LoRA adapts: all (default), attention, mlp, or a list of q,k,v,o,gate,up,down")
      ->default_str("all");
  sub->add_option("--lora-dropout", r.lora_dropout, "LoRA dropout probability (default 0)");
  add_enum(sub, "--checkpointing", r.ckpt, &plan::parse_checkpointing, "none, full or selective");
  add_enum(sub, "--attention", r.attention, &plan::parse_attention, "sdpa, flash or eager");
  sub->add_option("--gpus", r.gpus, "GPUs in total")->capture_default_str();
  sub->add_option("--gpus-per-node", r.gpus_per_node, "GPUs per node (host memory is per node)")
      ->capture_default_str();
  sub->add_option("--zero", r.zero, "ZeRO stage 0, 1, 2 or 3 (3 = FSDP full shard)")
      ->capture_default_str();
  sub->add_option("--tp", r.tp, "tensor-parallel degree")->capture_default_str();
  sub->add_flag("--sp", r.sp, "sequence parallel with --tp");
  sub->add_option("--pp", r.pp, "pipeline-parallel degree")->capture_default_str();
  sub->add_option("--ep", r.ep,
                  "expert-parallel degree (mixture-of-experts: experts / N per GPU, all-to-all)")
      ->capture_default_str();
  sub->add_option_function<std::string>(
      "--expert-load",
      [&r](const std::string& path) { r.expert_load = plan::load_expert_load(path); },
      "FILE: mixture-of-experts routing to plan instead of balanced routing (tokens per expert, "
      "one array per MoE forward; measure_ground_truth.py --record-routing writes one)");
  sub->add_option_function<std::string>(
      "--offload",
      [&r, &a](const std::string& s) {
        if (s == "none" || s == "optimizer" || s == "params") {
          r.offload = plan::parse_offload(s);
          a.offload.clear();
        } else {
          (void)plan::parse_offload_option(s, 0);  // the spelling; N is checked later
          r.offload = plan::offload_kind::none;
          a.offload = s;
        }
      },
      "optimizer or params: ZeRO-Offload (CPU optimizer, pinned host states); activations[:N]: "
      "vramkit.offload_activations of N blocks (default all), or [:MIX] with one of o (offload), "
      "c (checkpoint), k (keep), s (selective: GEMM/attention outputs kept, memory-bound ops "
      "recomputed), h (selective, those outputs on the host), x (checkpoint, the block's input on "
      "the host) per block; both[:N|:MIX]: that plus "
      "vramkit.OffloadedAdamW");
  sub->add_option("--compress-activations", a.compress,
                  "fp8[:mlp,attn,norm[:recompute]] or fp8-e5m2[:...]: saved activations stored "
                  "in 8 bits (vramkit.compress_activations; :recompute, compression alone: "
                  "products and normalized outputs recomputed in backward)");
  sub->add_flag("--allow-lossy", a.allow_lossy,
                "let --fit consider lossy options (activation compression)");
  add_enum(sub, "--quant", r.quant, &plan::parse_quant,
           "weights: none, int8, int4, nf4 or fp8 at inference; nf4 with --lora-rank (QLoRA)");
  add_enum(sub, "--kv-cache-dtype", r.kv_cache, &plan::parse_kv_cache,
           "paged KV cache element type: auto (the model's) or fp8");
  add_enum(sub, "--serving", r.serving, &plan::parse_serving,
           "inference engine: generate (transformers) or paged (paged KV cache)");
}

}  // namespace

void add_plan_command(CLI::App& app, command_context& ctx) {
  auto a = std::make_shared<plan_args>();
  auto* sub = app.add_subcommand(
      "plan", "Predict peak GPU and host memory of training or inference; --fit finds what fits");
  sub->add_option("model", a->model,
                  "preset name (see --list) or path to a Hugging Face config.json");
  sub->add_flag("--list", a->list, "list the presets and the GPU catalogue");
  add_request_options(sub, a->request, *a);
  sub->add_option("--probe", a->probe,
                  "vramkit probe --json file with measured context and PCIe figures");
  sub->add_option("--gpu", a->gpu,
                  "GPU name from the catalogue or a capacity (e.g. 24GiB): models the allocator "
                  "under that memory and says "
                  "whether the run fits (exit 1 when not); with --fit, the GPU to search for");
  sub->add_flag("--fit", a->fit,
                "search the configurations that fit --gpu and rank them by estimated step time");
  sub->add_flag("--json", a->json, "print one JSON object");
  auto& so = a->serve_opt;
  sub->add_flag("--serve", a->serve,
                "serving capacity on --gpu as a vLLM-style engine: KV blocks left after the "
                "weights and the profile peak; max concurrent sequences and max context");
  sub->add_option("--gpu-memory-utilization", so.gpu_memory_utilization,
                  "--serve: fraction of the GPU the engine uses (default 0.9)");
  sub->add_option("--max-model-len", so.max_model_len,
                  "--serve: context per sequence (default: max_position_embeddings)");
  sub->add_option("--max-num-seqs", so.max_num_seqs,
                  "--serve: scheduler cap on concurrent sequences (default 256)");
  sub->add_option("--max-num-batched-tokens", so.max_num_batched_tokens,
                  "--serve: largest prefill chunk, the profile run's size (default 8192)");
  sub->add_option("--concurrency", so.concurrency,
                  "--serve: also give the longest context at this many sequences");
  sub->add_flag("--enforce-eager", so.enforce_eager, "--serve: no CUDA graphs");
  auto* textures = add_plan_textures_subcommand(*sub, ctx);  // `vramkit plan textures ...`
  sub->callback([a, sub, textures, &ctx] {
    if (textures->parsed()) return;
    for (const char* flag : {"--mode",
                             "--batch",
                             "--micro-batch",
                             "--seq",
                             "--prompt",
                             "--new-tokens",
                             "--serving",
                             "--optimizer",
                             "--optimizer-in-backward",
                             "--checkpointing",
                             "--attention",
                             "--zero",
                             "--offload",
                             "--compress-activations",
                             "--allow-lossy",
                             "--lora-rank",
                             "--lora-targets",
                             "--lora-dropout",
                             "--image-size",
                             "--gpus",
                             "--gpus-per-node",
                             "--sp",
                             "--ep",
                             "--expert-load"})
      if (sub->get_option(flag)->count() > 0) a->given_not_for_serve.emplace_back(flag);
    for (const char* flag : {"--gpu-memory-utilization", "--max-model-len", "--max-num-seqs",
                             "--max-num-batched-tokens", "--concurrency", "--enforce-eager"})
      if (sub->get_option(flag)->count() > 0) a->given_serve_only.emplace_back(flag);
    run_plan(*a, ctx);
  });
}

}  // namespace vramkit::cli

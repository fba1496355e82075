// `vramkit plan MODEL [options]`: predicts peak device and host memory of a training step or a
// generate() call, or with --fit searches the configurations that fit a GPU. Parses, calls the
// vramkit::plan library and prints.
#include <cctype>
#include <cstdio>
#include <memory>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "vramkit/core/error.hpp"
#include "vramkit/core/units.hpp"
#include "vramkit/plan/config_loader.hpp"
#include "vramkit/plan/fit_search.hpp"
#include "vramkit/plan/gpu_catalogue.hpp"
#include "vramkit/plan/memory_model.hpp"

namespace vramkit::cli {

namespace {

struct plan_args {
  std::string model;
  std::string mode = "train", precision = "fp32", optimizer = "adamw", checkpointing = "none",
              attention = "sdpa", offload = "none", quant = "none", serving = "generate";
  std::int64_t batch = 1, micro_batch = 0, seq = 0, prompt = 0, new_tokens = 0, image_size = 224;
  int gpus = 1, gpus_per_node = 8, zero = 0, tp = 1, pp = 1;
  bool sp = false, json = false, fit = false, list = false;
  std::string probe, gpu;
};

void run_plan(const plan_args& a, command_context& ctx) {
  if (a.list) {
    std::string out = "presets:";
    for (const auto& n : plan::preset_names()) out += " " + n;
    out += "\nGPUs:";
    for (const auto& g : plan::gpu_catalogue())
      out += fmt::format("\n  {:<16} {:>10}  {}", g.name,
                         format_bytes(static_cast<double>(g.memory_bytes)), g.source);
    std::printf("%s\n", out.c_str());
    return;
  }
  if (a.model.empty())
    throw usage_error(
        "plan needs a MODEL: a preset name (vramkit plan --list) or a path to a config.json");
  const auto model = plan::resolve_model(a.model);
  plan::plan_request r;
  r.mode = plan::parse_mode(a.mode);
  r.prec = plan::parse_precision(a.precision);
  r.optimizer = plan::parse_optimizer(a.optimizer);
  r.ckpt = plan::parse_checkpointing(a.checkpointing);
  r.attention = plan::parse_attention(a.attention);
  r.offload = plan::parse_offload(a.offload);
  r.quant = plan::parse_quant(a.quant);
  r.serving = plan::parse_serving(a.serving);
  r.batch = a.batch;
  r.micro_batch = a.micro_batch;
  r.seq = a.seq;
  r.prompt = a.prompt;
  r.new_tokens = a.new_tokens;
  r.image_size = a.image_size;
  r.gpus = a.gpus;
  r.gpus_per_node = a.gpus_per_node;
  r.zero = a.zero;
  r.tp = a.tp;
  r.sp = a.sp;
  r.pp = a.pp;
  const auto overheads =
      a.probe.empty() ? plan::default_overheads() : plan::overheads_from_probe(a.probe);

  // --gpu NAME|BYTES: the catalogue's GPU, or a capacity.
  plan::fit_options opt;
  if (!a.gpu.empty()) {
    if (std::isdigit(static_cast<unsigned char>(a.gpu[0]))) {
      opt.capacity_bytes = parse_bytes(a.gpu);
      if (opt.capacity_bytes < 256 * MiB)
        throw usage_error(fmt::format("--gpu {} is below 256 MiB: not a GPU capacity", a.gpu));
    } else {
      opt.gpu = plan::find_gpu(a.gpu);
      opt.capacity_bytes = opt.gpu->memory_bytes;
    }
  }
  if (!a.fit) {
    // With --gpu the allocator is modelled under that capacity and the plan says whether it fits.
    r.device_capacity_bytes = opt.capacity_bytes;
    const auto p = plan::make_plan(model, r, overheads);
    std::printf("%s\n", a.json ? plan::to_json(p).c_str() : plan::to_table(p).c_str());
    if (!p.fits()) {
      std::fprintf(stderr,
                   "vramkit plan: does NOT fit in %s (%zu allocations fail even after the "
                   "allocator frees its cache)\n",
                   format_bytes(static_cast<double>(r.device_capacity_bytes)).c_str(),
                   p.out_of_memory);
      ctx.exit_code = 1;
    }
    return;
  }
  if (a.gpu.empty())
    throw usage_error("--fit needs --gpu NAME or --gpu BYTES (e.g. --gpu h100 or --gpu 24GiB)");
  const auto res = plan::fit_search(model, r, opt, overheads);
  if (a.json) {
    nlohmann::ordered_json j;
    j["schema_version"] = plan::plan_schema_version;
    j["model"] = model.name;
    j["capacity_bytes"] = opt.capacity_bytes;
    j["gpu"] = opt.gpu ? opt.gpu->name : "custom";
    j["planned"] = res.planned;
    auto arr = nlohmann::ordered_json::array();
    for (const auto& c : res.fits) {
      const auto& q = c.request;
      arr.push_back({{"micro_batch", q.micro_batch},
                     {"precision", plan::to_string(q.prec)},
                     {"checkpointing", plan::to_string(q.ckpt)},
                     {"zero", q.zero},
                     {"offload", plan::to_string(q.offload)},
                     {"tp", q.tp},
                     {"pp", q.pp},
                     {"device_peak_bytes", c.device_peak_bytes},
                     {"allocated_peak_bytes", c.allocated_peak_bytes},
                     {"host_peak_bytes", c.host_peak_bytes},
                     {"step_time_s", c.step_time_s},
                     {"reasons", c.reasons}});
    }
    j["fits"] = arr;
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::string out =
        fmt::format("vramkit plan --fit: {} on {} ({}), {} configurations planned\n", model.name,
                    opt.gpu ? opt.gpu->name : "a custom GPU",
                    format_bytes(static_cast<double>(opt.capacity_bytes)), res.planned);
    if (res.fits.empty())
      out +=
          "  nothing fits: try more GPUs (--gpus), a smaller --batch or --seq, or --quant for "
          "inference\n";
    int rank = 1;
    for (const auto& c : res.fits) {
      const auto& q = c.request;
      out += fmt::format(
          "\n  #{}  est. {:.3f} s/step  device {}  micro-batch {}  {}  ckpt {}  zero {}  offload "
          "{}  tp {}  pp {}\n",
          rank++, c.step_time_s, format_bytes(static_cast<double>(c.device_peak_bytes)),
          q.micro_batch, plan::to_string(q.prec), plan::to_string(q.ckpt), q.zero,
          plan::to_string(q.offload), q.tp, q.pp);
      for (const auto& why : c.reasons) out += "      - " + why + "\n";
    }
    std::printf("%s", out.c_str());
  }
  if (res.fits.empty()) ctx.exit_code = 1;
}

}  // namespace

void add_plan_command(CLI::App& app, command_context& ctx) {
  auto a = std::make_shared<plan_args>();
  auto* sub = app.add_subcommand(
      "plan", "Predict peak GPU and host memory of training or inference; --fit finds what fits");
  sub->add_option("model", a->model,
                  "preset name (see --list) or path to a Hugging Face config.json");
  sub->add_flag("--list", a->list, "list the presets and the GPU catalogue");
  sub->add_option("--mode", a->mode, "train or infer")->capture_default_str();
  sub->add_option("--batch", a->batch, "global batch (samples per optimizer step)")
      ->capture_default_str();
  sub->add_option("--micro-batch", a->micro_batch,
                  "samples per forward/backward per GPU (default: batch / data-parallel ranks)");
  sub->add_option("--seq", a->seq,
                  "tokens per sample for training (default 1024, capped at the model's positions)");
  sub->add_option("--prompt", a->prompt, "inference: prompt tokens (default 512)");
  sub->add_option("--new-tokens", a->new_tokens, "inference: generated tokens (default 128)");
  sub->add_option("--image-size", a->image_size, "CNN/ViT input side")->capture_default_str();
  sub->add_option("--precision", a->precision, "fp32, amp-bf16, amp-fp16, bf16 or fp8")
      ->capture_default_str();
  sub->add_option("--optimizer", a->optimizer, "sgd, sgd-momentum, adam, adamw or adamw-8bit")
      ->capture_default_str();
  sub->add_option("--checkpointing", a->checkpointing, "none, full or selective")
      ->capture_default_str();
  sub->add_option("--attention", a->attention, "sdpa, flash or eager")->capture_default_str();
  sub->add_option("--gpus", a->gpus, "GPUs in total")->capture_default_str();
  sub->add_option("--gpus-per-node", a->gpus_per_node, "GPUs per node (host memory is per node)")
      ->capture_default_str();
  sub->add_option("--zero", a->zero, "ZeRO stage 0, 1, 2 or 3 (3 = FSDP full shard)")
      ->capture_default_str();
  sub->add_option("--tp", a->tp, "tensor-parallel degree")->capture_default_str();
  sub->add_flag("--sp", a->sp, "sequence parallel with --tp");
  sub->add_option("--pp", a->pp, "pipeline-parallel degree")->capture_default_str();
  sub->add_option("--offload", a->offload,
                  "none, optimizer or params (CPU offload, pinned host memory)")
      ->capture_default_str();
  sub->add_option("--quant", a->quant, "inference weights: none, int8 or int4")
      ->capture_default_str();
  sub->add_option("--serving", a->serving,
                  "inference engine: generate (transformers) or paged (paged KV cache)")
      ->capture_default_str();
  sub->add_option("--probe", a->probe,
                  "vramkit probe --json file with measured context and PCIe figures");
  sub->add_option("--gpu", a->gpu,
                  "GPU name from the catalogue or a capacity (e.g. 24GiB): models the allocator "
                  "under that memory and says "
                  "whether the run fits (exit 1 when not); with --fit, the GPU to search for");
  sub->add_flag("--fit", a->fit,
                "search the configurations that fit --gpu and rank them by estimated step time");
  sub->add_flag("--json", a->json, "print one JSON object");
  auto* textures = add_plan_textures_subcommand(*sub, ctx);  // `vramkit plan textures ...`
  sub->callback([a, textures, &ctx] {
    if (!textures->parsed()) run_plan(*a, ctx);
  });
}

}  // namespace vramkit::cli

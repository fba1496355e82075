// Prints the plan of every request of the ground-truth files (and of a set of extra requests
// covering the parallel, offload, quantised, paged and fit paths) as one JSON object per line,
// so that two builds can be compared figure for figure: a refactor of the walker must leave
// every line unchanged (diff the outputs of the two builds).
// Usage: plan_dump [DATA_DIR]   (default: tests/data/plan of the source tree)
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "vramkit/core/error.hpp"
#include "vramkit/plan/config_loader.hpp"
#include "vramkit/plan/fit_search.hpp"
#include "vramkit/plan/gpu_catalogue.hpp"
#include "vramkit/plan/ground_truth.hpp"
#include "vramkit/plan/memory_model.hpp"

using namespace vramkit::plan;

namespace {

struct extra {
  const char* model;
  void (*set)(plan_request&);
};

// Every path of the walker the ground truth leaves out.
const extra k_extra[] = {
    {"llama-2-7b",
     [](plan_request& r) {
       r.batch = 8, r.seq = 2048, r.prec = precision::bf16, r.gpus = 8, r.tp = 8, r.sp = true;
     }},
    {"llama-2-7b",
     [](plan_request& r) {
       r.batch = 16, r.seq = 2048, r.prec = precision::amp_bf16, r.gpus = 8, r.tp = 2, r.pp = 2;
       r.zero = 1;
     }},
    {"llama-2-7b",
     [](plan_request& r) {
       r.batch = 16, r.seq = 1024, r.prec = precision::amp_bf16, r.gpus = 4, r.zero = 3;
     }},
    {"llama-2-7b",
     [](plan_request& r) {
       r.batch = 4, r.seq = 1024, r.prec = precision::bf16, r.gpus = 2;
       r.offload = offload_kind::optimizer;
     }},
    {"llama-2-7b",
     [](plan_request& r) {
       r.batch = 4, r.seq = 1024, r.prec = precision::bf16, r.gpus = 2, r.zero = 3;
       r.offload = offload_kind::params;
     }},
    {"gpt2",
     [](plan_request& r) {
       r.batch = 8, r.prec = precision::amp_fp16, r.ckpt = checkpointing::full;
       r.attention = attention_kind::eager;
     }},
    {"gpt2",
     [](plan_request& r) {
       r.batch = 8, r.prec = precision::fp8, r.optimizer = optimizer_kind::adamw_8bit;
     }},
    {"gpt2",
     [](plan_request& r) {
       r.batch = 32, r.micro_batch = 8, r.seq = 512, r.prec = precision::amp_bf16, r.gpus = 2;
       r.pp = 2;
     }},
    {"pythia-410m",
     [](plan_request& r) { r.batch = 4, r.prec = precision::bf16, r.ckpt = checkpointing::full; }},
    {"llama-3-8b",
     [](plan_request& r) {
       r.mode = run_mode::infer, r.batch = 4, r.prompt = 1024, r.new_tokens = 256;
       r.quant = quant_kind::int4, r.prec = precision::bf16;
     }},
    {"llama-3-8b",
     [](plan_request& r) {
       r.mode = run_mode::infer, r.batch = 4, r.prompt = 1024, r.new_tokens = 256;
       r.quant = quant_kind::int8, r.serving = serving_kind::paged, r.prec = precision::bf16;
     }},
    {"llama-3-8b",
     [](plan_request& r) {
       r.mode = run_mode::infer, r.batch = 2, r.gpus = 2, r.tp = 2, r.prec = precision::bf16;
     }},
    {"gpt2", [](plan_request& r) { r.mode = run_mode::infer, r.batch = 4; }},
    {"resnet-50", [](plan_request& r) { r.mode = run_mode::infer, r.batch = 32; }},
    {"vit-b-16", [](plan_request& r) { r.batch = 16, r.optimizer = optimizer_kind::sgd; }},
};

void dump_plan(const std::string& name, const model_description& m, const plan_request& r) {
  nlohmann::ordered_json j;
  j["case"] = name;
  try {
    j["plan"] = nlohmann::json::parse(to_json(make_plan(m, r)));
  } catch (const vramkit::error& e) {
    j["error"] = e.what();
  }
  std::printf("%s\n", j.dump().c_str());
}

void dump_fit(const std::string& name, const model_description& m, const plan_request& r,
              const char* gpu) {
  fit_options opt;
  opt.gpu = find_gpu(gpu);
  opt.capacity_bytes = opt.gpu->memory_bytes;
  opt.threads = 1;
  nlohmann::ordered_json j;
  j["case"] = name;
  const auto res = fit_search(m, r, opt);
  j["planned"] = res.planned;
  for (const auto& c : res.fits)
    j["fits"].push_back({c.request.micro_batch, to_string(c.request.prec),
                         to_string(c.request.ckpt), c.request.zero, to_string(c.request.offload),
                         c.request.tp, c.request.pp, c.device_peak_bytes, c.allocated_peak_bytes,
                         c.host_peak_bytes, c.step_time_s, c.reasons});
  std::printf("%s\n", j.dump().c_str());
}

}  // namespace

int main(int argc, char** argv) {
  const std::string dir = argc > 1 ? argv[1] : std::string(VRAMKIT_SOURCE_DIR) + "/tests/data/plan";
  try {
    std::vector<std::string> files;
    for (const auto& e : std::filesystem::directory_iterator(dir)) {
      const auto f = e.path().filename().string();
      if (f.rfind("ground_truth", 0) == 0 && e.path().extension() == ".json") files.push_back(f);
    }
    std::sort(files.begin(), files.end());
    for (const auto& f : files)
      for (const auto& c : load_ground_truth(dir + "/" + f).cases)
        if (c.error.empty()) dump_plan(f + ":" + c.name, c.model, c.request);
    int i = 0;
    for (const auto& e : k_extra) {
      plan_request r;
      e.set(r);
      dump_plan("extra " + std::to_string(i++) + " " + e.model, preset_model(e.model), r);
    }
    plan_request r;
    r.batch = 16;
    dump_fit("fit gpt2 b16 rtx4090", preset_model("gpt2"), r, "rtx4090");
    r.batch = 8, r.seq = 2048, r.gpus = 8;
    dump_fit("fit llama-2-7b b8 s2048 8 GPUs h100", preset_model("llama-2-7b"), r, "h100");
  } catch (const vramkit::error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}

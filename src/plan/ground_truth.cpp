// Reads ground-truth files into plan requests (one parser for the test and the report).
#include "vramkit/plan/ground_truth.hpp"

#include <fstream>

#include <nlohmann/json.hpp>

#include "vramkit/core/error.hpp"
#include "vramkit/plan/config_loader.hpp"

namespace vramkit::plan {

namespace {

using json = nlohmann::json;

bool has(const json& c, const char* key) { return c.contains(key) && !c.at(key).is_null(); }

std::string text(const json& c, const char* key) { return c.at(key).get<std::string>(); }

plan_request request_of(const json& c) {
  plan_request r;
  r.mode = parse_mode(text(c, "mode"));
  r.batch = c.at("batch").get<std::int64_t>();
  if (has(c, "seq")) r.seq = c.at("seq").get<std::int64_t>();
  if (has(c, "image_size")) r.image_size = c.at("image_size").get<std::int64_t>();
  if (has(c, "prompt")) r.prompt = c.at("prompt").get<std::int64_t>();
  if (has(c, "new_tokens")) r.new_tokens = c.at("new_tokens").get<std::int64_t>();
  r.prec = parse_precision(text(c, "precision"));
  if (has(c, "optimizer")) r.optimizer = parse_optimizer(text(c, "optimizer"));
  r.ckpt = parse_checkpointing(text(c, "checkpointing"));
  r.attention = parse_attention(text(c, "attention"));
  if (has(c, "quant")) r.quant = parse_quant(text(c, "quant"));
  if (has(c, "steps")) r.steps = c.at("steps").get<int>();
  // Multi-GPU cases (measure_ddp.py): all GPUs, the ZeRO stage; `batch` is the global batch.
  if (has(c, "gpus")) r.gpus = c.at("gpus").get<int>();
  if (has(c, "zero")) r.zero = c.at("zero").get<int>();
  // Parallel cases (measure_parallel.py): tensor, sequence, pipeline and expert parallelism.
  if (has(c, "tp")) r.tp = c.at("tp").get<int>();
  if (has(c, "sp")) r.sp = c.at("sp").get<bool>();
  if (has(c, "pp")) r.pp = c.at("pp").get<int>();
  if (has(c, "ep")) r.ep = c.at("ep").get<int>();
  // Fine-tuning and serving cases: LoRA / QLoRA, optimizer in backward, paged KV.
  if (has(c, "lora_rank")) r.lora_rank = c.at("lora_rank").get<int>();
  if (has(c, "lora_targets")) r.lora_targets = parse_lora_targets(text(c, "lora_targets"));
  if (has(c, "lora_dropout")) r.lora_dropout = c.at("lora_dropout").get<double>();
  if (has(c, "optimizer_in_backward"))
    r.optimizer_in_backward = c.at("optimizer_in_backward").get<bool>();
  if (has(c, "serving")) r.serving = parse_serving(text(c, "serving"));
  if (has(c, "kv_cache_dtype")) r.kv_cache = parse_kv_cache(text(c, "kv_cache_dtype"));
  // The routing the run took (measure_ground_truth.py --record-routing), replayed.
  if (has(c, "expert_load"))
    r.expert_load = parse_expert_load(c.at("expert_load").dump(), "expert_load");
  return r;
}

}  // namespace

ground_truth load_ground_truth(const std::string& path, const std::string& config_dir) {
  std::ifstream in(path);
  if (!in) throw invalid_input(path + ": cannot be read");
  json doc;
  try {
    doc = json::parse(in);
  } catch (const json::exception& e) {
    throw invalid_input(path + ": not valid JSON (" + e.what() + ")");
  }
  const std::string dir =
      !config_dir.empty() ? config_dir + "/" : path.substr(0, path.find_last_of('/') + 1);
  ground_truth g;
  g.gpu = doc.value("gpu", "?");
  g.driver = doc.value("driver", "?");
  g.torch = doc.value("torch", "?");
  g.transformers = doc.value("transformers", "?");
  g.date = doc.value("date", "?");
  if (!doc.contains("cases") || !doc.at("cases").is_array())
    throw invalid_input(path + ": no \"cases\" array");
  for (const auto& c : doc.at("cases")) {
    ground_truth_case k;
    try {
      k.name = text(c, "name");
      if (has(c, "error")) {
        k.error = text(c, "error");
        g.cases.push_back(std::move(k));
        continue;
      }
      k.model = has(c, "config") ? load_model_config(dir + text(c, "config"))
                                 : preset_model(text(c, "model"));
      k.request = request_of(c);
      if (has(c, "params")) k.params = c.at("params").get<std::uint64_t>();
      k.max_allocated_bytes = c.at("max_allocated_bytes").get<double>();
      k.max_reserved_bytes = c.at("max_reserved_bytes").get<double>();
      if (has(c, "nvidia_smi_used_bytes"))
        k.nvidia_smi_used_bytes = c.at("nvidia_smi_used_bytes").get<double>();
    } catch (const json::exception& e) {
      throw invalid_input(path + ": case '" + (k.name.empty() ? "?" : k.name) + "': " + e.what());
    } catch (const invalid_input& e) {
      throw invalid_input(path + ": case '" + (k.name.empty() ? "?" : k.name) + "': " + e.what());
    }
    g.cases.push_back(std::move(k));
  }
  return g;
}

std::map<std::string, std::string> load_known_outside(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw invalid_input(path + ": cannot be read");
  std::map<std::string, std::string> out;
  try {
    const json doc = json::parse(in);
    if (!doc.contains("cases") || !doc.at("cases").is_object())
      throw invalid_input(path + ": no \"cases\" object of case names and reasons");
    for (const auto& [name, why] : doc.at("cases").items()) out[name] = why.get<std::string>();
  } catch (const json::exception& e) {
    throw invalid_input(path + ": not a list of known-outside cases (" + e.what() + ")");
  }
  return out;
}

}  // namespace vramkit::plan

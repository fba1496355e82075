// Prints predicted vs measured peaks for every case of tests/data/plan/ground_truth.json as a
// markdown table (the table in docs/plan.md is made with it).
// Usage: plan_accuracy_report [ground_truth.json [DATA_DIR]]   (DATA_DIR holds configs/, default:
// the directory of the JSON file). Exit 1 when a case is outside the accuracy tolerances.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "vramkit/plan/config_loader.hpp"
#include "vramkit/plan/memory_model.hpp"

using namespace vramkit::plan;

int main(int argc, char** argv) {
  const std::string path = argc > 1 ? argv[1] : std::string(VRAMKIT_SOURCE_DIR) + "/tests/data/plan/ground_truth.json";
  std::ifstream in(path);
  if (!in) {
    std::fprintf(stderr, "cannot read %s\n", path.c_str());
    return 1;
  }
  const auto doc = nlohmann::json::parse(in);
  const std::string dir = argc > 2 ? std::string(argv[2]) + "/" : path.substr(0, path.find_last_of('/') + 1);
  bool outside = false;
  std::printf("Measured on %s, driver %s, torch %s, transformers %s (%s).\n\n", doc.value("gpu", "?").c_str(),
              doc.value("driver", "?").c_str(), doc.value("torch", "?").c_str(), doc.value("transformers", "?").c_str(),
              doc.value("date", "?").c_str());
  std::printf("| case | allocated GiB (measured / predicted / error) | reserved GiB | nvidia-smi GiB | peak phase |\n");
  std::printf("| --- | --- | --- | --- | --- |\n");
  std::vector<double> errs;
  auto gib = [](double b) { return b / (1024.0 * 1024 * 1024); };
  for (const auto& c : doc.at("cases")) {
    const std::string name = c.at("name");
    if (!c.at("error").is_null()) {
      std::printf("| %s | skipped: %s | | | |\n", name.c_str(), c.at("error").get<std::string>().c_str());
      continue;
    }
    model_description m = c.at("config").is_null() ? preset_model(c.at("model").get<std::string>())
                                                   : load_model_config(dir + c.at("config").get<std::string>());
    plan_request r;
    r.mode = parse_mode(c.at("mode").get<std::string>());
    r.batch = c.at("batch");
    if (!c.at("seq").is_null()) r.seq = c.at("seq");
    if (!c.at("image_size").is_null()) r.image_size = c.at("image_size");
    if (!c.at("prompt").is_null()) r.prompt = c.at("prompt");
    if (!c.at("new_tokens").is_null()) r.new_tokens = c.at("new_tokens");
    r.prec = parse_precision(c.at("precision").get<std::string>());
    if (!c.at("optimizer").is_null()) r.optimizer = parse_optimizer(c.at("optimizer").get<std::string>());
    r.ckpt = parse_checkpointing(c.at("checkpointing").get<std::string>());
    r.attention = parse_attention(c.at("attention").get<std::string>());
    if (!c.at("steps").is_null()) r.steps = c.at("steps");
    device_overheads o = default_overheads();
    const auto p = make_plan(m, r, o);
    const double ma = c.at("max_allocated_bytes").get<double>();
    const double mr = c.at("max_reserved_bytes").get<double>();
    const double ea = (static_cast<double>(p.allocated_peak_bytes) - ma) / ma * 100;
    const double er = (static_cast<double>(p.reserved_peak_bytes) - mr) / mr * 100;
    errs.push_back(std::fabs(ea));
    if (std::fabs(ea) > 10 || std::fabs(er) > 15) outside = true;
    std::string smi = "n/a";
    if (!c.at("nvidia_smi_used_bytes").is_null()) {
      const double ms = c.at("nvidia_smi_used_bytes").get<double>();
      char buf[128];
      std::snprintf(buf, sizeof buf, "%.2f / %.2f / %+.1f%%", gib(ms), gib(static_cast<double>(p.device_peak_bytes)),
                    (static_cast<double>(p.device_peak_bytes) - ms) / ms * 100);
      smi = buf;
    }
    std::printf("| %s | %.2f / %.2f / %+.1f%% | %.2f / %.2f / %+.1f%% | %s | %s |\n", name.c_str(), gib(ma),
                gib(static_cast<double>(p.allocated_peak_bytes)), ea, gib(mr), gib(static_cast<double>(p.reserved_peak_bytes)),
                er, smi.c_str(), p.peak_phase.c_str());
  }
  if (!errs.empty()) {
    std::sort(errs.begin(), errs.end());
    std::printf("\nmedian |allocated error| %.1f%%, max %.1f%% over %zu cases\n", errs[errs.size() / 2], errs.back(), errs.size());
    if (errs[errs.size() / 2] > 5) outside = true;
  }
  std::printf("%s\n", outside ? "OUTSIDE the tolerances (allocated +-10%, median 5%; reserved +-15%)"
                               : "within the tolerances (allocated +-10%, median 5%; reserved +-15%)");
  return outside ? 1 : 0;
}

// to_json / to_table of a fit search: the ranked configurations with their figures and reasons.
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "vramkit/core/units.hpp"
#include "vramkit/plan/fit_search.hpp"

namespace vramkit::plan {

std::string to_json(const fit_result& res) {
  nlohmann::ordered_json j;
  j["schema_version"] = plan_schema_version;
  j["model"] = res.model;
  j["capacity_bytes"] = res.capacity_bytes;
  j["gpu"] = res.gpu.empty() ? "custom" : res.gpu;
  j["planned"] = res.planned;
  auto arr = nlohmann::ordered_json::array();
  for (const auto& c : res.fits) {
    const auto& q = c.request;
    arr.push_back({{"batch", q.batch},
                   {"micro_batch", q.micro_batch},
                   {"quant", to_string(q.quant)},
                   {"optimizer", to_string(q.optimizer)},
                   {"optimizer_in_backward", q.optimizer_in_backward},
                   {"lora_rank", q.lora_rank},
                   {"precision", to_string(q.prec)},
                   {"checkpointing", to_string(q.ckpt)},
                   {"zero", q.zero},
                   {"offload", to_string(q.offload)},
                   {"tp", q.tp},
                   {"pp", q.pp},
                   {"device_peak_bytes", c.device_peak_bytes},
                   {"allocated_peak_bytes", c.allocated_peak_bytes},
                   {"host_peak_bytes", c.host_peak_bytes},
                   {"step_time_s", c.step_time_s},
                   {"reasons", c.reasons}});
    if (!c.activation_mix.empty()) {
      arr.back()["activation_mix"] = c.activation_mix;
      arr.back()["compress_activations"] = c.compress_activations;
      arr.back()["optimizer_offload"] = c.optimizer_offload;
      arr.back()["max_inflight_bytes"] = c.offload_max_inflight_bytes;
      arr.back()["prefetch_blocks"] = c.offload_prefetch_blocks;
    }
  }
  j["fits"] = arr;
  return j.dump(2);
}

std::string to_table(const fit_result& res) {
  std::string out = fmt::format("vramkit plan --fit: {} on {} ({}), {} configurations planned\n",
                                res.model, res.gpu.empty() ? "a custom GPU" : res.gpu,
                                format_bytes(static_cast<double>(res.capacity_bytes)), res.planned);
  if (res.fits.empty())
    out +=
        "  nothing fits: try more GPUs (--gpus), a smaller --batch or --seq, or --quant for "
        "inference\n";
  int rank = 1;
  for (const auto& c : res.fits) {
    const auto& q = c.request;
    if (q.mode == run_mode::train)
      out += fmt::format(
          "\n  #{}  est. {:.3f} s/step  device {}  {}  micro-batch {}  {}  {}{}  ckpt {}  zero {}  "
          "offload {}  tp {}  pp {}\n",
          rank, c.step_time_s, format_bytes(static_cast<double>(c.device_peak_bytes)),
          q.lora_rank == 0             ? std::string("full")
          : q.quant == quant_kind::nf4 ? fmt::format("QLoRA r{}", q.lora_rank)
                                       : fmt::format("LoRA r{}", q.lora_rank),
          q.micro_batch, to_string(q.prec), to_string(q.optimizer),
          q.optimizer_in_backward ? " (in backward)" : "", to_string(q.ckpt), q.zero,
          to_string(q.offload), q.tp, q.pp);
    else
      out += fmt::format(
          "\n  #{}  est. {:.3f} s/call  device {}  batch {}  {}  quant {}  tp {}  pp {}\n", rank,
          c.step_time_s, format_bytes(static_cast<double>(c.device_peak_bytes)), q.batch,
          to_string(q.prec), to_string(q.quant), q.tp, q.pp);
    ++rank;
    if (!c.activation_mix.empty()) out += "      (vramkit activation offload, see the reasons)\n";
    for (const auto& why : c.reasons) out += "      - " + why + "\n";
  }
  return out;
}

}  // namespace vramkit::plan

// make_plan: replays the schedule through per-component live counters and the caching-allocator
// model, then adds the context and host-side offload buffers.
#include "vramkit/plan/memory_model.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "vramkit/core/units.hpp"
#include "vramkit/plan/caching_allocator_model.hpp"

namespace vramkit::plan {

const char* to_string(memory_where w) noexcept {
  switch (w) {
    case memory_where::device:
      return "device";
    case memory_where::host:
      return "host";
    case memory_where::managed:
      return "managed";
  }
  return "?";
}

namespace {

/// Host memory per node for offloaded optimizer states and parameters (pinned), following
/// ZeRO-Offload: fp32 master weights, fp32 gradients and the optimizer states of each rank's
/// shard live in host memory.
std::uint64_t host_offload_bytes(const model_description& m, const plan_request& r,
                                 std::uint64_t params) {
  if (r.offload == offload_kind::none || r.mode != run_mode::train) return 0;
  const double per_rank = static_cast<double>(params) / (r.tp * r.pp) / r.data_parallel();
  // The host copy keeps the dtypes the device would: fp32 master weights, gradients and states
  // for fp32 and autocast runs, 16-bit ones for pure bf16; 8-bit Adam's two 1-byte states.
  const double w = r.prec == precision::bf16 ? 2 : 4;
  double bytes_per_param = w /* master weights */ + w /* gradients */;
  switch (r.optimizer) {
    case optimizer_kind::adam:
    case optimizer_kind::adamw:
      bytes_per_param += 2 * w;
      break;
    case optimizer_kind::adamw_8bit:
      bytes_per_param += 2;
      break;
    case optimizer_kind::sgd_momentum:
      bytes_per_param += w;
      break;
    case optimizer_kind::sgd:
      break;
  }
  // The 16-bit copy the device gathers from (the master itself when that is 16-bit already).
  if (r.offload == offload_kind::params && w == 4 && r.prec != precision::fp32)
    bytes_per_param += 2;
  const int ranks_on_node = std::min(r.gpus, r.gpus_per_node);
  (void)m;
  return static_cast<std::uint64_t>(per_rank * bytes_per_param * ranks_on_node);
}

}  // namespace

namespace {

/// Replays the schedule through the caching-allocator model while the walker builds it, keeping
/// the per-component live bytes at the allocated peak, and lets the walker skip units that
/// return the allocator to the state they started from (schedule_observer).
class replay final : public schedule_observer {
 public:
  replay(caching_allocator_model& a, bool stop_on_oom) : alloc(a), stop_on_oom_(stop_on_oom) {
    alloc.clear();
  }
  bool stop(const schedule& s) override {
    if (!stop_on_oom_) return false;
    run_to_end(s);
    return alloc.out_of_memory_count() > 0;
  }

  void run_to_end(const schedule& s) {
    handle_.resize(s.tensors.size(), 0);
    // The events carry size and component: the loop reads them alone, in order.
    const tensor_event* ev = s.events.data();
    const std::size_t end = s.events.size();
    for (; next_ < end; ++next_) {
      const auto& e = ev[next_];
      const auto c = static_cast<std::size_t>(e.comp);
      const std::uint64_t rounded = e.bytes == 0 ? 0 : caching_allocator_model::round_size(e.bytes);
      if (e.alloc && next_ + 1 < end && !ev[next_ + 1].alloc && ev[next_ + 1].tensor == e.tensor) {
        // Freed right away: only the peak can change.
        const std::uint64_t now = alloc.allocated_bytes() + alloc.transient(e.bytes);
        if (now > best_) {
          best_ = now;
          at_peak = live_;
          at_peak[c] += rounded;
          peak_event = next_;
        }
        ++next_;
      } else if (e.alloc) {
        handle_[e.tensor] = alloc.malloc(e.bytes);
        live_[c] += rounded;
        if (alloc.allocated_bytes() > best_) {
          best_ = alloc.allocated_bytes();
          at_peak = live_;
          peak_event = next_;
        }
      } else {
        alloc.free(handle_[e.tensor]);
        live_[c] -= rounded;
      }
    }
  }
  bool repeat_point(const schedule& s, int level, bool comparable) override {
    run_to_end(s);
    auto now = alloc.state();
    auto& prev = state_[level != 0 ? 1 : 0];
    const bool same = comparable && now == prev;
    prev = std::move(now);
    return same;
  }

  caching_allocator_model& alloc;
  std::array<std::uint64_t, component_count> at_peak{};
  std::size_t peak_event = 0;

 private:
  std::vector<std::uint32_t> handle_;
  std::array<std::uint64_t, component_count> live_{};
  std::uint64_t best_ = 0;
  std::size_t next_ = 0;
  std::vector<std::uint64_t> state_[2];
  bool stop_on_oom_ = false;
};

}  // namespace

plan_result make_plan(const model_description& m, plan_request r, const device_overheads& o) {
  return make_plan(m, r, o, plan_scope::whole);
}

plan_result make_plan(const model_description& m, plan_request r, const device_overheads& o,
                      plan_scope scope) {
  r.validate(m);
  plan_result p;
  p.model = m;
  p.request = r;
  p.parameters = parameter_count(m);
  p.overheads = o;
  const std::uint64_t collective = r.gpus > 1 ? o.collective_bytes : 0;
  p.context_bytes = o.context_bytes +
                    (r.mode == run_mode::train ? o.train_modules_bytes : o.infer_modules_bytes) +
                    collective;
  // One schedule and one allocator model per thread, reused: a plan records tens of thousands of
  // events.
  thread_local schedule s;
  thread_local caching_allocator_model model;
  replay rp(model, scope == plan_scope::until_out_of_memory);
  if (r.device_capacity_bytes != 0) {
    // What the caching allocator can get: the GPU's memory less the context (at least a byte,
    // so that a GPU smaller than the context makes every allocation fail).
    model.set_capacity(
        r.device_capacity_bytes > p.context_bytes ? r.device_capacity_bytes - p.context_bytes : 1);
  }
  build_schedule(m, r, s, &rp);
  rp.run_to_end(s);
  p.events = s.events.size();
  const auto& alloc = rp.alloc;
  const auto& at_peak = rp.at_peak;
  const std::size_t peak_event = rp.peak_event;
  p.allocated_peak_bytes = alloc.peak_allocated_bytes();
  p.reserved_peak_bytes = alloc.peak_reserved_bytes();
  p.cache_flushes = alloc.cache_flushes();
  p.out_of_memory = alloc.out_of_memory_count();
  p.trainable_parameters = s.trainable_parameters;
  p.managed_bytes = s.managed_bytes;
  p.managed_resident_bytes = p.managed_bytes;
  if (r.device_capacity_bytes != 0) {
    const std::uint64_t used = p.reserved_peak_bytes + p.context_bytes;
    const std::uint64_t room = r.device_capacity_bytes > used ? r.device_capacity_bytes - used : 0;
    p.managed_resident_bytes = std::min(p.managed_bytes, room);
  }
  p.device_peak_bytes = p.reserved_peak_bytes + p.context_bytes + p.managed_resident_bytes;
  if (!s.events.empty()) {
    const auto& t = s.tensors[s.events[peak_event].tensor];
    p.peak_phase = to_string(t.ph);
    p.peak_step = t.step;
    p.peak_layer = t.layer;
    p.peak_tensor = t.label;
  }
  std::uint64_t sum = 0;
  for (int c = 0; c < component_count; ++c) {
    if (at_peak[c] == 0) continue;
    p.components.push_back(
        {to_string(static_cast<component>(c)), at_peak[c], memory_where::device});
    sum += at_peak[c];
  }
  if (p.allocated_peak_bytes > sum)
    p.components.push_back(
        {"allocator block rounding", p.allocated_peak_bytes - sum, memory_where::device});
  p.components.push_back({"allocator cache (reserved, not allocated)",
                          p.reserved_peak_bytes - p.allocated_peak_bytes, memory_where::device});
  p.components.push_back(
      {"CUDA context and loaded kernels", p.context_bytes - collective, memory_where::device});
  if (collective != 0)
    p.components.push_back({"NCCL communicator buffers", collective, memory_where::device});
  if (p.managed_bytes > 0) {
    p.components.push_back({"paged optimizer states (CUDA managed memory, resident part)",
                            p.managed_resident_bytes, memory_where::managed});
    if (p.managed_bytes > p.managed_resident_bytes)
      p.components.push_back({"paged optimizer states paged out to host memory",
                              p.managed_bytes - p.managed_resident_bytes, memory_where::host});
  }
  p.host_peak_bytes = host_offload_bytes(m, r, p.parameters);
  if (p.host_peak_bytes > 0)
    p.components.push_back(
        {"offloaded optimizer states, fp32 master and gradients (pinned, per node)",
         p.host_peak_bytes, memory_where::host});
  p.host_peak_bytes += p.managed_bytes - p.managed_resident_bytes;
  return p;
}

std::string to_json(const plan_result& p) {
  nlohmann::ordered_json j;
  const auto& r = p.request;
  j["schema_version"] = plan_schema_version;
  j["model"] = p.model.name;
  j["model_source"] = p.model.source;
  j["family"] = to_string(p.model.family);
  j["parameters"] = p.parameters;
  j["trainable_parameters"] = p.trainable_parameters;
  j["allocated_peak_bytes"] = p.allocated_peak_bytes;
  j["reserved_peak_bytes"] = p.reserved_peak_bytes;
  j["device_peak_bytes"] = p.device_peak_bytes;
  j["host_peak_bytes"] = p.host_peak_bytes;
  j["managed_bytes"] = p.managed_bytes;
  j["managed_resident_bytes"] = p.managed_resident_bytes;
  j["peak_phase"] = p.peak_phase;
  j["peak_step"] = p.peak_step;
  j["peak_layer"] = p.peak_layer;
  j["peak_tensor"] = p.peak_tensor;
  if (r.device_capacity_bytes != 0) {
    j["device_capacity_bytes"] = r.device_capacity_bytes;
    j["fits"] = p.fits();
    j["cache_flushes"] = p.cache_flushes;
    j["out_of_memory_allocations"] = p.out_of_memory;
  }
  auto comps = nlohmann::ordered_json::array();
  for (const auto& c : p.components)
    comps.push_back({{"name", c.name}, {"bytes", c.bytes}, {"where", to_string(c.where)}});
  j["components"] = comps;
  const nlohmann::ordered_json in = {
      {"mode", to_string(r.mode)},
      {"batch", r.batch},
      {"micro_batch", r.micro_batch},
      {"seq", r.seq},
      {"image_size", r.image_size},
      {"prompt", r.prompt},
      {"new_tokens", r.new_tokens},
      {"precision", to_string(r.prec)},
      {"optimizer", to_string(r.optimizer)},
      {"checkpointing", to_string(r.ckpt)},
      {"attention", to_string(r.attention)},
      {"gpus", r.gpus},
      {"zero", r.zero},
      {"tp", r.tp},
      {"sp", r.sp},
      {"pp", r.pp},
      {"offload", to_string(r.offload)},
      {"quant", to_string(r.quant)},
      {"serving", to_string(r.serving)},
      {"kv_cache_dtype", to_string(r.kv_cache)},
      {"lora_rank", r.lora_rank},
      {"lora_targets", r.lora_rank > 0 ? lora_targets_string(r.lora_targets) : ""},
      {"lora_dropout", r.lora_dropout},
      {"optimizer_in_backward", r.optimizer_in_backward},
      {"steps", r.steps},
      {"context_bytes", p.context_bytes},
      {"overheads_source", p.overheads.source},
  };
  j["inputs"] = in;
  return j.dump(2);
}

std::string to_table(const plan_result& p) {
  const auto& r = p.request;
  std::string out;
  out += fmt::format("vramkit plan: {} ({}, {:.1f}M parameters)\n", p.model.name,
                     to_string(p.model.family), static_cast<double>(p.parameters) / 1e6);
  if (r.mode == run_mode::train) {
    out += fmt::format(
        "  train: batch {} (micro-batch {}), {}, {}, {}{}, checkpointing {}, attention {}", r.batch,
        r.micro_batch,
        p.model.is_vision() ? fmt::format("image {}", r.image_size) : fmt::format("seq {}", r.seq),
        to_string(r.prec), to_string(r.optimizer), r.optimizer_in_backward ? " (in backward)" : "",
        to_string(r.ckpt), to_string(r.attention));
    if (r.lora_rank > 0)
      out += fmt::format("\n  {}: rank {} on {}, {} trainable parameters ({:.2f}%), base frozen{}",
                         r.quant == quant_kind::nf4 ? "QLoRA" : "LoRA", r.lora_rank,
                         lora_targets_string(r.lora_targets), p.trainable_parameters,
                         100.0 * static_cast<double>(p.trainable_parameters) /
                             static_cast<double>(std::max<std::uint64_t>(1, p.parameters)),
                         r.quant == quant_kind::nf4 ? " in NF4" : "");
  } else {
    out += fmt::format(
        "  infer: batch {}, prompt {} + {} new tokens, weights {}{}, {}", r.batch, r.prompt,
        r.new_tokens, r.prec == precision::fp32 ? "fp32" : "16-bit",
        r.quant == quant_kind::none ? "" : std::string(" quantised ") + to_string(r.quant),
        r.serving == serving_kind::paged ? "paged KV cache" : "generate()");
  }
  out += fmt::format("\n  gpus {} (data {} x tensor {} x pipeline {}), zero {}, offload {}\n",
                     r.gpus, r.data_parallel(), r.tp, r.pp, r.zero, to_string(r.offload));
  if (r.gpus > 1)
    out += fmt::format("  device figures are per GPU (the most loaded of the {}), host per node\n",
                       r.gpus);
  out += "\n";
  out += fmt::format(
      "  {:<58} {:>12}  {}\n",
      "at the peak (" + p.peak_phase +
          (r.mode == run_mode::train ? fmt::format(", step {}", p.peak_step + 1) : std::string()) +
          (p.peak_layer >= 0 ? fmt::format(", layer {}", p.peak_layer) : std::string()) + ")",
      "bytes", "where");
  for (const auto& c : p.components)
    out += fmt::format("  {:<58} {:>12}  {}\n", c.name, format_bytes(static_cast<double>(c.bytes)),
                       to_string(c.where));
  out += "\n";
  out += fmt::format("  {:<58} {:>12}\n", "allocated peak (torch.cuda.max_memory_allocated)",
                     format_bytes(static_cast<double>(p.allocated_peak_bytes)));
  out += fmt::format("  {:<58} {:>12}\n", "reserved peak (torch.cuda.max_memory_reserved)",
                     format_bytes(static_cast<double>(p.reserved_peak_bytes)));
  out += fmt::format("  {:<58} {:>12}\n", "device peak (nvidia-smi used)",
                     format_bytes(static_cast<double>(p.device_peak_bytes)));
  out += fmt::format("  {:<58} {:>12}\n", "host peak per node (pinned)",
                     format_bytes(static_cast<double>(p.host_peak_bytes)));
  if (p.managed_bytes > 0)
    out += fmt::format("  {:<58} {:>12}\n", "managed memory (paged optimizer states)",
                       format_bytes(static_cast<double>(p.managed_bytes)));
  if (r.device_capacity_bytes != 0) {
    const std::string cap = format_bytes(static_cast<double>(r.device_capacity_bytes));
    if (!p.fits()) {
      out += fmt::format(
          "\n  does NOT fit in {}: {} allocation(s) fail even after the allocator frees its "
          "cache\n",
          cap, p.out_of_memory);
    } else if (p.cache_flushes > 0) {
      out += fmt::format(
          "\n  fits in {}, but only by flushing the allocator's cache {} time(s) (each "
          "synchronizes the "
          "device and returns memory with cudaFree: slow)\n",
          cap, p.cache_flushes);
    } else {
      out += fmt::format("\n  fits in {}\n", cap);
    }
  }
  return out;
}

}  // namespace vramkit::plan

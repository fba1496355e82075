// The offload plan of a request (include/vramkit/plan/offload_plan.hpp): the memory model's
// per-block saved bytes and the cost model's block times feed simulate_offload.
#include "vramkit/plan/offload_plan.hpp"

#include <algorithm>
#include <cmath>
#include <iterator>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "vramkit/core/error.hpp"
#include "vramkit/core/units.hpp"
#include "vramkit/plan/training_schedule.hpp"

namespace vramkit::plan {

namespace {

/// Bytes per element of a compressed tensor: one fp8 byte plus one fp32 scale per 128 elements.
constexpr double k_fp8_bytes = 1.0 + 4.0 / 128.0;
/// Fraction of the HBM rate the pack/unpack kernels reach, as the step pays for them (the hooks'
/// own work included): on the H200's 4.8 TB/s, 0.75 puts the planner's cost of compressing every
/// block of the 1B shape (b12 x 2048) at 27.5 ms a step for mlp,attn,norm, 17.6 for mlp,attn and
/// 19.9 for mlp,attn,norm with recompute, against +27.1-28.8, +16.1-17.3 (runs K and L: 1.064x
/// and 1.068x, 1.038x and 1.041x of a 0.423 s step) and +16.5-22.2 ms (run Q interleaved and
/// separate; run L +21.2) measured; 0.7 gave 29.5, 18.9 and 21.3.
constexpr double k_kernel_efficiency = 0.75;
/// Share of a copy hidden behind compute that still lengthens the step: the 1B plan mix of run J
/// (docs/results/2026-12-01-h200-fourth-round.md) ran 35 ms slower than the same mix with its
/// offloaded blocks kept, for 0.28 s of copies of which the model exposes 1 ms (12%; run G's
/// mix: 6.5%, run I's: 4.3%; the largest, so that a copy is chosen only where it pays anyway).
constexpr double k_copy_interference = 0.12;
/// Each direction's share of the one-way pinned rate when both directions copy at once: vramkit
/// probe's bidirectional pinned figure on an H200, 89.96 GB/s against 55.28 one way (0.81).
constexpr double k_bidirectional_share = 0.81;
/// The engine's host_lead_blocks the plan assumes (vramkit.offload_activations waits at each
/// block's start of the forward until the device has begun the block two before): what the
/// copy-out window still holds at the loss follows from it (offload_inputs::host_lead_blocks).
constexpr int k_host_lead_blocks = 2;

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  while (true) {
    const auto p = s.find(sep);
    out.push_back(s.substr(0, p));
    if (p == std::string_view::npos) break;
    s = s.substr(p + 1);
  }
  return out;
}

}  // namespace

std::string compress_option::to_string() const {
  if (!enabled) return "none";
  std::string s = e5m2 ? "fp8-e5m2:" : "fp8:";
  std::string mods;
  for (const auto& [on, name] : {std::pair{mlp, "mlp"}, {attn, "attn"}, {norm, "norm"}})
    if (on) mods += (mods.empty() ? "" : ",") + std::string(name);
  return s + mods + (recompute ? ":recompute" : "");
}

compress_option parse_compress_option(std::string_view value) {
  const auto bad = [&](std::string_view why) {
    return invalid_input(fmt::format("--compress-activations {}: {}", value, why));
  };
  compress_option c;
  if (value == "none") return c;
  std::string_view head = value, mods;
  const auto colon = value.find(':');
  if (colon != std::string_view::npos) {
    head = value.substr(0, colon);
    mods = value.substr(colon + 1);
    if (const auto tail = mods.find(':'); tail != std::string_view::npos) {
      if (mods.substr(tail + 1) != "recompute")
        throw bad("what follows the modules is ':recompute' or nothing");
      c.recompute = true;
      mods = mods.substr(0, tail);
    }
    if (mods.empty()) throw bad("name the modules after ':' (a comma list of mlp, attn and norm)");
  }
  if (head == "fp8" || head == "fp8-e4m3")
    c.e5m2 = false;
  else if (head == "fp8-e5m2")
    c.e5m2 = true;
  else
    throw bad("use none, fp8[:MODULES] or fp8-e5m2[:MODULES]");
  c.enabled = true;
  if (mods.empty()) {
    c.mlp = c.attn = true;
    return c;
  }
  for (auto m : split(mods, ',')) {
    if (m == "mlp")
      c.mlp = true;
    else if (m == "attn")
      c.attn = true;
    else if (m == "norm")
      c.norm = true;
    else
      throw bad(fmt::format("module '{}' is not mlp, attn or norm", m));
  }
  return c;
}

offload_link offload_link_for(const device_overheads& o, const gpu_spec* gpu) {
  if (o.source != "default" && o.h2d_bytes_per_s > 0) return {o.h2d_bytes_per_s, "probe"};
  if (gpu != nullptr) return {gpu->pcie_bytes_per_s(), "catalogue: " + gpu->name};
  return {o.h2d_bytes_per_s, "default"};
}

namespace {

/// Bytes autograd saves in one block: the activations a middle layer allocates in the forward of
/// the first step and that are still alive when the forward ends.
std::uint64_t block_saved_bytes(const model_description& m, const plan_request& r, int n_blocks) {
  const schedule sch = build_schedule(m, r);
  const int probe_layer = n_blocks > 2 ? 1 : 0;
  std::vector<std::uint8_t> live(sch.tensors.size(), 0);
  std::uint64_t saved = 0;
  for (const auto& e : sch.events) {
    const auto& ti = sch.tensors[e.tensor];
    if (e.alloc && ti.step == 0 && ti.ph != phase::setup && ti.ph != phase::forward) break;
    if (ti.comp != component::activations || ti.step != 0 || ti.ph != phase::forward ||
        ti.layer != probe_layer)
      continue;
    if (e.alloc && !live[e.tensor]) {
      live[e.tensor] = 1;
      saved += ti.bytes;
    } else if (!e.alloc && live[e.tensor]) {
      live[e.tensor] = 0;
      saved -= ti.bytes;
    }
  }
  return saved;
}

/// The engine settings the plan assumes (vramkit.offload_activations' max_inflight_bytes and
/// prefetch_blocks, printed in the JSON): two blocks' copies out in flight, and each block's copy
/// back started as many blocks ahead as one copy takes backward passes of a block, plus one.
void set_copy_windows(offload_inputs& in, int n_blocks) {
  in.window_bytes = 2 * in.block_bytes;
  const double copy_in = static_cast<double>(in.block_bytes) / in.h2d_bytes_per_s;
  const double ahead = in.t_bwd_s > 0 ? std::ceil(copy_in / in.t_bwd_s) + 1 : n_blocks;
  in.prefetch_blocks = static_cast<int>(std::clamp(ahead, 1.0, static_cast<double>(n_blocks)));
}

// Per block, in bytes: what vramkit.compress_activations takes out of the saved tensors, what
// its encodes read (casts of one source share one copy), what it stores, and what its restore
// recomputes (read and written).
struct codec_traffic {
  double removed = 0, read = 0, stored = 0, recomputed = 0;
};

codec_traffic compression_traffic(const model_description& m, const compress_option& c, bool amp,
                                  double low, double resid, double rows) {
  const auto& t = m.t;
  const auto h = static_cast<double>(t.hidden);
  const auto f = static_cast<double>(t.intermediate);
  codec_traffic out;
  // n elements of b bytes each, `copies` of them distinct, stored at `to` bytes an element.
  const auto add = [&](double n, double b, double copies, double to) {
    out.removed += n * b;
    out.read += copies * b;
    out.stored += copies * to;
  };
  if (!c.enabled) return out;
  // Separate q/k/v projections under autocast each save their own cast of the norm's fp32
  // output (one compressed copy for the three); a fused projection, or no cast, saves one.
  // o_proj's input is a view of the attention output the attention kernel saves anyway: left
  // alone (it would add bytes).
  const bool separate = m.family == model_family::llama || m.family == model_family::moe ||
                        m.family == model_family::bert;
  if (c.attn) add((amp && separate ? 3 : 1) * rows * h, low, rows * h, k_fp8_bytes);
  if (c.mlp) {
    // Gated MLPs: gate and up each cast the input under autocast (one copy for both), and
    // save their outputs, the activation's output and the product; GELU MLPs: the input,
    // fc1's output and the activation's output.
    if (t.mlp == mlp_kind::swiglu && c.recompute) {
      // silu(gate) recomputed from gate (read gate, write it), the product silu(gate) * up
      // from its factors (read both, write it): gate and up stored.
      add((amp ? 2 : 1) * rows * h + 2 * rows * f, low, rows * h + 2 * rows * f, k_fp8_bytes);
      add(2 * rows * f, low, 0, 0);
      out.recomputed += 5 * rows * f * low;
    } else if (t.mlp == mlp_kind::swiglu) {
      add((amp ? 2 : 1) * rows * h + 4 * rows * f, low, rows * h + 4 * rows * f, k_fp8_bytes);
    } else {
      add(rows * h + 2 * rows * f, low, rows * h + 2 * rows * f, k_fp8_bytes);
    }
  }
  if (c.norm) {
    // Two norms a block, each saving its input (the residual stream: kept as bf16 when it is
    // fp32, left alone when 16-bit) and, RMSNorm, its normalized output (fp8).
    // With recompute the inputs stay as they are and the outputs (input * rsqrt) are
    // recomputed: read the input, write the output.
    const double inputs = 2 * rows * h, outputs = t.layer_norm ? 0 : 2 * rows * h;
    if (c.recompute) {
      add(outputs, resid, 0, 0);
      out.recomputed += 2 * outputs * resid;
    } else {
      if (resid == 4) add(inputs, resid, inputs, 2);
      add(outputs, resid, outputs, k_fp8_bytes);
    }
  }
  return out;
}

/// A selective block's GEMM outputs under compression, as vramkit.offload_activations stores
/// them: the MLP's (up, gate, down) with `mlp` and, of attention's, the output projection's with
/// `attn`; q, k and v stay exact (the fused attention kernel's backward reads them), as do the
/// attention kernel's outputs. Kept or copied at k_fp8_bytes an element, encoded in the forward
/// and decoded before the recompute, at `hbm` bytes a second.
void set_selective_compression(offload_inputs& in, const transformer_shape& t,
                               const compress_option& c, double sel, double rows, double low,
                               double hbm) {
  const auto h = static_cast<double>(t.hidden);
  const auto f = static_cast<double>(t.intermediate);
  const double mlp_out = (t.mlp == mlp_kind::swiglu ? 2 : 1) * f + h;
  const double sel_c = std::min(sel, rows * low * ((c.mlp ? mlp_out : 0.0) + (c.attn ? h : 0.0)));
  const double sel_fp8 = sel_c / low * k_fp8_bytes;
  in.selective_stored_bytes = static_cast<std::uint64_t>(sel - sel_c + sel_fp8);
  in.selective_pack_s = in.selective_unpack_s = (sel_c + sel_fp8) / hbm;
}

}  // namespace

offload_setup make_offload_setup(const model_description& m, const plan_request& r_in,
                                 const compress_option& c, bool optimizer, const gpu_spec& gpu,
                                 const device_overheads& o) {
  if (r_in.mode != run_mode::train || m.is_vision())
    throw invalid_input(
        "--offload activations and --compress-activations are modelled for training transformer "
        "language models");
  plan_request r = r_in;
  r.ckpt = checkpointing::none;
  r.device_capacity_bytes = 0;  // the figures without offload, unconstrained
  if (r.offload != offload_kind::none)
    throw invalid_input(
        "--offload takes one value: activations/both (vramkit) or optimizer/params (ZeRO-Offload)");
  if (r.tp > 1 || r.pp > 1 || r.gpus > 1)
    throw invalid_input("--offload activations is modelled for one GPU (--gpus 1)");
  const plan_result base = make_plan(m, r, o);
  r = base.request;
  const auto& t = m.t;
  offload_setup s;
  s.n_blocks = static_cast<int>(t.layers);
  const std::uint64_t saved = block_saved_bytes(m, r, s.n_blocks);
  s.saved_bytes_per_block = saved;
  const bool amp = r.prec == precision::amp_bf16 || r.prec == precision::amp_fp16;
  const double low = r.prec == precision::fp32 ? 4 : 2;  // bytes of the GEMM inputs
  const double resid = (r.prec == precision::fp32 || amp) ? 4 : 2;
  const auto rows = static_cast<double>(r.micro_batch * r.seq);
  const auto h = static_cast<double>(t.hidden);
  const auto f = static_cast<double>(t.intermediate);
  const codec_traffic ct = compression_traffic(m, c, amp, low, resid, rows);
  const double removed = ct.removed, read = ct.read, stored = ct.stored, recomputed = ct.recomputed;
  const double compressible = std::min(removed, 0.9 * static_cast<double>(saved));
  const double share = removed > 0 ? compressible / removed : 0.0;
  s.compressible_bytes_per_block = static_cast<std::uint64_t>(compressible);
  const double hbm = gpu.hbm_bytes_per_s * k_kernel_efficiency;
  // One kernel each way (libvramkit_compress.so) per stored copy: read the tensor, write what
  // is stored; read that back, write the tensor.
  s.pack_s_per_block = share * (read + stored) / hbm;
  s.unpack_s_per_block = s.pack_s_per_block + share * recomputed / hbm;

  auto& in = s.inputs;
  in.block_bytes =
      static_cast<std::uint64_t>(static_cast<double>(saved) - compressible + share * stored);
  in.input_bytes = static_cast<std::uint64_t>(rows * h * resid);
  // Compute: the cost model's parts, per micro-batch (the head, the loss and the optimizer's
  // share of the step outside the blocks); the codec's kernels are the model's own terms.
  const step_time_parts parts = estimate_step_parts(m, r, gpu, o);
  const double mbs = parts.micro_batches;
  in.t_fwd_s = parts.block_forward_s;
  in.t_bwd_s = parts.block_backward_s;
  in.pack_s = c.enabled ? s.pack_s_per_block : 0;
  in.unpack_s = c.enabled ? s.unpack_s_per_block : 0;
  in.other_time_s = parts.outside_s + (optimizer ? 0.0 : parts.optimizer_s / mbs);
  // Selective checkpointing keeps the GEMMs' and attention's outputs, never more than the block
  // saves besides its input, and runs the memory-bound kernels again.
  const double sel = std::min(parts.block_gemm_output_bytes,
                              static_cast<double>(saved) - static_cast<double>(in.input_bytes));
  in.selective_bytes = sel > 0 ? static_cast<std::uint64_t>(sel) : 0;
  in.t_selective_s = parts.block_memory_bound_s;
  if (c.enabled && sel > 0) set_selective_compression(in, t, c, sel, rows, low, hbm);
  s.compute = parts;
  s.micro_batches = mbs;
  s.link = offload_link_for(o, &gpu);
  in.d2h_bytes_per_s = in.h2d_bytes_per_s = s.link.bytes_per_s;
  set_copy_windows(in, s.n_blocks);
  in.copy_interference = k_copy_interference;
  in.windows_per_mix = true;
  in.host_lead_blocks = k_host_lead_blocks;
  if (c.enabled) {
    // A checkpointed block recomputes uncompressed; a compressed block's backward holds its
    // tensors decoded, and those of the block below it (decode_ahead=1) on top of the payloads.
    in.recompute_bytes = saved;
    in.decode_bytes = static_cast<std::uint64_t>(2 * share * read);
  }
  // Everything but the blocks' saved tensors, anchored to the memory model's plan with full
  // checkpointing (the mixes under a cap are mostly checkpointed): its peak is other + the
  // layers' inputs + one block's recompute.
  plan_request rc = r;
  rc.ckpt = checkpointing::full;
  const plan_result full = make_plan(m, rc, o);
  double other = static_cast<double>(full.allocated_peak_bytes) -
                 static_cast<double>(in.input_bytes) * s.n_blocks - static_cast<double>(saved);
  // Mixes without a checkpointed block peak where the plan without checkpointing does (the
  // start of backward, with the loss's gradients): anchored to that plan instead, so that
  // keeping every block gives its peak less what compression saves.
  double other_keep =
      static_cast<double>(base.allocated_peak_bytes) - static_cast<double>(saved) * s.n_blocks;
  if (optimizer) {
    if (r.optimizer != optimizer_kind::adam && r.optimizer != optimizer_kind::adamw)
      throw invalid_input(
          "--offload both moves Adam's moments: it needs --optimizer adam or adamw");
    const double w = r.prec == precision::bf16 ? 2 : 4;
    // Moments stream in and out at once: each direction at the link's bidirectional share.
    const double each = s.link.bytes_per_s * k_bidirectional_share;
    const auto est = estimate_optimizer_offload(base.parameters, master_weights::none, each, each);
    const auto params = static_cast<double>(base.parameters);
    other += static_cast<double>(est.device_buffer_bytes) - 2 * w * params;
    other_keep += static_cast<double>(est.device_buffer_bytes) - 2 * w * params;
    s.optimizer_host_bytes = est.host_bytes;
    s.optimizer_time_s = est.step_time_s;
  }
  in.other_bytes = static_cast<std::uint64_t>(std::max(0.0, other));
  // With other_bytes anchored to full checkpointing's peak: one block's recompute, uncompressed
  // (the block's saved bytes; block_bytes without compression).
  in.loss_bytes = saved;
  s.other_bytes_without_checkpoint = static_cast<std::uint64_t>(std::max(0.0, other_keep));
  // The allocator's cache beside the allocated peak, per mix from the plan whose peak moment it
  // shares (as other_bytes is anchored): full checkpointing's with a block that recomputes,
  // the plan without checkpointing's otherwise.
  in.cache_bytes = full.reserved_peak_bytes - full.allocated_peak_bytes;
  in.cache_bytes_without_recompute = base.reserved_peak_bytes - base.allocated_peak_bytes;
  s.cache_bytes = in.cache_bytes;
  s.context_bytes = base.context_bytes;
  return s;
}

namespace {

bool recomputes(block_policy b) {
  return b == block_policy::checkpoint || b == block_policy::selective ||
         b == block_policy::selective_offload || b == block_policy::checkpoint_offload;
}

}  // namespace

offload_plan evaluate_offload(const offload_setup& s, const std::vector<block_policy>& mix,
                              const compress_option& c, bool optimizer) {
  offload_plan p;
  p.mix = mix;
  p.compress = c;
  p.optimizer = optimizer;
  p.setup = s;
  offload_inputs in = s.inputs;
  if (c.recompute &&
      std::any_of(mix.begin(), mix.end(), [](block_policy b) { return b != block_policy::keep; }))
    throw invalid_input(
        "--compress-activations " + c.to_string() +
        ": recompute is modelled for compression alone (every block kept), not with --offload");
  if (std::none_of(mix.begin(), mix.end(), recomputes)) {
    in.other_bytes = s.other_bytes_without_checkpoint;
    in.loss_bytes = 0;
    // That peak is the loss's, at the start of backward, before any block's decode: the
    // decoded tensors of a block's backward replace the loss's (larger) transients.
    in.decode_bytes = 0;
  }
  p.estimate = simulate_offload(mix, in);
  p.allocated_peak_bytes = p.estimate.device_peak_bytes;
  p.device_peak_bytes = p.allocated_peak_bytes + allocator_cache_bytes(mix, in) + s.context_bytes;
  p.host_pinned_bytes = p.estimate.host_pinned_bytes + s.optimizer_host_bytes;
  // Copies the schedule hides still slow the compute they overlap (HBM traffic, the engine's
  // per-tensor work in the hooks): a fraction of the hidden copy time shows in the step.
  p.step_time_s = s.micro_batches * ranked_step_s(p.estimate, in) + s.optimizer_time_s;
  return p;
}

offload_plan plan_offload(const model_description& m, const plan_request& r,
                          const offload_option& opt, const compress_option& c, const gpu_spec& gpu,
                          const device_overheads& o) {
  if (r.ckpt == checkpointing::selective)
    throw invalid_input("--offload with --checkpointing selective: give none or full");
  if (!opt.mix.empty() && r.ckpt != checkpointing::none)
    throw invalid_input(
        "--offload with a mix names each block's checkpointing: drop --checkpointing");
  const auto s = make_offload_setup(m, r, c, opt.optimizer, gpu, o);
  if (!opt.mix.empty()) return evaluate_offload(s, opt.mix, c, opt.optimizer);
  const int n = opt.activations ? opt.activation_blocks : 0;
  const int ck = r.ckpt == checkpointing::full ? s.n_blocks - n : 0;
  return evaluate_offload(s, arrange_mix(s.n_blocks, n, ck), c, opt.optimizer);
}

std::optional<offload_plan> fit_offload(const model_description& m, const plan_request& r,
                                        std::uint64_t limit_bytes, bool allow_lossy,
                                        const compress_option& lossy, const gpu_spec& gpu,
                                        const device_overheads& o,
                                        std::optional<bool> optimizer_only, bool lossy_only) {
  std::optional<offload_plan> best;
  std::vector<compress_option> comps;
  if (!lossy_only) comps.emplace_back();
  if (allow_lossy && lossy.recompute)
    throw invalid_input("--compress-activations " + lossy.to_string() +
                        ": recompute is modelled for compression alone, not with --fit");
  if (allow_lossy) comps.push_back(lossy.enabled ? lossy : parse_compress_option("fp8"));
  for (const bool optimizer : {false, true}) {
    if (optimizer && r.optimizer != optimizer_kind::adam && r.optimizer != optimizer_kind::adamw)
      continue;
    if (optimizer_only && *optimizer_only != optimizer) continue;
    for (const auto& c : comps) {
      const auto s = make_offload_setup(m, r, c, optimizer, gpu, o);
      if (s.context_bytes >= limit_bytes) continue;
      const auto choice = choose_offload_mix(s.n_blocks, limit_bytes - s.context_bytes, s.inputs);
      if (!choice) continue;
      auto p = evaluate_offload(s, choice->mix, c, optimizer);
      if (!best || p.step_time_s < best->step_time_s) best = std::move(p);
    }
  }
  return best;
}

namespace {

std::string mix_summary(const std::vector<block_policy>& mix) {
  const auto n = [&](block_policy p) { return std::count(mix.begin(), mix.end(), p); };
  std::string out = fmt::format("{} offloaded, {} checkpointed", n(block_policy::offload),
                                n(block_policy::checkpoint));
  if (const auto k = n(block_policy::selective); k > 0) out += fmt::format(", {} selective", k);
  if (const auto k = n(block_policy::selective_offload); k > 0)
    out += fmt::format(", {} selective-offload", k);
  if (const auto k = n(block_policy::checkpoint_offload); k > 0)
    out += fmt::format(", {} checkpoint-offload", k);
  return out + fmt::format(", {} kept", n(block_policy::keep));
}

bool plain(const offload_plan& p) {
  return !p.compress.enabled && !p.optimizer &&
         std::all_of(p.mix.begin(), p.mix.end(),
                     [](block_policy b) { return b == block_policy::keep; });
}

/// The fit's candidate for an offload plan; `slower_lossy`: the fastest compressed mix, listed
/// beside a faster lossless one.
fit_candidate offload_candidate(const plan_request& r, const offload_plan& best,
                                const fit_options& opt, bool slower_lossy) {
  fit_candidate c;
  c.request = r;
  c.device_peak_bytes = best.device_peak_bytes;
  c.allocated_peak_bytes = best.allocated_peak_bytes;
  c.host_peak_bytes = best.host_pinned_bytes;
  c.step_time_s = best.step_time_s;
  for (auto b : best.mix) c.activation_mix.emplace_back(to_string(b));
  c.compress_activations = best.compress.to_string();
  c.optimizer_offload = best.optimizer;
  c.offload_max_inflight_bytes = best.estimate.window_bytes;
  c.offload_prefetch_blocks = best.estimate.prefetch_blocks;
  c.reasons.push_back("per block: " + mix_summary(best.mix) +
                      " (vramkit.offload_activations), the fastest " +
                      (slower_lossy ? "compressed " : "") + "mix that fits" +
                      (best.estimate.copy_s > 0
                           ? fmt::format(" ({:.0f}% of the {:.1f} ms copy time hidden)",
                                         best.estimate.overlap * 100, best.estimate.copy_s * 1e3)
                           : std::string()));
  if (best.compress.enabled)
    c.reasons.emplace_back("activations compressed to " + best.compress.to_string() +
                           (slower_lossy ? " (lossy, --allow-lossy; slower than the lossless mix)"
                                         : " (lossy, --allow-lossy)"));
  if (best.optimizer)
    c.reasons.emplace_back("Adam moments in pinned host memory (vramkit.OffloadedAdamW)");
  c.reasons.push_back(fmt::format("device peak {} of {}, pinned host {}",
                                  format_bytes(static_cast<double>(c.device_peak_bytes)),
                                  format_bytes(static_cast<double>(opt.capacity_bytes)),
                                  format_bytes(static_cast<double>(c.host_peak_bytes))));
  return c;
}

}  // namespace

fit_result fit_search_with_offload(const model_description& m, const plan_request& base,
                                   const fit_options& opt, bool allow_lossy,
                                   const compress_option& lossy, const device_overheads& o) {
  fit_result res = fit_search(m, base, opt, o);
  if (base.mode != run_mode::train || m.is_vision() || base.gpus > 1) return res;
  const gpu_spec& gpu = opt.gpu ? *opt.gpu : find_gpu("H100 SXM 80GB");
  const auto limit =
      static_cast<std::uint64_t>(static_cast<double>(opt.capacity_bytes) * (1.0 - opt.margin));
  plan_request r = base;
  r.offload = offload_kind::none;
  r.validate(m);
  // The best mix without and with optimizer offload: two candidates, ranked with the rest; with
  // --allow-lossy, when the fastest is lossless and not every block kept, the fastest compressed
  // mix beside it (what compression would give under this capacity).
  std::vector<fit_candidate> offloads;
  for (const bool optimizer : {false, true}) {
    std::optional<offload_plan> best, compressed;
    try {
      best = fit_offload(m, r, limit, allow_lossy, lossy, gpu, o, optimizer);
      if (allow_lossy && best && !best->compress.enabled && !plain(*best))
        compressed = fit_offload(m, r, limit, true, lossy, gpu, o, optimizer, true);
    } catch (const invalid_input&) {
      return res;  // the request cannot be offloaded (e.g. its optimizer has no moments)
    }
    for (const auto* p : {&best, &compressed}) {
      if (!*p || plain(**p)) continue;
      auto c = offload_candidate(r, **p, opt, p == &compressed);
      offloads.push_back(c);
      res.fits.push_back(std::move(c));
    }
  }
  rank_fits(res, opt.max_results);
  // The offload candidates stay listed (they are what vramkit.offload_activations and
  // OffloadedAdamW run): one the ranking cut takes the place of the slowest plain configuration.
  const auto same = [](const fit_candidate& a, const fit_candidate& b) {
    return a.optimizer_offload == b.optimizer_offload && a.activation_mix == b.activation_mix &&
           a.compress_activations == b.compress_activations;
  };
  for (auto& c : offloads) {
    if (std::any_of(res.fits.begin(), res.fits.end(),
                    [&](const fit_candidate& f) { return same(f, c); }))
      continue;
    if (res.fits.size() >= opt.max_results) {
      const auto last_plain = std::find_if(res.fits.rbegin(), res.fits.rend(),
                                           [](const auto& f) { return f.activation_mix.empty(); });
      if (last_plain == res.fits.rend()) continue;
      res.fits.erase(std::next(last_plain).base());
    }
    res.fits.push_back(std::move(c));
  }
  return res;
}

std::string offload_json(const offload_plan& p) {
  const auto& s = p.setup;
  const auto n = [&](block_policy b) { return std::count(p.mix.begin(), p.mix.end(), b); };
  auto mix = nlohmann::ordered_json::array();
  for (auto b : p.mix) mix.push_back(to_string(b));
  const double pack = p.compress.enabled ? s.pack_s_per_block : 0.0;
  const double unpack = p.compress.enabled ? s.unpack_s_per_block : 0.0;
  const nlohmann::ordered_json j = {
      {"activation_blocks", n(block_policy::offload)},
      {"optimizer", p.optimizer},
      {"compress_activations", p.compress.to_string()},
      {"mix", mix},
      {"allocated_peak_bytes", p.allocated_peak_bytes},
      {"device_peak_bytes", p.device_peak_bytes},
      {"host_pinned_bytes", p.host_pinned_bytes},
      {"step_time_s", p.step_time_s},
      {"compute_s", p.estimate.compute_s},
      {"copy_s", p.estimate.copy_s},
      {"exposed_copy_s", p.estimate.exposed_copy_s},
      {"overlap", p.estimate.overlap},
      {"optimizer_time_s", s.optimizer_time_s},
      {"saved_bytes_per_block", s.saved_bytes_per_block},
      {"stored_bytes_per_block", s.inputs.block_bytes},
      {"compressible_bytes_per_block", s.compressible_bytes_per_block},
      {"selective_blocks", n(block_policy::selective)},
      {"selective_offload_blocks", n(block_policy::selective_offload)},
      {"checkpoint_offload_blocks", n(block_policy::checkpoint_offload)},
      {"selective_bytes_per_block", s.inputs.selective_bytes},
      {"selective_stored_bytes_per_block", s.inputs.selective_stored_bytes > 0
                                               ? s.inputs.selective_stored_bytes
                                               : s.inputs.selective_bytes},
      {"selective_recompute_s_per_block", s.inputs.t_selective_s},
      {"selective_pack_s_per_block", s.inputs.selective_pack_s},
      {"selective_unpack_s_per_block", s.inputs.selective_unpack_s},
      {"pack_s_per_block", pack},
      {"unpack_s_per_block", unpack},
      {"block_forward_s", s.inputs.t_fwd_s},
      {"block_backward_s", s.inputs.t_bwd_s},
      {"link_bytes_per_s", s.link.bytes_per_s},
      {"link_source", s.link.source},
      {"max_inflight_bytes", p.estimate.window_bytes},
      {"prefetch_blocks", p.estimate.prefetch_blocks},
      {"host_lead_blocks", p.estimate.host_lead_blocks},
      {"copy_out_held_at_loss_bytes", p.estimate.held_at_loss_bytes},
      {"kernel_rates", s.compute.rates.source},
  };
  return j.dump(2);
}

std::string to_json(const plan_result& base, const offload_plan& p) {
  auto j = nlohmann::ordered_json::parse(to_json(base));
  j["offload"] = nlohmann::ordered_json::parse(offload_json(p));
  return j.dump(2);
}

std::string to_table(const offload_plan& p) {
  const auto& s = p.setup;
  std::string out = "\n  with vramkit offload";
  if (p.compress.enabled) out += " and " + p.compress.to_string() + " compression";
  out += fmt::format(" ({}{}):\n", mix_summary(p.mix),
                     p.optimizer ? ", Adam moments on the host" : "");
  const auto line = [&](const std::string& k, const std::string& v) {
    out += fmt::format("  {:<58} {:>12}\n", k, v);
  };
  const auto b = [](std::uint64_t x) { return format_bytes(static_cast<double>(x)); };
  line("saved activations per block (stored)", b(s.inputs.block_bytes));
  if (s.inputs.selective_bytes > 0)
    line("  of them a selective block keeps (GEMM/attention outputs)", b(s.inputs.selective_bytes));
  if (s.inputs.selective_stored_bytes > 0)
    line("  stored with compression (fp8 GEMM outputs)", b(s.inputs.selective_stored_bytes));
  line("allocated peak with offload", b(p.allocated_peak_bytes));
  line("device peak with offload (nvidia-smi used)", b(p.device_peak_bytes));
  line("pinned host bytes", b(p.host_pinned_bytes));
  line("estimated step time", fmt::format("{:.1f} ms", p.step_time_s * 1e3));
  line("  of it copy time not hidden by compute",
       fmt::format("{:.1f} ms", p.estimate.exposed_copy_s * 1e3));
  line("host link (" + s.link.source + ")", fmt::format("{:.1f} GB/s", s.link.bytes_per_s / 1e9));
  return out;
}

}  // namespace vramkit::plan

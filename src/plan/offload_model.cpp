// The offload model (include/vramkit/plan/offload_model.hpp); the same arithmetic as
// python/vramkit/offload_plan.py, step for step.
#include "vramkit/plan/offload_model.hpp"

#include <algorithm>
#include <charconv>
#include <map>
#include <tuple>

#include <fmt/format.h>

#include "vramkit/core/error.hpp"

namespace vramkit::plan {

const char* to_string(block_policy p) noexcept {
  switch (p) {
    case block_policy::offload:
      return "offload";
    case block_policy::checkpoint:
      return "checkpoint";
    case block_policy::keep:
      return "keep";
  }
  return "?";
}

block_policy parse_block_policy(std::string_view s) {
  if (s == "offload") return block_policy::offload;
  if (s == "checkpoint") return block_policy::checkpoint;
  if (s == "keep") return block_policy::keep;
  throw invalid_input(fmt::format("block policy '{}': use offload, checkpoint or keep", s));
}

offload_estimate simulate_offload(const std::vector<block_policy>& mix, const offload_inputs& in) {
  const auto n = static_cast<int>(mix.size());
  const auto a = static_cast<double>(in.block_bytes);
  const double t_f = in.t_fwd_s, t_b = in.t_bwd_s;
  const auto count = [&](block_policy p) {
    return static_cast<int>(std::count(mix.begin(), mix.end(), p));
  };
  const int n_off = count(block_policy::offload), n_ck = count(block_policy::checkpoint);
  if (n_off > 0 && (in.d2h_bytes_per_s <= 0 || in.h2d_bytes_per_s <= 0))
    throw invalid_input("offload model: the link rates must be positive to offload");
  const double copy_out = n_off ? a / in.d2h_bytes_per_s : 0,
               copy_in = n_off ? a / in.h2d_bytes_per_s : 0;
  const auto window = static_cast<double>(in.window_bytes);

  // Forward: a block's tensors stream out while it runs; the forward stalls only while more than
  // the window waits for the link.
  double t = 0, link = 0, stall = 0;
  std::map<int, double> outs;
  const auto codec = [&](int i, double s) { return mix[i] == block_policy::checkpoint ? 0.0 : s; };
  for (int i = 0; i < n; ++i) {
    const double start = t;
    t += t_f + codec(i, in.pack_s);
    if (mix[i] != block_policy::offload) continue;
    link = std::max(std::max(link, start) + copy_out, t);
    outs[i] = link;
    const double behind = (link - t) * in.d2h_bytes_per_s;
    if (behind > window) {
      const double wait_s = (behind - window) / in.d2h_bytes_per_s;
      stall += wait_s;
      t += wait_s;
    }
  }
  const double t_forward = t;

  // Backward, top block first; entering an offloaded block fetches it and prefetches the next
  // `prefetch` offloaded blocks below it; with prefetch_blocks = d, the start of block i's
  // backward also fetches the offloaded blocks among i .. i-d. A copy back starts after its copy
  // out has finished. `held`: the most bytes of blocks fetched back and not yet through their
  // backward, with the activations of the checkpointed block being recomputed meanwhile.
  std::vector<int> off;
  for (int i = 0; i < n; ++i)
    if (mix[i] == block_policy::offload) off.push_back(i);
  std::map<int, double> ready;
  double link_in = 0, wait = 0;
  t = t_forward;
  const auto fetch = [&](int j, double now) {
    if (ready.count(j)) return;
    if (outs[j] > now && j == off.back()) {  // still on the device in the copy-out window
      ready[j] = now;
      return;
    }
    link_in = std::max({link_in, now, outs[j]}) + copy_in;
    ready[j] = link_in;
  };
  double held = 0;
  const double recompute = in.recompute_bytes > 0 ? static_cast<double>(in.recompute_bytes) : a;
  const auto decoded = static_cast<double>(in.decode_bytes);
  for (int i = n - 1; i >= 0; --i) {
    for (int j = i; in.prefetch_blocks > 0 && j >= std::max(0, i - in.prefetch_blocks); --j)
      if (mix[j] == block_policy::offload) fetch(j, t);
    if (mix[i] == block_policy::offload) {
      fetch(i, t);
      const auto k = static_cast<int>(std::find(off.begin(), off.end(), i) - off.begin());
      for (int j = k - 1; j >= std::max(0, k - in.prefetch); --j) fetch(off[j], t);
      if (ready[i] > t) {
        wait += ready[i] - t;
        t = ready[i];
      }
    }
    const auto back =
        std::count_if(ready.begin(), ready.end(), [&](const auto& r) { return r.first <= i; });
    held = std::max(held, static_cast<double>(back) * a +
                              (mix[i] == block_policy::checkpoint ? recompute : decoded));
    t += t_b + (mix[i] == block_policy::checkpoint ? t_f : codec(i, in.unpack_s));
  }

  offload_estimate e;
  e.compute_s =
      n * (t_f + t_b) + n_ck * t_f + (n - n_ck) * (in.pack_s + in.unpack_s) + in.other_time_s;
  e.step_time_s = t + in.other_time_s;
  e.copy_s = n_off * (copy_out + copy_in);
  e.exposed_copy_s = stall + wait;
  e.overlap = e.copy_s > 0 ? 1.0 - e.exposed_copy_s / e.copy_s : 1.0;
  const double kept = count(block_policy::keep) * a + n_ck * static_cast<double>(in.input_bytes);
  double transient = 0;
  if (n_ck > 0) transient = std::max(transient, recompute);
  if (n_ck < n) transient = std::max(transient, decoded);
  if (n_off > 0 && in.prefetch_blocks > 0) {
    // What is still to be copied out when the forward ends, where the forward's peak is.
    double behind = 0;
    for (const auto& [j, done] : outs)
      behind += a * std::clamp((done - t_forward) / copy_out, 0.0, 1.0);
    transient = std::max({transient, held, std::min(window, behind)});
  } else if (n_off > 0) {
    transient =
        std::max({transient, std::min(n_off, 1 + in.prefetch) * a, std::min(window, n_off * a)});
  }
  e.device_peak_bytes =
      static_cast<std::uint64_t>(static_cast<double>(in.other_bytes) + kept + transient);
  e.host_pinned_bytes = static_cast<std::uint64_t>(n_off * a);
  return e;
}

std::vector<block_policy> arrange_mix(int n_blocks, int n_offload, int n_checkpoint) {
  if (n_offload < 0 || n_checkpoint < 0 || n_offload + n_checkpoint > n_blocks)
    throw invalid_input(
        fmt::format("offload mix: {} offloaded + {} checkpointed blocks exceed {} blocks",
                    n_offload, n_checkpoint, n_blocks));
  std::vector<block_policy> mix(static_cast<std::size_t>(n_blocks), block_policy::keep);
  const int span = n_offload + n_checkpoint;
  for (int i = 0; i < span; ++i) mix[i] = block_policy::checkpoint;
  for (int k = 0; k < n_offload; ++k) mix[(k * span) / n_offload] = block_policy::offload;
  return mix;
}

std::optional<offload_choice> choose_offload_mix(int n_blocks, std::uint64_t capacity_bytes,
                                                 const offload_inputs& in, mix_search search) {
  std::optional<offload_choice> best;
  const int max_off = search == mix_search::offload_and_checkpoint ? n_blocks : 0;
  for (int n_off = 0; n_off <= max_off; ++n_off) {
    for (int n_ck = 0; n_ck <= n_blocks - n_off; ++n_ck) {
      auto mix = arrange_mix(n_blocks, n_off, n_ck);
      const auto e = simulate_offload(mix, in);
      if (e.device_peak_bytes > capacity_bytes) continue;
      if (!best || std::tie(e.step_time_s, e.host_pinned_bytes) <
                       std::tie(best->estimate.step_time_s, best->estimate.host_pinned_bytes))
        best = offload_choice{std::move(mix), e};
    }
  }
  return best;
}

optimizer_offload_estimate estimate_optimizer_offload(std::uint64_t parameters,
                                                      master_weights master, double d2h_bytes_per_s,
                                                      double h2d_bytes_per_s,
                                                      std::uint64_t chunk_bytes) {
  if (d2h_bytes_per_s <= 0 || h2d_bytes_per_s <= 0)
    throw invalid_input("optimizer offload: the link rates must be positive");
  const int tensors = master == master_weights::fp32_on_host ? 3 : 2;
  optimizer_offload_estimate e;
  e.host_bytes = parameters * 4 * static_cast<std::uint64_t>(tensors);
  e.device_bytes_saved = parameters * 8;  // the moments; master weights were never on the device
  e.device_buffer_bytes = 2 * static_cast<std::uint64_t>(tensors) * chunk_bytes;
  const auto s = static_cast<double>(e.host_bytes);
  const auto chunk =
      static_cast<double>(std::min<std::uint64_t>(chunk_bytes * tensors, e.host_bytes));
  // In and out run on their own streams, so the slower direction sets the pace; the first chunk
  // in and the last chunk out have nothing to overlap with.
  e.step_time_s = std::max(s / h2d_bytes_per_s, s / d2h_bytes_per_s) +
                  std::min(chunk / h2d_bytes_per_s, chunk / d2h_bytes_per_s);
  return e;
}

offload_option parse_offload_option(std::string_view value, int n_blocks) {
  offload_option o;
  const auto bad = [&](std::string_view why) {
    return invalid_input(fmt::format("--offload {}: {}", value, why));
  };
  std::string_view head = value, count;
  if (const auto colon = value.find(':'); colon != std::string_view::npos) {
    head = value.substr(0, colon);
    count = value.substr(colon + 1);
  }
  if (head == "none" && count.empty()) return o;
  if (head == "optimizer" && count.empty()) {
    o.optimizer = true;
    return o;
  }
  if (head != "activations" && head != "both")
    throw bad("use none, activations[:N], optimizer or both[:N]");
  o.activations = true;
  o.optimizer = head == "both";
  o.activation_blocks = n_blocks;
  if (!count.empty() && count.find_first_not_of("ock") == std::string_view::npos) {
    for (const char c : count)
      o.mix.push_back(c == 'o'   ? block_policy::offload
                      : c == 'c' ? block_policy::checkpoint
                                 : block_policy::keep);
    if (n_blocks > 0 && static_cast<int>(o.mix.size()) != n_blocks)
      throw bad(fmt::format("the mix names {} blocks; the model has {}", o.mix.size(), n_blocks));
    o.activation_blocks =
        static_cast<int>(std::count(o.mix.begin(), o.mix.end(), block_policy::offload));
    return o;
  }
  if (!count.empty() || value.back() == ':') {
    int n = 0;
    const auto* end = count.data() + count.size();
    const auto [p, ec] = std::from_chars(count.data(), end, n);
    if (ec != std::errc{} || p != end || n < 1)
      throw bad("N must be a whole number of blocks, at least 1, or a mix of o, c and k per block");
    if (n_blocks > 0 && n > n_blocks)
      throw bad(fmt::format("N is larger than the model's {} blocks", n_blocks));
    o.activation_blocks = n;
  }
  return o;
}

}  // namespace vramkit::plan

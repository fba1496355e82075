// The offload model (include/vramkit/plan/offload_model.hpp), the only one: Python reaches it
// through the plan command.
#include "vramkit/plan/offload_model.hpp"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
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
    case block_policy::selective:
      return "selective";
    case block_policy::selective_offload:
      return "selective-offload";
    case block_policy::checkpoint_offload:
      return "checkpoint-offload";
  }
  return "?";
}

namespace {

constexpr std::array k_policies{
    block_policy::offload,   block_policy::checkpoint,        block_policy::keep,
    block_policy::selective, block_policy::selective_offload, block_policy::checkpoint_offload};

bool to_host(block_policy p) {
  return p == block_policy::offload || p == block_policy::selective_offload ||
         p == block_policy::checkpoint_offload;
}

/// Checkpointed: the whole forward runs again in backward.
bool recomputed(block_policy p) {
  return p == block_policy::checkpoint || p == block_policy::checkpoint_offload;
}

bool selective(block_policy p) {
  return p == block_policy::selective || p == block_policy::selective_offload;
}

}  // namespace

block_policy parse_block_policy(std::string_view s) {
  for (const auto p : k_policies)
    if (s == to_string(p)) return p;
  throw invalid_input(fmt::format(
      "block policy '{}': use offload, checkpoint, keep, selective, selective-offload or "
      "checkpoint-offload",
      s));
}

char policy_letter(block_policy p) noexcept {
  if (p == block_policy::selective_offload) return 'h';
  if (p == block_policy::checkpoint_offload) return 'x';
  return to_string(p)[0];
}

std::optional<block_policy> policy_of_letter(char c) noexcept {
  for (const auto p : k_policies)
    if (policy_letter(p) == c) return p;
  return std::nullopt;
}

namespace {

// One mix under one set of inputs: what each block copies to the host, keeps on the device and
// runs again in backward.
struct mix_walk {
  mix_walk(const std::vector<block_policy>& policies, const offload_inputs& inputs)
      : mix(policies),
        in(inputs),
        n(static_cast<int>(policies.size())),
        a(static_cast<double>(inputs.block_bytes)),
        sel(static_cast<double>(inputs.selective_bytes)),
        sel_stored(inputs.selective_stored_bytes > 0
                       ? static_cast<double>(inputs.selective_stored_bytes)
                       : static_cast<double>(inputs.selective_bytes)),
        // With compression a checkpointed or selective block recomputes uncompressed
        // (recompute_bytes, the block's saved bytes, against block_bytes stored), and a block
        // whose tensors are compressed holds them decoded in its backward (decode_bytes).
        full(inputs.recompute_bytes > 0 ? static_cast<double>(inputs.recompute_bytes) : a),
        decoded(static_cast<double>(inputs.decode_bytes)),
        moved(policies.size(), 0.0),
        window(static_cast<double>(inputs.window_bytes)),
        prefetch_blocks(inputs.prefetch_blocks) {
    for (int i = 0; i < n; ++i) {
      if (!to_host(mix[i])) continue;
      moved[i] = mix[i] == block_policy::offload              ? a
                 : mix[i] == block_policy::checkpoint_offload ? static_cast<double>(in.input_bytes)
                                                              : sel_stored;
      off.push_back(i);
    }
    if (!off.empty() && (in.d2h_bytes_per_s <= 0 || in.h2d_bytes_per_s <= 0))
      throw invalid_input("offload model: the link rates must be positive to offload");
    if (in.windows_per_mix && !off.empty()) {
      const double largest = *std::max_element(moved.begin(), moved.end());
      // Two copies in flight when one outlasts its block's forward (the next block's copy
      // queues behind it); one when it ends within it (a checkpointed block's input).
      window = largest / in.d2h_bytes_per_s > in.t_fwd_s ? 2 * largest : largest;
      const double ahead =
          in.t_bwd_s > 0 ? std::ceil(largest / in.h2d_bytes_per_s / in.t_bwd_s) + 1 : n;
      prefetch_blocks = static_cast<int>(std::clamp(ahead, 1.0, static_cast<double>(n)));
    }
  }

  [[nodiscard]] int count(block_policy p) const {
    return static_cast<int>(std::count(mix.begin(), mix.end(), p));
  }
  [[nodiscard]] double copy_out(int i) const { return moved[i] / in.d2h_bytes_per_s; }
  [[nodiscard]] double copy_in(int i) const { return moved[i] / in.h2d_bytes_per_s; }
  // The codec's kernels run in blocks whose saved tensors pass the hooks (kept or offloaded).
  [[nodiscard]] double codec(int i, double s) const {
    return mix[i] == block_policy::keep || mix[i] == block_policy::offload ? s : 0.0;
  }
  // The encode in block i's forward: its saved tensors' (kept or offloaded), or a selective
  // block's GEMM outputs'.
  [[nodiscard]] double pack(int i) const {
    return selective(mix[i]) ? in.selective_pack_s : codec(i, in.pack_s);
  }
  // What block i runs again in backward (a selective block's decode before its recompute).
  [[nodiscard]] double recompute(int i) const {
    return recomputed(mix[i])  ? in.t_fwd_s
           : selective(mix[i]) ? in.t_selective_s + in.selective_unpack_s
                               : codec(i, in.unpack_s);
  }
  // The bytes that recompute adds while it runs: a recompute runs uncompressed, so the block
  // holds its saved tensors whole, beside what it kept or fetched back (a selective block's
  // stored GEMM outputs).
  [[nodiscard]] double regrown(int i) const {
    return recomputed(mix[i]) ? full : selective(mix[i]) ? full - sel_stored : 0.0;
  }
  // What a block keeps on the device from its forward to its backward (the copying policies
  // keep nothing there; what they fetch back is counted in the backward).
  [[nodiscard]] double resident(int i) const {
    switch (mix[i]) {
      case block_policy::keep:
        return a;
      case block_policy::checkpoint:
      case block_policy::selective_offload:
        return static_cast<double>(in.input_bytes);
      case block_policy::selective:
        return sel_stored + static_cast<double>(in.input_bytes);
      default:
        return 0.0;
    }
  }

  const std::vector<block_policy>& mix;
  const offload_inputs& in;
  int n;
  double a, sel, sel_stored, full, decoded;
  std::vector<double> moved;  // bytes each block copies to the host (and back)
  std::vector<int> off;       // the blocks that copy, bottom first
  double window;
  int prefetch_blocks;
};

struct forward_walk {
  double t = 0, stall = 0;
  std::map<int, double> outs;  // when each copying block's copy out ends
  std::vector<double> starts;  // when each block's forward starts on the device
};

// Forward: a block's tensors stream out while it runs; the forward stalls only while more than
// the window waits for the link.
forward_walk walk_forward(const mix_walk& w) {
  forward_walk f;
  double link = 0;
  for (int i = 0; i < w.n; ++i) {
    const double start = f.t;
    f.starts.push_back(start);
    f.t += w.in.t_fwd_s + w.pack(i);
    if (!to_host(w.mix[i])) continue;
    link = std::max(std::max(link, start) + w.copy_out(i), f.t);
    f.outs[i] = link;
    const double behind = (link - f.t) * w.in.d2h_bytes_per_s;
    if (behind > w.window) {
      const double wait_s = (behind - w.window) / w.in.d2h_bytes_per_s;
      f.stall += wait_s;
      f.t += wait_s;
    }
  }
  return f;
}

struct backward_walk {
  double t = 0, wait = 0;
  double held = 0;  // the most bytes fetched back and not yet through their backward
};

// Backward, top block first; entering an offloaded block fetches it and prefetches the next
// `prefetch` offloaded blocks below it; with prefetch_blocks = d, the start of block i's backward
// also fetches the offloaded blocks among i .. i-d. A copy back starts after its copy out has
// finished. `held` counts the blocks fetched back and not yet through their backward, with what
// the block being recomputed regrows meanwhile.
backward_walk walk_backward(const mix_walk& w, const forward_walk& f) {
  backward_walk bw;
  std::map<int, double> ready;
  double link_in = 0;
  bw.t = f.t;
  const auto fetch = [&](int j, double now) {
    if (ready.count(j)) return;
    const double out_done = f.outs.at(j);
    if (out_done > now && j == w.off.back()) {  // still on the device in the copy-out window
      ready[j] = now;
      return;
    }
    link_in = std::max({link_in, now, out_done}) + w.copy_in(j);
    ready[j] = link_in;
  };
  double freed = 0;  // what the blocks above, through their backward, kept
  for (int i = w.n - 1; i >= 0; --i) {
    for (int j = i; w.prefetch_blocks > 0 && j >= std::max(0, i - w.prefetch_blocks); --j)
      if (to_host(w.mix[j])) fetch(j, bw.t);
    if (to_host(w.mix[i])) {
      fetch(i, bw.t);
      const auto k = static_cast<int>(std::find(w.off.begin(), w.off.end(), i) - w.off.begin());
      for (int j = k - 1; j >= std::max(0, k - w.in.prefetch); --j) fetch(w.off[j], bw.t);
      if (ready[i] > bw.t) {
        bw.wait += ready[i] - bw.t;
        bw.t = ready[i];
      }
    }
    double back = 0;
    for (const auto& [j, when] : ready)
      if (j <= i) back += w.moved[j];
    bw.held = std::max(bw.held, back + w.regrown(i) + w.codec(i, w.decoded) - freed);
    freed += w.resident(i);
    bw.t += w.in.t_bwd_s + w.recompute(i);
  }
  return bw;
}

// Copy-out bytes the allocator still counts when the head and the loss allocate, with the host
// at most d = host_lead_blocks blocks ahead of the device: the engine drops a tensor's device copy
// (its only reference; no record_stream) as soon as the host sees its copy done, and at the last
// block's end it waits for the device to begin block n - d, so every copy that ends before that
// start is back with the allocator. The later ones are counted whole, at most the window.
double copy_out_held_bytes(const mix_walk& w, const forward_walk& f) {
  const int k = w.n - w.in.host_lead_blocks;
  const double seen = k >= w.n ? f.t : f.starts[static_cast<std::size_t>(std::max(0, k))];
  double held = 0;
  for (const auto& [j, end] : f.outs)
    if (end > seen) held += w.moved[j];
  return std::min(held, w.window);
}

// The most the device holds beside other_bytes and what the blocks keep: the largest recompute
// (which also stands for what the head and the loss add when the forward ends, where other_bytes
// is anchored), and beside it what the copy-out window still holds then, or the blocks fetched
// back in backward. A kept compressed block's backward decodes into what the loss and the
// recompute freed (measured on the engine's fp8-kept mixes, within 1.5% without a term for it);
// a compressed block fetched back from the host decodes beside what the device still holds.
double transient_bytes(const mix_walk& w, double held, double at_loss, bool decodes_fetched) {
  auto base = static_cast<double>(w.in.loss_bytes);
  for (int i = 0; i < w.n; ++i)
    if (!to_host(w.mix[i])) base = std::max(base, w.regrown(i));
  double transient = base;
  if (!w.off.empty() && w.prefetch_blocks > 0) {
    // The allocator counts on the host, which runs ahead of the device: when the head and the
    // loss allocate, the engine has not yet seen the last copies out complete and holds up to
    // its window of them.
    transient = std::max(base + at_loss, held);
  } else if (!w.off.empty()) {
    // A block fetched with the `prefetch` offloaded blocks below it, beside what it regrows.
    const auto n_off = static_cast<int>(w.off.size());
    for (int k = 0; k < n_off; ++k) {
      double fetched = w.regrown(w.off[k]) + w.codec(w.off[k], w.decoded);
      for (int j = k; j >= std::max(0, k - w.in.prefetch); --j) fetched += w.moved[w.off[j]];
      transient = std::max(transient, fetched);
    }
    transient = std::max(transient, base + at_loss);
  }
  if (decodes_fetched) transient = std::max(transient, w.decoded);
  return transient;
}

}  // namespace

offload_estimate simulate_offload(const std::vector<block_policy>& mix, const offload_inputs& in) {
  const mix_walk w(mix, in);
  const forward_walk f = walk_forward(w);
  const backward_walk bw = walk_backward(w, f);

  offload_estimate e;
  const int n_ck = w.count(block_policy::checkpoint) + w.count(block_policy::checkpoint_offload);
  const int n_sel = w.count(block_policy::selective) + w.count(block_policy::selective_offload);
  const int n_codec = w.count(block_policy::keep) + w.count(block_policy::offload);
  e.compute_s = w.n * (in.t_fwd_s + in.t_bwd_s) + n_ck * in.t_fwd_s + n_sel * in.t_selective_s +
                n_codec * (in.pack_s + in.unpack_s) +
                n_sel * (in.selective_pack_s + in.selective_unpack_s) + in.other_time_s;
  e.step_time_s = bw.t + in.other_time_s;
  double moved_all = 0;
  for (const int j : w.off) {
    e.copy_s += w.copy_out(j) + w.copy_in(j);
    moved_all += w.moved[j];
  }
  e.exposed_copy_s = f.stall + bw.wait;
  e.overlap = e.copy_s > 0 ? 1.0 - e.exposed_copy_s / e.copy_s : 1.0;
  double kept = 0;
  for (int i = 0; i < w.n; ++i) kept += w.resident(i);
  // What the copy-out window still holds at the loss: all of it (up to the window) unless the
  // engine bounds the host's lead.
  const double at_loss = in.host_lead_blocks > 0 && in.prefetch_blocks > 0
                             ? copy_out_held_bytes(w, f)
                             : std::min(w.window, moved_all);
  const double transient = transient_bytes(w, bw.held, at_loss, w.count(block_policy::offload) > 0);
  e.device_peak_bytes =
      static_cast<std::uint64_t>(static_cast<double>(in.other_bytes) + kept + transient);
  e.host_pinned_bytes = static_cast<std::uint64_t>(moved_all);
  e.window_bytes = static_cast<std::uint64_t>(w.window);
  e.prefetch_blocks = w.prefetch_blocks;
  e.host_lead_blocks = in.prefetch_blocks > 0 ? in.host_lead_blocks : 0;
  e.held_at_loss_bytes = static_cast<std::uint64_t>(at_loss);
  return e;
}

std::uint64_t allocator_cache_bytes(const std::vector<block_policy>& mix,
                                    const offload_inputs& in) noexcept {
  const bool recomputes = std::any_of(mix.begin(), mix.end(),
                                      [](block_policy b) { return recomputed(b) || selective(b); });
  return recomputes ? in.cache_bytes : in.cache_bytes_without_recompute;
}

double ranked_step_s(const offload_estimate& e, const offload_inputs& in) noexcept {
  return e.step_time_s + in.copy_interference * (e.copy_s - e.exposed_copy_s);
}

std::vector<block_policy> arrange_mix(int n_blocks, int n_offload, int n_checkpoint) {
  return arrange_mix(n_blocks, mix_counts{n_offload, n_checkpoint, 0, 0});
}

std::vector<block_policy> arrange_mix(int n_blocks, const mix_counts& c, bool from_top) {
  const int to_host_n = c.offload + c.selective_offload;
  const int span = to_host_n + c.checkpoint + c.selective;
  if (std::min({c.offload, c.checkpoint, c.selective, c.selective_offload}) < 0 || span > n_blocks)
    throw invalid_input(fmt::format(
        "offload mix: {} offloaded + {} checkpointed + {} selective + {} selective-offload blocks "
        "exceed {} blocks",
        c.offload, c.checkpoint, c.selective, c.selective_offload, n_blocks));
  std::vector<block_policy> mix(static_cast<std::size_t>(n_blocks), block_policy::keep);
  std::vector<int> host;
  host.reserve(static_cast<std::size_t>(to_host_n));
  for (int k = 0; k < to_host_n; ++k)
    host.push_back(from_top ? span - 1 - (k * span) / to_host_n : (k * span) / to_host_n);
  // Of the blocks not copied, checkpointed ones first, then selective ones.
  int rest = 0;
  for (int i = 0; i < span; ++i) {
    if (std::find(host.begin(), host.end(), i) != host.end()) continue;
    mix[i] = rest++ < c.checkpoint ? block_policy::checkpoint : block_policy::selective;
  }
  for (int k = 0; k < to_host_n; ++k) mix[host[k]] = block_policy::selective_offload;
  for (int k = 0; k < c.offload; ++k)
    mix[host[(k * to_host_n) / c.offload]] = block_policy::offload;
  return mix;
}

std::optional<offload_choice> choose_offload_mix(int n_blocks, std::uint64_t capacity_bytes,
                                                 const offload_inputs& in, mix_search search) {
  std::optional<offload_choice> best;
  const bool offload = search == mix_search::offload_and_checkpoint;
  const bool sel = in.selective_bytes > 0;
  mix_counts c;
  for (c.offload = 0; c.offload <= (offload ? n_blocks : 0); ++c.offload) {
    const int after_off = n_blocks - c.offload;
    for (c.selective_offload = 0; c.selective_offload <= (offload && sel ? after_off : 0);
         ++c.selective_offload) {
      const int after_soff = after_off - c.selective_offload;
      for (c.checkpoint = 0; c.checkpoint <= after_soff; ++c.checkpoint) {
        for (c.selective = 0; c.selective <= (sel ? after_soff - c.checkpoint : 0); ++c.selective) {
          // With compression (pack_s > 0) a mix without a block that keeps or offloads its
          // tensors, nor (selective_pack_s > 0) a selective one, compresses nothing (it is the
          // lossless mix): skipped.
          const bool sel_codec = in.selective_pack_s > 0 && c.selective + c.selective_offload > 0;
          if (in.pack_s > 0 && !sel_codec && c.offload == 0 &&
              after_soff - c.checkpoint - c.selective == 0)
            continue;
          for (const bool from_top : {false, true}) {
            if (from_top && c.offload + c.selective_offload == 0) break;
            // Each arrangement as it is, and with every checkpointed block's input on the host
            // (what full checkpointing keeps on the device, freed for what saves time).
            for (const bool inputs_out : {false, true}) {
              if (inputs_out && (!offload || c.checkpoint == 0)) break;
              auto mix = arrange_mix(n_blocks, c, from_top);
              if (inputs_out)
                std::replace(mix.begin(), mix.end(), block_policy::checkpoint,
                             block_policy::checkpoint_offload);
              const auto e = simulate_offload(mix, in);
              if (e.device_peak_bytes + allocator_cache_bytes(mix, in) > capacity_bytes) continue;
              const double t = ranked_step_s(e, in);
              if (!best ||
                  std::pair(t, e.host_pinned_bytes) < std::pair(ranked_step_s(best->estimate, in),
                                                                best->estimate.host_pinned_bytes))
                best = offload_choice{std::move(mix), e};
            }
          }
        }
      }
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
  if (!count.empty() && count.find_first_not_of("ockshx") == std::string_view::npos) {
    for (const char c : count) o.mix.push_back(*policy_of_letter(c));
    if (n_blocks > 0 && static_cast<int>(o.mix.size()) != n_blocks)
      throw bad(fmt::format("the mix names {} blocks; the model has {}", o.mix.size(), n_blocks));
    o.activation_blocks = static_cast<int>(std::count_if(o.mix.begin(), o.mix.end(), to_host));
    return o;
  }
  if (!count.empty() || value.back() == ':') {
    int n = 0;
    const auto* end = count.data() + count.size();
    const auto [p, ec] = std::from_chars(count.data(), end, n);
    if (ec != std::errc{} || p != end || n < 1)
      throw bad(
          "N must be a whole number of blocks, at least 1, or a mix of o, c, k, s, h and x per "
          "block");
    if (n_blocks > 0 && n > n_blocks)
      throw bad(fmt::format("N is larger than the model's {} blocks", n_blocks));
    o.activation_blocks = n;
  }
  return o;
}

}  // namespace vramkit::plan

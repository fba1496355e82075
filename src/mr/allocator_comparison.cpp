// allocator_comparison: one replay loop per allocator kind; vramkit's pools on a host_sim_device
// that commits no pages, the PyTorch allocators through plan's models.
#include "vramkit/mr/allocator_comparison.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "vramkit/core/device_api_wrapper.hpp"
#include "vramkit/core/error.hpp"
#include "vramkit/core/host_sim_device.hpp"
#include "vramkit/core/units.hpp"
#include "vramkit/mr/device_api_resource.hpp"
#include "vramkit/mr/pool_resource.hpp"
#include "vramkit/mr/vmm_pool_resource.hpp"
#include "vramkit/plan/caching_allocator_model.hpp"
#include "vramkit/plan/expandable_segments_model.hpp"

namespace vramkit::mr {
namespace {

// Capacity of the simulated device when none is asked for: larger than any trace's step.
constexpr std::uint64_t unbounded_capacity = std::uint64_t{1} << 40;

// The pool vramkit's C API builds unless VRAMKIT_POOL_KIND says otherwise (c_api.cpp).
constexpr const char* library_default = "vramkit_vmm_pool";

struct live_tracker {
  std::uint64_t live = 0, peak = 0;
  void add(std::uint64_t n) {
    live += n;
    peak = std::max(peak, live);
  }
  void remove(std::uint64_t n) { live -= n; }
};

void note_failure(allocator_replay_result& r, unsigned pass, std::size_t index, std::uint64_t bytes,
                  std::uint64_t live) {
  if (r.first_failure_event != 0) return;
  r.first_failure_pass = pass + 1;
  r.first_failure_event = index + 1;
  r.first_failure_bytes = bytes;
  r.first_failure_live_bytes = live;
}

// The simulated device with every event complete as soon as it is recorded: a replay runs no
// kernels, so the work before any event is done at once, and the vmm pool's use of events (which
// frees it may remap without synchronizing) no longer depends on the simulated streams' threads:
// the same trace gives the same figures every time.
class instant_events final : public device_api_wrapper {
 public:
  using device_api_wrapper::device_api_wrapper;
  void record_event(event_view e, stream_view s) override {
    device_api_wrapper::record_event(e, s);
    device_api_wrapper::synchronize_event(e);
  }
};

// The trace's ids in the order a replay frees the blocks a pass leaves live: allocation order,
// as a Python replayer that clears its dict of tensors frees them.
std::vector<std::uint64_t> allocation_order(const trace& t) {
  std::vector<std::uint64_t> ids;
  for (const trace_event& e : t.events) {
    if (e.op == trace_event::op_t::allocate) ids.push_back(e.id);
  }
  return ids;
}

allocator_replay_result replay_vramkit(const trace& t, const std::string& name,
                                       const comparison_options& options) {
  allocator_replay_result r;
  r.name = name;
  host_sim_options d;
  d.device_memory_bytes = options.capacity_bytes.value_or(unbounded_capacity);
  d.poison_byte = -1;
  d.commit_physical = false;
  auto dev = std::make_shared<host_sim_device>(d);
  std::vector<std::unique_ptr<owned_stream>> streams;
  for (std::uint32_t i = 1; i < std::max<std::uint32_t>(t.stream_count(), 1); ++i) {
    streams.push_back(std::make_unique<owned_stream>(*dev));
  }
  auto stream_of = [&](std::uint32_t s) { return s == 0 ? stream_view{} : streams[s - 1]->view(); };
  std::shared_ptr<memory_resource> pool;
  std::shared_ptr<vmm_pool_resource> vmm;
  std::shared_ptr<pool_resource> classic;
  if (name == "vramkit_vmm_pool") {
    vmm_pool_options o;
    o.address_space_bytes = 2 * d.device_memory_bytes;
    vmm = std::make_shared<vmm_pool_resource>(std::make_shared<instant_events>(dev), o);
    pool = vmm;
  } else {
    classic = std::make_shared<pool_resource>(std::make_shared<device_api_resource>(dev), dev);
    pool = classic;
  }
  auto report = [&] { return vmm ? vmm->report() : classic->report(); };
  const std::vector<std::uint64_t> order = allocation_order(t);
  std::unordered_map<std::uint64_t, std::pair<void*, std::uint64_t>> live;
  live_tracker requested;
  bool failed = false;
  for (unsigned pass = 0; pass < options.passes && !failed; ++pass) {
    for (std::size_t i = 0; i < t.events.size() && !failed; ++i) {
      const trace_event& e = t.events[i];
      if (e.op == trace_event::op_t::allocate) {
        try {
          void* p = pool->allocate(e.bytes, default_alignment, stream_of(e.stream));
          live[e.id] = {p, e.bytes};
          requested.add(e.bytes);
        } catch (const std::bad_alloc&) {
          note_failure(r, pass, i, e.bytes, requested.live);
          failed = true;  // the pool cannot serve the rest as it would be served
        }
      } else {
        auto it = live.find(e.id);
        pool->deallocate(it->second.first, it->second.second, default_alignment,
                         stream_of(e.stream));
        requested.remove(it->second.second);
        live.erase(it);
      }
    }
    r.pass_peak_reserved_bytes.push_back(
        static_cast<std::uint64_t>(report().reserved_bytes.all.peak));
    for (const std::uint64_t id : order) {
      auto it = live.find(id);
      if (it == live.end()) continue;
      pool->deallocate(it->second.first, it->second.second, default_alignment, {});
      requested.remove(it->second.second);
      live.erase(it);
    }
  }
  const pool_report rep = report();
  r.peak_requested_bytes = requested.peak;
  r.peak_reserved_bytes = static_cast<std::uint64_t>(rep.reserved_bytes.all.peak);
  r.segments = static_cast<std::uint64_t>(rep.chunks.all.peak);
  r.remaps = rep.vmm.granules_remapped;
  if (options.capacity_bytes) r.fits = !failed;
  return r;
}

template <typename Model>
allocator_replay_result replay_model(const trace& t, const std::string& name,
                                     const comparison_options& options) {
  allocator_replay_result r;
  r.name = name;
  r.is_model = true;
  Model model;
  if (options.capacity_bytes) model.set_capacity(*options.capacity_bytes);
  const std::vector<std::uint64_t> order = allocation_order(t);
  std::unordered_map<std::uint64_t, std::pair<std::uint32_t, std::uint64_t>> live;
  live_tracker requested;
  std::uint64_t segments_peak = 0;
  for (unsigned pass = 0; pass < options.passes; ++pass) {
    for (std::size_t i = 0; i < t.events.size(); ++i) {
      const trace_event& e = t.events[i];
      if (e.op == trace_event::op_t::allocate) {
        const std::size_t ooms = model.out_of_memory_count();
        std::uint32_t h = 0;
        if constexpr (std::is_same_v<Model, plan::expandable_segments_model>) {
          h = model.malloc(e.bytes, e.stream);
        } else {
          h = model.malloc(e.bytes);  // the native model keeps one stream's pools
        }
        if (model.out_of_memory_count() != ooms) note_failure(r, pass, i, e.bytes, requested.live);
        live[e.id] = {h, e.bytes};
        requested.add(e.bytes);
        segments_peak = std::max<std::uint64_t>(segments_peak, model.segment_count());
      } else {
        auto it = live.find(e.id);
        model.free(it->second.first);
        requested.remove(it->second.second);
        live.erase(it);
      }
    }
    r.pass_peak_reserved_bytes.push_back(model.peak_reserved_bytes());
    for (const std::uint64_t id : order) {
      auto it = live.find(id);
      if (it == live.end()) continue;
      model.free(it->second.first);
      requested.remove(it->second.second);
      live.erase(it);
    }
  }
  r.peak_requested_bytes = requested.peak;
  r.peak_reserved_bytes = model.peak_reserved_bytes();
  r.segments = segments_peak;
  if (options.capacity_bytes) r.fits = model.out_of_memory_count() == 0;
  return r;
}

}  // namespace

std::vector<std::string> comparable_allocators() {
  return {"vramkit_vmm_pool", "vramkit_pool", "pytorch_native", "pytorch_expandable_segments"};
}

std::vector<allocator_replay_result> compare_allocators(const trace& t,
                                                        const comparison_options& options) {
  if (options.passes < 1 || options.passes > max_replay_passes) {
    throw invalid_input("passes must be 1 to " + std::to_string(max_replay_passes) + " (got " +
                        std::to_string(options.passes) + ")");
  }
  const std::vector<std::string> known = comparable_allocators();
  std::vector<std::string> names = options.allocators.empty() ? known : options.allocators;
  for (const auto& n : names) {
    if (std::find(known.begin(), known.end(), n) == known.end()) {
      throw invalid_input("unknown allocator '" + n + "' (known: vramkit_vmm_pool, vramkit_pool, " +
                          "pytorch_native, pytorch_expandable_segments, all)");
    }
  }
  std::vector<allocator_replay_result> out;
  for (const auto& n : names) {
    allocator_replay_result r;
    if (n == "pytorch_native") {
      r = replay_model<plan::caching_allocator_model>(t, n, options);
    } else if (n == "pytorch_expandable_segments") {
      r = replay_model<plan::expandable_segments_model>(t, n, options);
    } else {
      r = replay_vramkit(t, n, options);
    }
    r.is_default = n == library_default;
    out.push_back(std::move(r));
  }
  return out;
}

std::string comparison_to_json(const std::vector<allocator_replay_result>& results,
                               const comparison_options& options) {
  nlohmann::json j;
  j["schema_version"] = 1;
  j["passes"] = options.passes;
  if (options.capacity_bytes) j["capacity_bytes"] = *options.capacity_bytes;
  j["allocators"] = nlohmann::json::array();
  for (const auto& r : results) {
    nlohmann::json a;
    a["name"] = r.name;
    if (r.is_default) a["default"] = true;
    a["model"] = r.is_model;
    a["peak_requested_bytes"] = r.peak_requested_bytes;
    a["peak_reserved_bytes"] = r.peak_reserved_bytes;
    a["reserved_over_requested"] = r.ratio();
    a["segments"] = r.segments;
    a["remaps"] = r.remaps;
    a["pass_peak_reserved_bytes"] = r.pass_peak_reserved_bytes;
    if (r.fits) {
      a["fits"] = *r.fits;
      if (!*r.fits) {
        a["first_failure"] = {{"pass", r.first_failure_pass},
                              {"event", r.first_failure_event},
                              {"bytes", r.first_failure_bytes},
                              {"live_requested_bytes", r.first_failure_live_bytes}};
      }
    }
    j["allocators"].push_back(a);
  }
  return j.dump(2);
}

std::string comparison_to_table(const std::vector<allocator_replay_result>& results,
                                const comparison_options& options) {
  std::string out = fmt::format("{:<30} {:>14} {:>14} {:>7} {:>9} {:>7}", "allocator",
                                "peak requested", "peak reserved", "ratio", "segments", "remaps");
  if (options.capacity_bytes) out += "  fits";
  out += "\n";
  for (const auto& r : results) {
    const std::string name = r.name + (r.is_default ? " (default)" : "") + (r.is_model ? " *" : "");
    out += fmt::format("{:<30} {:>14} {:>14} {:>7.3f} {:>9} {:>7}", name,
                       format_bytes(static_cast<double>(r.peak_requested_bytes)),
                       format_bytes(static_cast<double>(r.peak_reserved_bytes)), r.ratio(),
                       r.segments, r.remaps);
    if (r.fits) {
      out += *r.fits
                 ? "  yes"
                 : fmt::format("  no: {}event {} ({} with {} live)",
                               options.passes > 1 ? fmt::format("pass {}, ", r.first_failure_pass)
                                                  : std::string(),
                               r.first_failure_event,
                               format_bytes(static_cast<double>(r.first_failure_bytes)),
                               format_bytes(static_cast<double>(r.first_failure_live_bytes)));
    }
    out += "\n";
  }
  if (options.passes > 1) {
    out += fmt::format("peaks over {} passes of the trace, back to back\n", options.passes);
  }
  out += "* a model of PyTorch's allocator (vramkit::plan), not PyTorch itself\n";
  return out;
}

}  // namespace vramkit::mr

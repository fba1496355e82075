// Prints the planner's schedule of one ground-truth case as the allocator model replays it, to
// set beside a PyTorch allocator trace of the same run (measure_ground_truth.py --trace-peak):
// every event of at least --min-mib MiB (alloc or free, its label, step, phase and layer, the
// allocated and reserved bytes after it), each new segment the model creates and the request
// that made it, and the tensors live at the allocated peak.
// With --live-at EVENT, every tensor live at that event with the segment it is in. With --raw,
// every event instead as one tab-separated line of exact figures for a script to align with the
// trace:
// index, A or F, bytes, segment number (in creation order), offset in it, step, phase, layer,
// label.
// Usage: plan_schedule GROUND_TRUTH_JSON CASE_NAME [--min-mib N] [--live-at EVENT] [--raw]
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "vramkit/core/error.hpp"
#include "vramkit/plan/caching_allocator_model.hpp"
#include "vramkit/plan/ground_truth.hpp"
#include "vramkit/plan/training_schedule.hpp"

using namespace vramkit::plan;

namespace {

double mib(std::uint64_t b) { return static_cast<double>(b) / (1 << 20); }

void print_raw(const schedule& s) {
  caching_allocator_model a;
  std::vector<std::uint32_t> handle(s.tensors.size(), 0);
  std::map<std::uint64_t, int> seg_id;  // segment base address -> creation number
  const auto where = [&](std::uint32_t h) {
    const std::uint64_t base = a.segment_of(h);
    return std::make_pair(base == 0 ? -1 : seg_id[base], base == 0 ? 0 : a.address_of(h) - base);
  };
  for (std::size_t i = 0; i < s.events.size(); ++i) {
    const auto& e = s.events[i];
    const auto& t = s.tensors[e.tensor];
    std::pair<int, std::uint64_t> at{-1, 0};
    if (e.alloc) {
      const std::size_t segments = a.segment_count();
      handle[e.tensor] = a.malloc(e.bytes);
      if (a.segment_count() > segments) {
        const int n = static_cast<int>(seg_id.size());
        seg_id[a.segment_of(handle[e.tensor])] = n;
      }
      at = where(handle[e.tensor]);
    } else {
      at = where(handle[e.tensor]);
      a.free(handle[e.tensor]);
    }
    std::printf("%zu\t%c\t%llu\t%d\t%llu\t%d\t%s\t%d\t%s\n", i, e.alloc ? 'A' : 'F',
                static_cast<unsigned long long>(e.bytes), at.first,
                static_cast<unsigned long long>(at.second), t.step, to_string(t.ph), t.layer,
                t.label);
  }
}

void print(const schedule& s, double min_mib, std::size_t at_event) {
  caching_allocator_model a;
  std::vector<std::uint32_t> handle(s.tensors.size(), 0);
  std::vector<char> live(s.tensors.size(), 0);
  std::uint64_t best = 0;
  std::vector<char> at_peak;
  std::size_t peak_event = 0;
  std::map<std::uint64_t, int> seg_id;  // segment base address -> creation number
  int next_seg = 0;
  for (std::size_t i = 0; i < s.events.size(); ++i) {
    const auto& e = s.events[i];
    const auto& t = s.tensors[e.tensor];
    const std::size_t segments = a.segment_count();
    const std::uint64_t reserved = a.reserved_bytes();
    if (e.alloc) {
      handle[e.tensor] = a.malloc(e.bytes);
      live[e.tensor] = 1;
    } else {
      a.free(handle[e.tensor]);
      live[e.tensor] = 0;
    }
    if (a.allocated_bytes() > best) {
      best = a.allocated_bytes();
      at_peak = live;
      peak_event = i;
    }
    const bool segment = a.segment_count() > segments;
    if (i == at_event) {
      std::printf("--- live tensors at event %zu by segment ---\n", i);
      for (std::size_t k = 0; k < live.size(); ++k)
        if (live[k] && k != e.tensor)
          std::printf("  seg %3d %9.2f MiB  step %d %-14s layer %3d  %s\n",
                      seg_id[a.segment_of(handle[k])], mib(s.tensors[k].bytes), s.tensors[k].step,
                      to_string(s.tensors[k].ph), s.tensors[k].layer, s.tensors[k].label);
    }
    if (e.alloc && segment) seg_id[a.segment_of(handle[e.tensor])] = next_seg++;
    if (mib(e.bytes) >= min_mib || segment)
      std::printf(
          "%7zu %-5s %9.1f MiB  seg %3d  step %d %-14s layer %3d  %-40s alloc %9.1f res %9.1f%s\n",
          i, e.alloc ? "alloc" : "free", mib(e.bytes),
          e.alloc ? seg_id[a.segment_of(handle[e.tensor])] : -1, t.step, to_string(t.ph), t.layer,
          t.label, mib(a.allocated_bytes()), mib(a.reserved_bytes()),
          segment ? (" NEW SEGMENT +" + std::to_string(mib(a.reserved_bytes() - reserved))).c_str()
                  : "");
  }
  std::printf("\nallocated peak %.1f MiB at event %zu, reserved peak %.1f MiB; live there:\n",
              mib(best), peak_event, mib(a.peak_reserved_bytes()));
  for (std::size_t k = 0; k < at_peak.size(); ++k)
    if (at_peak[k] && mib(s.tensors[k].bytes) >= min_mib)
      std::printf("  %9.1f MiB  step %d %-14s layer %3d  %s\n", mib(s.tensors[k].bytes),
                  s.tensors[k].step, to_string(s.tensors[k].ph), s.tensors[k].layer,
                  s.tensors[k].label);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr,
                 "usage: plan_schedule GROUND_TRUTH_JSON CASE_NAME [--min-mib N] [--live-at EVENT] "
                 "[--raw]\n");
    return 2;
  }
  double min_mib = 8;
  auto at_event = static_cast<std::size_t>(-1);
  bool raw = false;
  for (int i = 3; i < argc; ++i) {
    if (std::strcmp(argv[i], "--min-mib") == 0 && i + 1 < argc) {
      min_mib = std::atof(argv[++i]);
    } else if (std::strcmp(argv[i], "--raw") == 0) {
      raw = true;
    } else if (std::strcmp(argv[i], "--live-at") == 0 && i + 1 < argc) {
      at_event = static_cast<std::size_t>(std::atoll(argv[++i]));
    } else {
      std::fprintf(stderr, "plan_schedule: unknown option %s\n", argv[i]);
      return 2;
    }
  }
  try {
    for (const auto& c : load_ground_truth(argv[1]).cases) {
      if (c.name != argv[2]) continue;
      auto r = c.request;
      r.validate(c.model);
      if (raw)
        print_raw(build_schedule(c.model, r));
      else
        print(build_schedule(c.model, r), min_mib, at_event);
      return 0;
    }
    std::fprintf(stderr, "plan_schedule: no case %s in %s\n", argv[2], argv[1]);
    return 2;
  } catch (const vramkit::error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}

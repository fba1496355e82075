// torch.cuda.memory._snapshot()'s structure from a pool's layout and a tracer's events; field
// names as PyTorch's CUDA caching allocator writes them (torch/csrc/cuda/memory_snapshot.cpp).
#include "vramkit/mr/pool_layout.hpp"

#include <nlohmann/json.hpp>

namespace vramkit::mr {

std::string torch_snapshot_json(const std::vector<pool_segment_info>& segments, int device,
                                int device_count, const std::vector<traced_event>* events) {
  using nlohmann::json;
  json segs = json::array();
  for (const pool_segment_info& s : segments) {
    std::size_t allocated = 0;
    std::size_t requested = 0;
    json blocks = json::array();
    for (const pool_block_info& b : s.blocks) {
      if (b.allocated) {
        allocated += b.size;
        requested += b.requested_bytes;
      }
      blocks.push_back({{"address", b.address},
                        {"size", b.size},
                        {"requested_size", b.allocated ? b.requested_bytes : b.size},
                        {"state", b.allocated ? "active_allocated" : "inactive"},
                        {"frames", json::array()}});
    }
    segs.push_back({{"device", device},
                    {"address", s.address},
                    {"total_size", s.size},
                    {"allocated_size", allocated},
                    {"active_size", allocated},
                    {"requested_size", requested},
                    {"stream", 0},
                    {"segment_type", s.small ? "small" : "large"},
                    {"segment_pool_id", json::array({0, 0})},
                    {"is_expandable", s.expandable},
                    {"frames", json::array()},
                    {"blocks", std::move(blocks)}});
  }
  json traces = json::array();
  for (int d = 0; d < std::max(device_count, device + 1); ++d) {
    json t = json::array();
    if (d == device && events != nullptr) {
      for (const traced_event& e : *events) {
        const auto entry = [&](const char* action) {
          t.push_back({{"action", action},
                       {"addr", e.address},
                       {"size", e.event.bytes},
                       {"stream", e.event.stream},
                       {"time_us", e.event.time_ns / 1000},
                       {"frames", json::array()}});
        };
        if (e.event.op == trace_event::op_t::allocate) {
          entry("alloc");
        } else {
          entry("free_requested");
          entry("free_completed");
        }
      }
    }
    traces.push_back(std::move(t));
  }
  json doc = {{"segments", std::move(segs)},
              {"device_traces", std::move(traces)},
              {"allocator_settings", json::object()}};
  return doc.dump();
}

}  // namespace vramkit::mr

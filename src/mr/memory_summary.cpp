// memory_summary: walks a resource stack and renders its figures as a 75-column table (after
// torch.cuda.memory_summary()) or as JSON with PyTorch's memory_stats() key names.
#include "vramkit/mr/memory_summary.hpp"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "vramkit/core/json_fields.hpp"
#include "vramkit/core/units.hpp"

namespace vramkit::mr {

// pool_report::vmm as JSON (found by argument-dependent lookup, hence outside the anonymous
// namespace): the virtual-memory figures, each under its member's name (the flag `present` says
// whether they apply, and is not one of them).
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(pool_report::vmm_figures, granularity, cached_bytes,
                                   granules_mapped, granules_unmapped, granules_remapped,
                                   physical_creates, physical_releases, defragmentations, map_ns,
                                   unmap_ns, growth_syncs, growth_sync_ns)

namespace {

constexpr int inner_width = 75;

std::string rule(char c) { return "|" + std::string(inner_width, c) + "|\n"; }

std::string text_line(const std::string& text) {
  std::string t = text.size() > inner_width - 2 ? text.substr(0, inner_width - 2) : text;
  return "| " + t + std::string(inner_width - 2 - t.size(), ' ') + " |\n";
}

std::string centered(const std::string& text) {
  std::string t = text.size() > inner_width ? text.substr(0, inner_width) : text;
  const std::size_t left = (inner_width - t.size()) / 2;
  return "|" + std::string(left, ' ') + t + std::string(inner_width - left - t.size(), ' ') + "|\n";
}

// "%6d UNIT" in 10 columns; the unit is chosen per value (B, KiB, MiB, GiB, TiB).
std::string size_cell(std::int64_t v) {
  static const char* units[] = {"B  ", "KiB", "MiB", "GiB", "TiB"};
  auto x = static_cast<double>(v);
  int u = 0;
  while (u < 4 && (x >= 768.0 * 1024.0 || x <= -768.0 * 1024.0)) {
    x /= 1024.0;
    ++u;
  }
  if (u < 4 && (x >= 9999.5 || x <= -9999.5)) {
    x /= 1024.0;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%6.0f %s", x, units[u]);
  return buf;
}

std::string count_cell(std::int64_t v) {
  char buf[32];
  if (v >= 100000000 || v <= -100000000) {
    std::snprintf(buf, sizeof buf, "%8" PRId64 " M", v / 1000000);
  } else {
    std::snprintf(buf, sizeof buf, "%10" PRId64, v);
  }
  return buf;
}

std::string row(const std::string& label, const usage_counter& c, bool bytes) {
  auto cell = [&](std::int64_t v) { return bytes ? size_cell(v) : count_cell(v); };
  char buf[160];
  std::snprintf(buf, sizeof buf, "| %-21s | %10s | %10s | %10s | %10s |\n", label.c_str(),
                cell(c.current).c_str(), cell(c.peak).c_str(), cell(c.total_in).c_str(),
                cell(c.total_out).c_str());
  return buf;
}

std::string class_rows(const std::string& label, const class_counter& c, bool bytes) {
  return row(label, c.all, bytes) + row("      from large pool", c.large, bytes) +
         row("      from small pool", c.small, bytes);
}

std::string two_columns(const std::string& a, const std::string& b) {
  std::string left = a.substr(0, 35);
  left += std::string(35 - left.size(), ' ');
  std::string right = b.substr(0, 37);
  right += std::string(37 - right.size(), ' ');
  return "| " + left + "| " + right + "|\n";
}

std::string fmt_bytes(std::size_t v) { return format_bytes(static_cast<double>(v)); }

std::string ratio(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", v);
  return buf;
}

double reserved_over_peak(const pool_report& p) {
  return p.allocated_bytes.all.peak > 0 ? static_cast<double>(p.reserved_bytes.all.peak) /
                                              static_cast<double>(p.allocated_bytes.all.peak)
                                        : 0.0;
}

double free_fragmentation(const pool_report& p) {
  return p.free_bytes > 0
             ? 1.0 - static_cast<double>(p.largest_free_block) / static_cast<double>(p.free_bytes)
             : 0.0;
}

const char* header_row =
    "|        Metric         | Cur Usage  | Peak Usage | Tot Alloc  | Tot Freed  |\n";

std::string render_pool(const pool_report& p) {
  std::string out;
  out += centered(p.resource);
  out += rule('-');
  out += two_columns("out-of-memory errors: " + std::to_string(p.out_of_memory_errors),
                     "upstream allocs / frees: " + std::to_string(p.upstream_allocations) + " / " +
                         std::to_string(p.upstream_frees));
  out +=
      two_columns("upstream failures: " + std::to_string(p.upstream_failures),
                  "trims: " + std::to_string(p.trims) + "   streams: " + std::to_string(p.streams));
  out += two_columns("cross-stream waits: " + std::to_string(p.cross_stream_waits),
                     "misuse reports: " + std::to_string(p.misuse_reports));
  if (p.vmm.present) {
    const auto& v = p.vmm;
    out += two_columns("granule: " + fmt_bytes(v.granularity),
                       "cached unmapped: " + fmt_bytes(v.cached_bytes));
    out += two_columns("granules mapped / unmapped: " + std::to_string(v.granules_mapped) + " / " +
                           std::to_string(v.granules_unmapped),
                       "remapped: " + std::to_string(v.granules_remapped) +
                           "   defrags: " + std::to_string(v.defragmentations));
    out += two_columns("physical creates / releases: " + std::to_string(v.physical_creates) +
                           " / " + std::to_string(v.physical_releases),
                       "map / unmap time: " + std::to_string(v.map_ns / 1000) + " / " +
                           std::to_string(v.unmap_ns / 1000) + " us");
    out += two_columns("syncs before a remap: " + std::to_string(v.growth_syncs),
                       "their time: " + std::to_string(v.growth_sync_ns / 1000) + " us");
  }
  out += rule('=');
  out += header_row;
  out += rule('-');
  out += class_rows("Allocated memory", p.allocated_bytes, true);
  out += rule('-');
  out += class_rows("Requested memory", p.requested_bytes, true);
  out += rule('-');
  out += class_rows("Reserved memory", p.reserved_bytes, true);
  out += rule('-');
  out += class_rows("Allocations", p.allocations, false);
  out += rule('-');
  out += class_rows("Reserved chunks", p.chunks, false);
  out += rule('=');
  out += two_columns("free (cached): " + fmt_bytes(p.free_bytes),
                     "free blocks: " + std::to_string(p.free_blocks));
  out += two_columns("largest free block: " + fmt_bytes(p.largest_free_block),
                     "1 - largest free / free: " + ratio(free_fragmentation(p)));
  out += two_columns("reserved / peak allocated: " + ratio(reserved_over_peak(p)),
                     "peak reserved: " + fmt_bytes(static_cast<std::size_t>(std::max<std::int64_t>(
                                             0, p.reserved_bytes.all.peak))));
  out += rule('=');
  return out;
}

std::string render_statistics(const statistics_report& s) {
  std::string out;
  out += centered(s.resource);
  out += rule('=');
  out += header_row;
  out += rule('-');
  out += class_rows("Requested memory", s.bytes, true);
  out += rule('-');
  out += class_rows("Allocations", s.allocations, false);
  out += rule('-');
  out += text_line("failed allocations: " + std::to_string(s.failed_allocations));
  out += rule('=');
  return out;
}

std::string render_limit(const limit_report& l) {
  std::string out;
  out += centered(l.resource);
  out += rule('-');
  out += two_columns("limit: " + fmt_bytes(l.limit_bytes), "in use: " + fmt_bytes(l.used_bytes));
  out += two_columns("peak: " + fmt_bytes(l.peak_bytes),
                     "rejected requests: " + std::to_string(l.rejections));
  out += rule('=');
  return out;
}

void put_counter(nlohmann::json& j, const std::string& key, const class_counter& c) {
  const std::pair<const char*, const usage_counter*> parts[] = {
      {"all", &c.all}, {"large_pool", &c.large}, {"small_pool", &c.small}};
  for (const auto& [name, u] : parts) {
    const std::string k = key + "." + name + ".";
    j[k + "current"] = u->current;
    j[k + "peak"] = u->peak;
    j[k + "allocated"] = u->total_in;
    j[k + "freed"] = u->total_out;
  }
}

nlohmann::json pool_json(const pool_report& p) {
  nlohmann::json j;
  j["resource"] = p.resource;
  put_counter(j, "allocated_bytes", p.allocated_bytes);
  put_counter(j, "requested_bytes", p.requested_bytes);
  put_counter(j, "reserved_bytes", p.reserved_bytes);
  put_counter(j, "allocation", p.allocations);
  put_counter(j, "segment", p.chunks);
  // Under torch.cuda.memory_stats()'s names where PyTorch has the figure, vramkit's own elsewhere.
  put_fields(j, p, std::pair{"inactive_split_bytes.all.current", &pool_report::free_bytes},
             std::pair{"free_blocks", &pool_report::free_blocks},
             std::pair{"largest_free_block", &pool_report::largest_free_block},
             std::pair{"num_ooms", &pool_report::out_of_memory_errors},
             std::pair{"num_alloc_retries", &pool_report::upstream_failures},
             std::pair{"num_device_alloc", &pool_report::upstream_allocations},
             std::pair{"num_device_free", &pool_report::upstream_frees},
             std::pair{"num_trims", &pool_report::trims},
             std::pair{"num_cross_stream_waits", &pool_report::cross_stream_waits},
             std::pair{"num_misuse_reports", &pool_report::misuse_reports},
             std::pair{"streams", &pool_report::streams});
  if (p.vmm.present) {
    const nlohmann::json vmm = p.vmm;
    for (const auto& [key, value] : vmm.items()) j["vmm." + key] = value;
  }
  j["fragmentation.reserved_over_peak_allocated"] = reserved_over_peak(p);
  j["fragmentation.free"] = free_fragmentation(p);
  return j;
}

}  // namespace

const char* to_string(memory_kind kind) noexcept {
  switch (kind) {
    case memory_kind::device:
      return "device";
    case memory_kind::pinned_host:
      return "pinned_host";
    case memory_kind::managed:
      return "managed";
    case memory_kind::host:
      return "host";
  }
  return "unknown";
}

summary_builder collect_summary(const memory_resource& top) {
  summary_builder b;
  for (const memory_resource* r = &top; r != nullptr; r = r->upstream()) {
    const std::size_t before = b.layers().size();
    r->describe(b);
    if (b.layers().size() == before) b.add_layer(r->name());
  }
  return b;
}

std::string memory_summary(const memory_resource& top, const std::string& title) {
  const summary_builder b = collect_summary(top);
  std::string out;
  out += rule('=');
  out += centered(title.empty() ? "vramkit memory summary" : title);
  out += rule('-');
  std::string chain;
  for (const auto& l : b.layers()) chain += (chain.empty() ? "" : " -> ") + l;
  std::string prefix = "stack: ";
  while (!chain.empty()) {
    const std::size_t take = std::min<std::size_t>(chain.size(), inner_width - 2 - prefix.size());
    out += text_line(prefix + chain.substr(0, take));
    chain.erase(0, take);
    prefix = "       ";
  }
  out += text_line(std::string("memory kind: ") + to_string(top.kind()));
  out += rule('=');
  for (const auto& l : b.reports<limit_report>()) out += render_limit(l);
  for (const auto& s : b.reports<statistics_report>()) out += render_statistics(s);
  for (const auto& p : b.reports<pool_report>()) out += render_pool(p);
  for (const auto& u : b.reports<upstream_report>()) {
    out += centered(u.resource);
    out += rule('-');
    out += two_columns("reserved: " + fmt_bytes(u.reserved_bytes),
                       "peak reserved: " + fmt_bytes(u.reserved_peak_bytes));
    out += two_columns("in use: " + fmt_bytes(u.used_bytes), "");
    out += rule('=');
  }
  for (const auto& n : b.notes()) out += text_line(n);
  if (!b.notes().empty()) out += rule('=');
  return out;
}

std::string memory_stats_json(const memory_resource& top) {
  const summary_builder b = collect_summary(top);
  nlohmann::json j;
  j["schema_version"] = 1;
  nlohmann::json layers = nlohmann::json::array();
  for (const auto& l : b.layers()) layers.push_back(l);
  j["stack"] = layers;
  nlohmann::json pools = nlohmann::json::array();
  for (const auto& p : b.reports<pool_report>()) pools.push_back(pool_json(p));
  if (!b.reports<pool_report>().empty()) {
    for (auto& [k, v] : pools[0].items()) j[k] = v;  // the first pool's figures at top level
  }
  j["pools"] = pools;
  nlohmann::json stats = nlohmann::json::array();
  for (const auto& s : b.reports<statistics_report>()) {
    nlohmann::json o;
    o["resource"] = s.resource;
    put_counter(o, "requested_bytes", s.bytes);
    put_counter(o, "allocation", s.allocations);
    o["failed_allocations"] = s.failed_allocations;
    stats.push_back(o);
  }
  j["statistics"] = stats;
  nlohmann::json limits = nlohmann::json::array();
  for (const auto& l : b.reports<limit_report>()) {
    limits.push_back({{"resource", l.resource},
                      {"limit_bytes", l.limit_bytes},
                      {"used_bytes", l.used_bytes},
                      {"peak_bytes", l.peak_bytes},
                      {"rejections", l.rejections}});
  }
  j["limits"] = limits;
  nlohmann::json ups = nlohmann::json::array();
  std::size_t device_peak = 0;
  for (const auto& p : b.reports<pool_report>()) {
    device_peak =
        std::max(device_peak,
                 static_cast<std::size_t>(std::max<std::int64_t>(0, p.reserved_bytes.all.peak)));
  }
  for (const auto& u : b.reports<upstream_report>()) {
    ups.push_back({{"resource", u.resource},
                   {"reserved_bytes", u.reserved_bytes},
                   {"reserved_peak_bytes", u.reserved_peak_bytes},
                   {"used_bytes", u.used_bytes}});
    device_peak = std::max(device_peak, u.reserved_peak_bytes);
  }
  j["upstreams"] = ups;
  // What the stack held from the device at most: the pool's peak, or an upstream cache's peak when
  // that is higher (memory the pool returned may stay cached below it).
  j["device_reserved_bytes.peak"] = device_peak;
  return j.dump();
}

void reset_peak_stats(memory_resource& top) {
  for (const memory_resource* r = &top; r != nullptr; r = r->upstream()) r->reset_peak();
}

}  // namespace vramkit::mr

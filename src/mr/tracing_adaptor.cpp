// tracing_adaptor: an in-memory event log written as Chrome trace-event JSON and compact trace.
#include "vramkit/mr/tracing_adaptor.hpp"

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "vramkit/core/error.hpp"
#include "vramkit/mr/memory_summary.hpp"

namespace vramkit::mr {
namespace {

thread_local std::string thread_tag;

void write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  if (!out) throw error("cannot write trace file '" + path + "'");
  out << text;
  out.flush();
  if (!out) throw error("writing trace file '" + path + "' failed");
}

}  // namespace

trace_tag_scope::trace_tag_scope(std::string_view tag) : previous_(thread_tag) {
  thread_tag.assign(tag);
}
trace_tag_scope::~trace_tag_scope() { thread_tag = std::move(previous_); }
const std::string& current_trace_tag() noexcept { return thread_tag; }
void set_trace_tag(std::string_view tag) { thread_tag.assign(tag); }

tracing_adaptor::tracing_adaptor(std::shared_ptr<memory_resource> upstream, tracing_options options)
    : adaptor_resource(std::move(upstream), "tracing_adaptor"),
      options_(std::move(options)),
      start_(std::chrono::steady_clock::now()) {
  tags_.emplace_back();
  tag_index_.emplace("", 0);
}

tracing_adaptor::~tracing_adaptor() {
  try {
    flush();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "vramkit tracing: %s\n", e.what());
  }
}

std::uint32_t tracing_adaptor::stream_number(stream_view s) {
  for (std::size_t i = 0; i < streams_.size(); ++i) {
    if (streams_[i] == s.handle) return static_cast<std::uint32_t>(i);
  }
  // The default stream is 0 when it is the first seen; otherwise streams number in order.
  streams_.push_back(s.handle);
  return static_cast<std::uint32_t>(streams_.size() - 1);
}

std::uint32_t tracing_adaptor::tag_number() {
  const std::string& tag = thread_tag;
  auto it = tag_index_.find(tag);
  if (it != tag_index_.end()) return it->second;
  const auto n = static_cast<std::uint32_t>(tags_.size());
  tags_.push_back(tag);
  tag_index_.emplace(tag, n);
  return n;
}

void tracing_adaptor::record(trace_event::op_t op, std::uint64_t id, std::size_t bytes,
                             stream_view s, const void* address) {
  const auto now = std::chrono::steady_clock::now();
  // Lock held by the caller.
  if (events_.size() >= options_.max_events) {
    ++dropped_;
    return;
  }
  traced_event e;
  e.event.op = op;
  e.event.id = id;
  e.event.bytes = bytes;
  e.event.stream = stream_number(s);
  e.event.time_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(now - start_).count();
  if (!events_.empty() && e.event.time_ns < events_.back().event.time_ns) {
    e.event.time_ns = events_.back().event.time_ns;  // keep time monotone across threads
  }
  e.tag = tag_number();
  e.address = reinterpret_cast<std::uintptr_t>(address);
  events_.push_back(e);
}

void* tracing_adaptor::do_allocate(std::size_t bytes, std::size_t alignment, stream_view stream) {
  void* p = upstream_->allocate(bytes, alignment, stream);
  if (p == nullptr) return p;
  std::lock_guard lock(mutex_);
  const std::uint64_t id = next_id_++;
  live_ids_[p] = id;
  record(trace_event::op_t::allocate, id, bytes, stream, p);
  return p;
}

void tracing_adaptor::do_deallocate(void* ptr, std::size_t bytes, std::size_t alignment,
                                    stream_view stream) noexcept {
  if (ptr != nullptr) {
    std::lock_guard lock(mutex_);
    auto it = live_ids_.find(ptr);
    if (it != live_ids_.end()) {
      try {
        record(trace_event::op_t::free, it->second, bytes, stream, ptr);
      } catch (...) {
        ++dropped_;
      }
      live_ids_.erase(it);
    }
  }
  upstream_->deallocate(ptr, bytes, alignment, stream);
}

trace tracing_adaptor::to_trace() const {
  std::lock_guard lock(mutex_);
  trace t;
  t.comments.emplace_back(" source: vramkit tracing_adaptor");
  t.events.reserve(events_.size());
  // A free whose allocation was dropped (max_events) would make the trace invalid: skip those.
  std::unordered_map<std::uint64_t, bool> kept;
  for (const auto& e : events_) {
    if (e.event.op == trace_event::op_t::allocate) {
      kept[e.event.id] = true;
      t.events.push_back(e.event);
    } else if (kept.erase(e.event.id) > 0) {
      t.events.push_back(e.event);
    }
  }
  return t;
}

std::string tracing_adaptor::chrome_trace_json() const {
  std::lock_guard lock(mutex_);
  std::string out;
  out.reserve(events_.size() * 160 + 256);
  out += "{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n";
  out += R"({"name":"process_name","ph":"M","pid":1,"args":{"name":"vramkit )";
  out += upstream_->name();
  out += "\"}}";
  std::unordered_map<std::uint64_t, std::uint32_t> tag_of;  // async begin and end share a name
  std::int64_t in_use = 0;
  char buf[384];
  for (const auto& e : events_) {
    const double ts_us = static_cast<double>(e.event.time_ns) / 1000.0;
    const bool alloc = e.event.op == trace_event::op_t::allocate;
    if (alloc) {
      in_use += static_cast<std::int64_t>(e.event.bytes);
    } else {
      in_use -= static_cast<std::int64_t>(e.event.bytes);
    }
    std::uint32_t tag_id = e.tag;
    if (alloc) {
      tag_of[e.event.id] = e.tag;
    } else if (auto it = tag_of.find(e.event.id); it != tag_of.end()) {
      tag_id = it->second;
      tag_of.erase(it);
    }
    const std::string tag = nlohmann::json(tags_[tag_id]).dump();
    const std::string label = tags_[tag_id].empty() ? "\"allocation\"" : tag;
    std::snprintf(buf, sizeof buf,
                  ",\n{\"name\":%s,\"cat\":\"memory\",\"ph\":\"%s\",\"id\":%llu,\"ts\":%.3f,"
                  "\"pid\":1,\"tid\":%u,\"args\":{\"bytes\":%llu,\"stream\":%u,\"tag\":%s}}",
                  label.c_str(), alloc ? "b" : "e", static_cast<unsigned long long>(e.event.id),
                  ts_us, e.event.stream, static_cast<unsigned long long>(e.event.bytes),
                  e.event.stream, tag.c_str());
    out += buf;
    std::snprintf(buf, sizeof buf,
                  ",\n{\"name\":\"bytes in use\",\"ph\":\"C\",\"ts\":%.3f,\"pid\":1,"
                  "\"args\":{\"bytes\":%lld}}",
                  ts_us, static_cast<long long>(in_use));
    out += buf;
  }
  out += "\n]}\n";
  return out;
}

std::vector<traced_event> tracing_adaptor::events() const {
  std::lock_guard lock(mutex_);
  return events_;
}

std::vector<std::string> tracing_adaptor::tags() const {
  std::lock_guard lock(mutex_);
  return tags_;
}

void tracing_adaptor::flush() const {
  if (!options_.chrome_trace_path.empty())
    write_file(options_.chrome_trace_path, chrome_trace_json());
  if (!options_.compact_trace_path.empty()) write_trace(options_.compact_trace_path, to_trace());
}

void tracing_adaptor::describe(summary_builder& builder) const {
  builder.add_layer("tracing");
  std::lock_guard lock(mutex_);
  builder.add_note("tracing", std::to_string(events_.size()) + " events recorded, " +
                                  std::to_string(dropped_) + " dropped, " +
                                  std::to_string(live_ids_.size()) + " allocations live");
}

}  // namespace vramkit::mr

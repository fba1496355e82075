// tracing_adaptor: records every allocate and free passing through it (size, stream, time, the
// calling thread's tag) and writes them as Chrome trace-event JSON (open in Perfetto or
// chrome://tracing: a counter track of bytes in use plus one async slice per allocation) and in
// the compact replay format of trace.hpp. Thread-safe (one mutex around the event log).
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "vramkit/mr/adaptor_resource.hpp"
#include "vramkit/mr/trace.hpp"

namespace vramkit::mr {

/// Sets the calling thread's trace tag for its lifetime, restoring the previous tag after.
/// Example:  { vramkit::mr::trace_tag_scope tag("forward");  pool.allocate(...); }
class trace_tag_scope {
 public:
  explicit trace_tag_scope(std::string_view tag);
  ~trace_tag_scope();
  trace_tag_scope(const trace_tag_scope&) = delete;
  trace_tag_scope& operator=(const trace_tag_scope&) = delete;

 private:
  std::string previous_;
};

/// The calling thread's current trace tag ("" when none).
const std::string& current_trace_tag() noexcept;
/// Sets the calling thread's trace tag.
void set_trace_tag(std::string_view tag);

struct tracing_options {
  std::string chrome_trace_path;        ///< written by flush() / at destruction when not empty
  std::string compact_trace_path;       ///< written by flush() / at destruction when not empty
  std::size_t max_events = 20'000'000;  ///< later events are counted, not kept
};

/// One recorded event, with its tag.
struct traced_event {
  trace_event event;
  std::uint32_t tag = 0;       ///< index into tracing_adaptor::tags()
  std::uintptr_t address = 0;  ///< the block's address
};

class tracing_adaptor final : public adaptor_resource {
 public:
  tracing_adaptor(std::shared_ptr<memory_resource> upstream, tracing_options options = {});
  /// Flushes to the configured paths (errors go to stderr).
  ~tracing_adaptor() override;

  [[nodiscard]] std::string name() const override { return "tracing"; }
  void describe(summary_builder& builder) const override;

  /// The events so far as a compact trace (stream numbers in order of first appearance).
  [[nodiscard]] trace to_trace() const;
  /// Chrome trace-event JSON of the events so far.
  [[nodiscard]] std::string chrome_trace_json() const;
  [[nodiscard]] std::vector<traced_event> events() const;
  [[nodiscard]] std::vector<std::string> tags() const;
  /// Writes the configured files; throws vramkit::error when one cannot be written.
  void flush() const;

 private:
  void* do_allocate(std::size_t bytes, std::size_t alignment, stream_view stream) override;
  void do_deallocate(void* ptr, std::size_t bytes, std::size_t alignment,
                     stream_view stream) noexcept override;
  std::uint32_t stream_number(stream_view s);  // lock held
  std::uint32_t tag_number();                  // lock held
  void record(trace_event::op_t op, std::uint64_t id, std::size_t bytes, stream_view s,
              const void* address);

  tracing_options options_;
  std::chrono::steady_clock::time_point start_;
  mutable std::mutex mutex_;
  std::vector<traced_event> events_;
  std::size_t dropped_ = 0;
  std::uint64_t next_id_ = 1;
  std::unordered_map<const void*, std::uint64_t> live_ids_;
  std::vector<void*> streams_;
  std::vector<std::string> tags_;
  std::unordered_map<std::string, std::uint32_t> tag_index_;
};

}  // namespace vramkit::mr

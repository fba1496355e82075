// stream_pipeline: a ring of `depth` slots, each a device buffer plus pinned staging buffers. A
// reader thread fills staging slots, run()'s thread enqueues copy in / callback / copy back on
// three streams with events between them, a writer thread drains results. Host functions on the
// streams hand slots back to the host threads, so nothing on the hot path blocks on the device.
#include "vramkit/tier/stream_pipeline.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "detail/copy_pool.hpp"
#include "detail/default_resources.hpp"
#include "detail/trace_recorder.hpp"
#include "vramkit/core/error.hpp"
#include "vramkit/core/units.hpp"

namespace vramkit::tier {

pipeline_input pipeline_input::from_host(const void* data, std::size_t bytes, host_memory memory) {
  return {.source = kind::host,
          .data = data,
          .bytes = bytes,
          .memory = memory,
          .path = {},
          .declared_bytes = 0};
}

pipeline_input pipeline_input::from_file(std::string path, std::size_t declared_bytes) {
  return {.source = kind::file, .path = std::move(path), .declared_bytes = declared_bytes};
}

pipeline_output pipeline_output::to_host(void* data, std::size_t bytes, host_memory memory) {
  return {.sink = kind::host, .data = data, .bytes = bytes, .memory = memory, .path = {}};
}

pipeline_output pipeline_output::to_file(std::string path) {
  return {.sink = kind::file, .path = std::move(path)};
}

namespace {

constexpr std::size_t buffer_alignment = mr::default_alignment;

class file_descriptor {
 public:
  file_descriptor() = default;
  explicit file_descriptor(int fd) : fd_(fd) {}
  file_descriptor(const file_descriptor&) = delete;
  file_descriptor& operator=(const file_descriptor&) = delete;
  ~file_descriptor() {
    if (fd_ >= 0) ::close(fd_);
  }
  [[nodiscard]] int get() const noexcept { return fd_; }
  void reset(int fd) noexcept {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }

 private:
  int fd_ = -1;
};

// Accumulates one stage's busy and stall time. Device stages are stamped by host functions that
// run in stream order, host stages by their thread; the mutex makes both safe.
struct stage_clock {
  std::mutex m;
  std::int64_t begin = 0;     // now_ns() of the running stamp's start
  std::int64_t last_end = 0;  // of the last stop; 0 before the first
  stage_stats totals;

  void start(std::int64_t t) {
    std::lock_guard lock(m);
    if (last_end != 0)
      totals.stall += std::chrono::nanoseconds(std::max<std::int64_t>(0, t - last_end));
    begin = t;
  }
  void stop(std::int64_t t, std::size_t n) {
    std::lock_guard lock(m);
    totals.busy += std::chrono::nanoseconds(t - begin);
    last_end = t;
    totals.bytes += n;
  }
  void add_bytes(std::size_t n) {
    std::lock_guard lock(m);
    totals.bytes += n;
  }
  void add_stall(std::int64_t ns) {
    std::lock_guard lock(m);
    totals.stall += std::chrono::nanoseconds(ns);
  }
  stage_stats result() {
    std::lock_guard lock(m);
    return totals;
  }
};

// The shared state of one run().
struct run_state {
  std::mutex m;
  std::condition_variable cv;
  bool abort = false;
  std::exception_ptr error;
  std::vector<std::int64_t> staged;  // per slot: chunk index filled in the input staging buffer
  std::vector<char> in_free;         // per slot: input staging buffer may be refilled
  std::vector<char> out_free;        // per slot: output staging buffer may be refilled
  std::deque<std::pair<std::size_t, int>> results;  // (chunk, slot) ready in output staging
  stage_clock read, h2d, compute, d2h, write;

  void fail(std::exception_ptr e) {
    {
      std::lock_guard lock(m);
      if (!error) error = std::move(e);
      abort = true;
    }
    cv.notify_all();
  }
  // Waits until `ready()` or abort; returns false on abort. Adds the wait to `clock`'s stall.
  template <typename Ready>
  bool wait(Ready ready, stage_clock* clock) {
    const std::int64_t t0 = detail::now_ns();
    std::unique_lock lock(m);
    cv.wait(lock, [&] { return abort || ready(); });
    const bool ok = !abort;
    lock.unlock();
    if (clock != nullptr) clock->add_stall(detail::now_ns() - t0);
    return ok;
  }
};

}  // namespace

struct stream_pipeline::impl {
  device_api& api;
  std::unique_ptr<mr::memory_resource> owned_device;
  std::unique_ptr<mr::memory_resource> owned_pinned;
  mr::memory_resource* device_mr = nullptr;
  mr::memory_resource* pinned_mr = nullptr;
  pipeline_options options;
  owned_stream h2d_stream;
  owned_stream compute_stream;
  owned_stream d2h_stream;
  std::vector<event_view> h2d_done, compute_done, d2h_done;
  detail::copy_pool pool;

  struct slot {
    void* device = nullptr;
    void* stage_in = nullptr;
    void* stage_out = nullptr;
  };
  std::vector<slot> slots;

  impl(device_api& a, pipeline_options o)
      : api(a),
        options(o),
        h2d_stream(a),
        compute_stream(a),
        d2h_stream(a),
        pool(std::max(1, o.staging_threads)) {
    if (options.depth < 1) {
      throw invalid_input("stream_pipeline: depth must be at least 1 (got " +
                          std::to_string(options.depth) + ")");
    }
    if (options.element_bytes == 0)
      throw invalid_input("stream_pipeline: element_bytes must be > 0");
    if (options.chunk_bytes == 0 || options.chunk_bytes % options.element_bytes != 0) {
      throw invalid_input("stream_pipeline: chunk size " + std::to_string(options.chunk_bytes) +
                          " is not a positive multiple of the element size " +
                          std::to_string(options.element_bytes));
    }
    for (int i = 0; i < options.depth; ++i) {
      h2d_done.push_back(api.create_event());
      compute_done.push_back(api.create_event());
      d2h_done.push_back(api.create_event());
    }
  }

  ~impl() {
    release();
    for (auto* v : {&h2d_done, &compute_done, &d2h_done}) {
      for (event_view e : *v) api.destroy_event(e);
    }
  }

  void sync_all() noexcept {
    for (stream_view s : {h2d_stream.view(), compute_stream.view(), d2h_stream.view()}) {
      try {
        api.synchronize(s);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "vramkit: stream_pipeline: stream failed while draining: %s\n",
                     e.what());
      }
    }
  }

  void release() noexcept {
    if (slots.empty()) return;
    sync_all();
    for (slot& s : slots) {
      device_mr->deallocate(s.device, options.chunk_bytes, buffer_alignment, h2d_stream);
      pinned_mr->deallocate(s.stage_in, options.chunk_bytes, buffer_alignment);
      pinned_mr->deallocate(s.stage_out, options.chunk_bytes, buffer_alignment);
    }
    slots.clear();
    try {
      api.synchronize(h2d_stream);
    } catch (...) {
    }
  }

  // Allocates the ring (kept between runs); staging buffers only where the run needs them.
  void ensure_buffers(bool need_in, bool need_out) {
    const bool have_in = !slots.empty() && slots[0].stage_in != nullptr;
    const bool have_out = !slots.empty() && slots[0].stage_out != nullptr;
    if (!slots.empty() && ((need_in && !have_in) || (need_out && !have_out))) release();
    if (!slots.empty()) return;
    try {
      slots.resize(static_cast<std::size_t>(options.depth));
      for (slot& s : slots) {
        s.device = device_mr->allocate(options.chunk_bytes, buffer_alignment, h2d_stream);
        if (need_in) s.stage_in = pinned_mr->allocate(options.chunk_bytes, buffer_alignment);
        if (need_out) s.stage_out = pinned_mr->allocate(options.chunk_bytes, buffer_alignment);
      }
      // Stream-ordered allocations on the copy stream become usable on the others after this.
      api.synchronize(h2d_stream);
    } catch (...) {
      release_partial();
      throw;
    }
  }
  void release_partial() noexcept {
    sync_all();
    for (slot& s : slots) {
      if (s.device != nullptr)
        device_mr->deallocate(s.device, options.chunk_bytes, buffer_alignment, h2d_stream);
      if (s.stage_in != nullptr)
        pinned_mr->deallocate(s.stage_in, options.chunk_bytes, buffer_alignment);
      if (s.stage_out != nullptr)
        pinned_mr->deallocate(s.stage_out, options.chunk_bytes, buffer_alignment);
    }
    slots.clear();
  }

  void stamp_start(stream_view s, stage_clock& clock) {
    if (!options.measure_stages) return;
    api.launch_host_func(s, [&clock] { clock.start(detail::now_ns()); });
  }
  void stamp_stop(stream_view s, stage_clock& clock, std::size_t bytes) {
    if (!options.measure_stages) {
      clock.add_bytes(bytes);
      return;
    }
    api.launch_host_func(s, [&clock, bytes] { clock.stop(detail::now_ns(), bytes); });
  }

  pipeline_stats run(const pipeline_input& input, const chunk_callback& callback,
                     const pipeline_output& output);

 private:
  struct run_plan;
  static std::size_t open_input(const pipeline_input& input, std::size_t element,
                                file_descriptor& fd);
  static void open_output(const pipeline_output& output, std::size_t total, file_descriptor& fd);
  void read_chunks(run_plan& p, run_state& state);
  void write_chunks(run_plan& p, run_state& state);
  void dispatch_chunks(run_plan& p, run_state& state, const chunk_callback& callback,
                       pipeline_stats& stats);
  void finish(run_plan& p, run_state& state, std::thread& reader, std::thread& writer);
};

// What one run() moves, fixed before any stage starts.
struct stream_pipeline::impl::run_plan {
  run_plan(const pipeline_input& in, const pipeline_output& out) : input(in), output(out) {}
  const pipeline_input& input;
  const pipeline_output& output;
  file_descriptor in_fd, out_fd;
  std::size_t total = 0, chunk = 0, chunks = 0;
  int depth = 0;
  bool stage_in = false, has_output = false, stage_out = false;
};

// Opens a file input and checks either input against the element size; returns its bytes.
std::size_t stream_pipeline::impl::open_input(const pipeline_input& input, std::size_t element,
                                              file_descriptor& fd) {
  std::size_t total = 0;
  if (input.source == pipeline_input::kind::file) {
    fd.reset(::open(input.path.c_str(), O_RDONLY | O_CLOEXEC));
    if (fd.get() < 0) {
      throw invalid_input("stream_pipeline: cannot open input file '" + input.path +
                          "': " + std::strerror(errno));
    }
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0) {
      throw invalid_input("stream_pipeline: cannot stat input file '" + input.path +
                          "': " + std::strerror(errno));
    }
    const auto file_bytes = static_cast<std::size_t>(st.st_size);
    if (input.declared_bytes != 0 && file_bytes < input.declared_bytes) {
      throw invalid_input("stream_pipeline: truncated input file '" + input.path +
                          "': " + std::to_string(file_bytes) + " bytes, " +
                          std::to_string(input.declared_bytes) + " declared");
    }
    total = input.declared_bytes != 0 ? input.declared_bytes : file_bytes;
    if (total % element != 0) {
      throw invalid_input("stream_pipeline: truncated input file '" + input.path +
                          "': " + std::to_string(total) + " bytes is not a whole number of " +
                          std::to_string(element) + "-byte elements");
    }
  } else {
    if (input.data == nullptr && input.bytes != 0) {
      throw invalid_input("stream_pipeline: host input is a null pointer");
    }
    total = input.bytes;
    if (total % element != 0) {
      throw invalid_input("stream_pipeline: host input of " + std::to_string(total) +
                          " bytes is not a whole number of " + std::to_string(element) +
                          "-byte elements");
    }
  }
  return total;
}

// Checks a host output's size or creates the output file, before anything is allocated.
void stream_pipeline::impl::open_output(const pipeline_output& output, std::size_t total,
                                        file_descriptor& fd) {
  if (output.sink == pipeline_output::kind::host) {
    if (output.data == nullptr || output.bytes < total) {
      throw invalid_input("stream_pipeline: host output of " + std::to_string(output.bytes) +
                          " bytes is smaller than the input (" + std::to_string(total) + " bytes)");
    }
  } else if (output.sink == pipeline_output::kind::file) {
    fd.reset(::open(output.path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    if (fd.get() < 0) {
      throw invalid_input("stream_pipeline: cannot create output file '" + output.path +
                          "': " + std::strerror(errno));
    }
  }
}

// The reader stage: file or pageable host -> pinned input slots.
void stream_pipeline::impl::read_chunks(run_plan& p, run_state& state) {
  const pipeline_input& input = p.input;
  const std::size_t total = p.total, chunk = p.chunk, chunks = p.chunks;
  const int depth = p.depth;
  file_descriptor& in_fd = p.in_fd;
  for (std::size_t i = 0; i < chunks; ++i) {
    const int k = static_cast<int>(i % static_cast<std::size_t>(depth));
    if (!state.wait([&] { return state.in_free[k] != 0; }, &state.read)) return;
    {
      std::lock_guard lock(state.m);
      state.in_free[k] = 0;
    }
    const std::size_t offset = i * chunk;
    const std::size_t n = std::min(chunk, total - offset);
    state.read.start(detail::now_ns());
    state.read.last_end = 0;  // host stage: its stall is the wait above, not the gap
    char* dst = static_cast<char*>(slots[k].stage_in);
    if (input.source == pipeline_input::kind::file) {
      std::size_t done = 0;
      while (done < n) {
        const ssize_t r =
            ::pread(in_fd.get(), dst + done, n - done, static_cast<off_t>(offset + done));
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
          throw error("stream_pipeline: read of input file '" + input.path + "' failed at byte " +
                      std::to_string(offset + done) + ": " + std::strerror(errno));
        }
        if (r == 0) {
          throw invalid_input("stream_pipeline: truncated input file '" + input.path +
                              "': end of file at byte " + std::to_string(offset + done) + ", " +
                              std::to_string(total) + " expected");
        }
        done += static_cast<std::size_t>(r);
      }
    } else {
      pool.copy(dst, static_cast<const char*>(input.data) + offset, n);
    }
    state.read.stop(detail::now_ns(), n);
    {
      std::lock_guard lock(state.m);
      state.staged[k] = static_cast<std::int64_t>(i);
    }
    state.cv.notify_all();
  }
}

// The writer stage: pinned output slots -> pageable host or file.
void stream_pipeline::impl::write_chunks(run_plan& p, run_state& state) {
  const pipeline_output& output = p.output;
  const std::size_t total = p.total, chunk = p.chunk, chunks = p.chunks;
  file_descriptor& out_fd = p.out_fd;
  for (std::size_t done_chunks = 0; done_chunks < chunks; ++done_chunks) {
    if (!state.wait([&] { return !state.results.empty(); }, &state.write)) return;
    std::pair<std::size_t, int> r;
    {
      std::lock_guard lock(state.m);
      r = state.results.front();
      state.results.pop_front();
    }
    const auto [i, k] = r;
    const std::size_t offset = i * chunk;
    const std::size_t n = std::min(chunk, total - offset);
    state.write.start(detail::now_ns());
    state.write.last_end = 0;
    const char* src = static_cast<const char*>(slots[k].stage_out);
    if (output.sink == pipeline_output::kind::file) {
      std::size_t done = 0;
      while (done < n) {
        const ssize_t w =
            ::pwrite(out_fd.get(), src + done, n - done, static_cast<off_t>(offset + done));
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
          throw error("stream_pipeline: write of output file '" + output.path +
                      "' failed at byte " + std::to_string(offset + done) + ": " +
                      std::strerror(errno));
        }
        done += static_cast<std::size_t>(w);
      }
    } else {
      pool.copy(static_cast<char*>(output.data) + offset, src, n);
    }
    state.write.stop(detail::now_ns(), n);
    {
      std::lock_guard lock(state.m);
      state.out_free[k] = 1;
    }
    state.cv.notify_all();
  }
}

// Enqueues copy in, the callback and copy back of every chunk; stops early on an abort.
void stream_pipeline::impl::dispatch_chunks(run_plan& p, run_state& state,
                                            const chunk_callback& callback, pipeline_stats& stats) {
  const pipeline_input& input = p.input;
  const pipeline_output& output = p.output;
  const std::size_t total = p.total, chunk = p.chunk, chunks = p.chunks;
  const int depth = p.depth;
  const bool stage_in = p.stage_in, has_output = p.has_output, stage_out = p.stage_out;
  for (std::size_t i = 0; i < chunks; ++i) {
    const int k = static_cast<int>(i % static_cast<std::size_t>(depth));
    const std::size_t offset = i * chunk;
    const std::size_t n = std::min(chunk, total - offset);
    const void* src = nullptr;
    if (stage_in) {
      if (!state.wait([&] { return state.staged[k] == static_cast<std::int64_t>(i); }, nullptr)) {
        break;
      }
      src = slots[k].stage_in;
    } else {
      src = static_cast<const char*>(input.data) + offset;
    }
    {
      std::lock_guard lock(state.m);
      if (state.abort) break;
    }
    // The device slot is free once the previous chunk in it is computed (and copied back).
    if (i >= static_cast<std::size_t>(depth)) {
      api.stream_wait_event(h2d_stream, has_output ? d2h_done[k] : compute_done[k]);
    }
    stamp_start(h2d_stream, state.h2d);
    api.copy_async(slots[k].device, src, n, copy_kind::host_to_device, h2d_stream);
    stamp_stop(h2d_stream, state.h2d, n);
    if (stage_in) {
      api.launch_host_func(h2d_stream, [&state, k] {
        {
          std::lock_guard lock(state.m);
          state.in_free[k] = 1;
          state.staged[k] = -1;
        }
        state.cv.notify_all();
      });
    }
    api.record_event(h2d_done[k], h2d_stream);

    api.stream_wait_event(compute_stream, h2d_done[k]);
    stamp_start(compute_stream, state.compute);
    try {
      callback(chunk_view{slots[k].device, n, i, offset}, compute_stream.view());
    } catch (const std::exception& e) {
      throw error("stream_pipeline: the chunk callback failed on chunk " + std::to_string(i) +
                  " (bytes " + std::to_string(offset) + ".." + std::to_string(offset + n) +
                  "): " + e.what());
    } catch (...) {
      throw error("stream_pipeline: the chunk callback failed on chunk " + std::to_string(i) +
                  " with an unknown exception");
    }
    stamp_stop(compute_stream, state.compute, n);
    api.record_event(compute_done[k], compute_stream);

    if (has_output) {
      void* dst = nullptr;
      if (stage_out) {
        if (!state.wait([&] { return state.out_free[k] != 0; }, nullptr)) break;
        {
          std::lock_guard lock(state.m);
          state.out_free[k] = 0;
        }
        dst = slots[k].stage_out;
      } else {
        dst = static_cast<char*>(output.data) + offset;
      }
      api.stream_wait_event(d2h_stream, compute_done[k]);
      stamp_start(d2h_stream, state.d2h);
      api.copy_async(dst, slots[k].device, n, copy_kind::device_to_host, d2h_stream);
      stamp_stop(d2h_stream, state.d2h, n);
      api.record_event(d2h_done[k], d2h_stream);
      if (stage_out) {
        api.launch_host_func(d2h_stream, [&state, i, k] {
          {
            std::lock_guard lock(state.m);
            state.results.emplace_back(i, k);
          }
          state.cv.notify_all();
        });
      }
    }
    ++stats.chunks;
  }
}

// Joins the stages, drains the streams and rethrows the first failure; flushes a file output.
void stream_pipeline::impl::finish(run_plan& p, run_state& state, std::thread& reader,
                                   std::thread& writer) {
  const pipeline_output& output = p.output;
  const bool has_output = p.has_output;
  file_descriptor& out_fd = p.out_fd;
  if (writer.joinable()) writer.join();  // returns after the last chunk, or at once on abort
  if (reader.joinable()) {
    if (state.abort) state.cv.notify_all();
    reader.join();
  }
  std::exception_ptr stream_error;
  for (stream_view s : {h2d_stream.view(), compute_stream.view(), d2h_stream.view()}) {
    try {
      api.synchronize(s);
    } catch (...) {
      if (!stream_error) stream_error = std::current_exception();
    }
  }
  if (state.error || stream_error) {
    release();
    std::rethrow_exception(state.error ? state.error : stream_error);
  }
  if (has_output && output.sink == pipeline_output::kind::file) {
    if (::fsync(out_fd.get()) != 0 && errno != EINVAL) {
      throw error("stream_pipeline: cannot flush output file '" + output.path +
                  "': " + std::strerror(errno));
    }
  }
}

pipeline_stats stream_pipeline::impl::run(const pipeline_input& input,
                                          const chunk_callback& callback,
                                          const pipeline_output& output) {
  if (!callback) throw invalid_input("stream_pipeline: run() needs a chunk callback");
  run_plan p(input, output);
  p.total = open_input(input, options.element_bytes, p.in_fd);
  open_output(output, p.total, p.out_fd);

  pipeline_stats stats;
  if (p.total == 0) return stats;
  p.chunk = options.chunk_bytes;
  p.chunks = (p.total + p.chunk - 1) / p.chunk;
  p.depth = options.depth;
  p.stage_in = input.source == pipeline_input::kind::file || input.memory == host_memory::pageable;
  p.has_output = output.sink != pipeline_output::kind::none;
  p.stage_out =
      output.sink == pipeline_output::kind::file ||
      (output.sink == pipeline_output::kind::host && output.memory == host_memory::pageable);
  ensure_buffers(p.stage_in, p.stage_out);

  run_state state;
  state.staged.assign(static_cast<std::size_t>(p.depth), -1);
  state.in_free.assign(static_cast<std::size_t>(p.depth), 1);
  state.out_free.assign(static_cast<std::size_t>(p.depth), 1);
  const std::int64_t t_begin = detail::now_ns();
  auto guarded = [&state](auto&& stage) {
    return [&state, stage] {
      try {
        stage();
      } catch (...) {
        state.fail(std::current_exception());
      }
    };
  };
  std::thread reader, writer;
  if (p.stage_in) reader = std::thread(guarded([&] { read_chunks(p, state); }));
  if (p.stage_out) writer = std::thread(guarded([&] { write_chunks(p, state); }));
  guarded([&] { dispatch_chunks(p, state, callback, stats); })();
  finish(p, state, reader, writer);

  stats.elapsed = std::chrono::nanoseconds(detail::now_ns() - t_begin);
  stats.bytes = p.total;
  stats.read = state.read.result();
  stats.h2d = state.h2d.result();
  stats.compute = state.compute.result();
  stats.d2h = state.d2h.result();
  stats.write = state.write.result();
  return stats;
}

stream_pipeline::stream_pipeline(device_api& api, mr::memory_resource& device_memory,
                                 mr::memory_resource& pinned_memory, pipeline_options options)
    : impl_(std::make_unique<impl>(api, options)) {
  impl_->device_mr = &device_memory;
  impl_->pinned_mr = &pinned_memory;
}

stream_pipeline::stream_pipeline(device_api& api, pipeline_options options)
    : impl_(std::make_unique<impl>(api, options)) {
  impl_->owned_device = detail::make_device_resource(api);
  impl_->owned_pinned = detail::make_pinned_resource(api);
  impl_->device_mr = impl_->owned_device.get();
  impl_->pinned_mr = impl_->owned_pinned.get();
}

stream_pipeline::~stream_pipeline() = default;

pipeline_stats stream_pipeline::run(const pipeline_input& input, const chunk_callback& callback,
                                    const pipeline_output& output) {
  return impl_->run(input, callback, output);
}

void stream_pipeline::release_buffers() { impl_->release(); }
stream_view stream_pipeline::compute_stream() const noexcept {
  return impl_->compute_stream.view();
}
const pipeline_options& stream_pipeline::options() const noexcept { return impl_->options; }

}  // namespace vramkit::tier

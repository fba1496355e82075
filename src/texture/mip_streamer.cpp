// The texture residency manager: policy actions carried out by a reader thread (file -> pinned
// staging) and a copy stream (staging and old chain -> new chain), never waited on by a frame.
#include "vramkit/texture/mip_streamer.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <list>
#include <mutex>
#include <thread>

#include "vramkit/core/error.hpp"
#include "vramkit/mr/device_api_resource.hpp"
#include "vramkit/mr/pinned_host_pool.hpp"

namespace vramkit::texture {

// --- device_api_mip_storage ---------------------------------------------------------------------

namespace {

struct linear_chain final : mip_chain {
  void* base = nullptr;
  std::uint64_t bytes = 0;
  std::vector<std::uint64_t> offset;  // per level from first_level; index level - first_level
};

// Bytes of one level of every layer, tightly packed.
std::uint64_t tight_level(const mip_chain_desc& d, int level) {
  return level_bytes(d.format, level_extent(d.width, level), level_extent(d.height, level)) *
         static_cast<std::uint64_t>(d.layers);
}

}  // namespace

mip_chain* device_api_mip_storage::create_chain(const mip_chain_desc& desc, int first_level) {
  auto c = std::make_unique<linear_chain>();
  c->desc = desc;
  c->first_level = first_level;
  for (int l = first_level; l < desc.mip_levels; ++l) {
    c->offset.push_back(c->bytes);
    c->bytes += tight_level(desc, l);
  }
  c->base = api_->allocate_device(c->bytes);
  return c.release();
}

void device_api_mip_storage::copy_shared_levels(mip_chain* dst, const mip_chain* src,
                                                stream_view stream) {
  auto* d = static_cast<linear_chain*>(dst);
  const auto* s = static_cast<const linear_chain*>(src);
  const int from = std::max(d->first_level, s->first_level);
  for (int l = from; l < d->desc.mip_levels; ++l) {
    api_->copy_async(static_cast<std::uint8_t*>(d->base) + d->offset[l - d->first_level],
                     static_cast<const std::uint8_t*>(s->base) + s->offset[l - s->first_level],
                     tight_level(d->desc, l), copy_kind::device_to_device, stream);
  }
}

void device_api_mip_storage::upload_level(mip_chain* dst, int level, const void* host_src,
                                          stream_view stream) {
  auto* d = static_cast<linear_chain*>(dst);
  if (level < d->first_level || level >= d->desc.mip_levels)
    throw logic_error("upload_level: level not in the chain");
  api_->copy_async(static_cast<std::uint8_t*>(d->base) + d->offset[level - d->first_level],
                   host_src, tight_level(d->desc, level), copy_kind::host_to_device, stream);
}

void device_api_mip_storage::destroy_chain(mip_chain* chain) noexcept {
  auto* c = static_cast<linear_chain*>(chain);
  if (c == nullptr) return;
  api_->free_device(c->base);
  delete c;
}

const void* device_api_mip_storage::level_data(const mip_chain* chain, int level) const {
  const auto* c = static_cast<const linear_chain*>(chain);
  if (level < c->first_level || level >= c->desc.mip_levels)
    throw logic_error("level_data: level not in the chain");
  return static_cast<const std::uint8_t*>(c->base) + c->offset[level - c->first_level];
}

// --- mip_streamer --------------------------------------------------------------------------------

struct mip_streamer::impl {
  struct texture_state {
    std::filesystem::path path;
    texture_info info;
    int fd = -1;
    mip_chain* chain = nullptr;
  };
  struct op {
    residency_action action;
    void* staging = nullptr;
    std::size_t staging_bytes = 0;
    // What the reader reads, copied here so that it never touches the texture table: the level
    // of each layer, `piece_bytes` at each offset, packed one after another into staging.
    int fd = -1;
    std::vector<std::uint64_t> offsets;
    std::uint64_t piece_bytes = 0;
    bool read_done = false;
    bool read_failed = false;
    bool issued = false;
    mip_chain* new_chain = nullptr;
    event_view done;
    event_view shared_done;  // the device-to-device part of a load (kept until the op retires)
  };
  struct deferred_free {
    mip_chain* chain;
    event_view after;
  };

  std::shared_ptr<device_api> api;
  mip_storage* storage;
  mip_residency_policy policy;
  mr::pinned_host_pool staging;
  stream_view copy_stream;                  // the first upload stream (tails, staging)
  std::vector<stream_view> upload_streams;  // loads take them in turn
  std::size_t next_upload = 0;
  stream_view device_stream;  // device-to-device copies of the levels a new chain keeps
  std::vector<texture_state> textures;
  std::list<op> ops;
  std::vector<deferred_free> frees;
  mip_streamer_stats stats;

  // Reader thread: reads levels into staging; flags the op when done.
  std::mutex mutex;
  std::condition_variable wake;
  std::condition_variable done_cv;
  std::deque<op*> reads;
  bool stopping = false;
  std::thread reader;

  impl(std::shared_ptr<device_api> a, mip_storage& s, const mip_streamer_options& o)
      : api(std::move(a)),
        storage(&s),
        policy(o.policy),
        staging(std::make_shared<mr::device_api_resource>(api, mr::memory_kind::pinned_host), api,
                mr::pinned_pool_options{.byte_cap = o.staging_cap_bytes}),
        copy_stream(api->create_stream()),
        device_stream(api->create_stream()) {
    upload_streams.push_back(copy_stream);
    for (int i = 1; i < o.upload_streams; ++i) upload_streams.push_back(api->create_stream());
    reader = std::thread([this] { read_loop(); });
  }

  ~impl() {
    {
      std::lock_guard lock(mutex);
      stopping = true;
    }
    wake.notify_all();
    reader.join();
    try {
      for (auto st : upload_streams) api->synchronize(st);
      api->synchronize(device_stream);
      api->synchronize_device();
    } catch (...) {
    }
    for (auto& o : ops) {
      if (o.staging) staging.deallocate(o.staging, o.staging_bytes, 256, copy_stream);
      if (o.new_chain) storage->destroy_chain(o.new_chain);
      if (o.issued) api->destroy_event(o.done);
      if (o.shared_done.handle) api->destroy_event(o.shared_done);
    }
    for (auto& f : frees) {
      storage->destroy_chain(f.chain);
      api->destroy_event(f.after);
    }
    for (auto& t : textures) {
      storage->destroy_chain(t.chain);
      if (t.fd >= 0) ::close(t.fd);
    }
    api->destroy_stream(device_stream);
    for (auto st : upload_streams) api->destroy_stream(st);
  }

  void read_loop() {
    for (;;) {
      op* o = nullptr;
      {
        std::unique_lock lock(mutex);
        wake.wait(lock, [&] { return stopping || !reads.empty(); });
        if (stopping) return;
        o = reads.front();
        reads.pop_front();
      }
      bool ok = true;
      auto* dst = static_cast<std::uint8_t*>(o->staging);
      for (std::uint64_t off : o->offsets) {
        ok = ok && read_exactly(o->fd, dst, o->piece_bytes, off);
        dst += o->piece_bytes;
      }
      {
        std::lock_guard lock(mutex);
        o->read_done = true;
        o->read_failed = !ok;
      }
      done_cv.notify_all();
    }
  }

  static bool read_exactly(int fd, std::uint8_t* dst, std::uint64_t size, std::uint64_t off) {
    std::uint64_t got = 0;
    while (got < size) {
      const ssize_t n = ::pread(fd, dst + got, size - got, static_cast<off_t>(off + got));
      if (n <= 0) return false;
      got += static_cast<std::uint64_t>(n);
    }
    return true;
  }

  bool read_done(op& o) {
    std::lock_guard lock(mutex);
    if (o.read_failed) {
      throw texture_file_error(
          textures[o.action.texture].path,
          "read failed while streaming level " + std::to_string(o.action.new_first_level));
    }
    return o.read_done;
  }

  // Builds the new chain: the levels it keeps from the old one on the device stream, the new level
  // from staging on the next upload stream, so that uploads follow one another without waiting
  // behind the (many, small) device-to-device level copies, and consecutive uploads overlap their
  // start-up on two copy engines. `done` marks both finished.
  void issue(op& o) {
    auto& t = textures[o.action.texture];
    const auto surfaces = static_cast<std::uint64_t>(t.info.surfaces());
    o.new_chain = storage->create_chain(policy.desc(o.action.texture), o.action.new_first_level);
    storage->copy_shared_levels(o.new_chain, t.chain, device_stream);
    const int from = std::max(o.action.new_first_level, t.chain->first_level);
    for (int l = from; l < t.info.mip_levels; ++l)
      stats.bytes_copied_on_device += t.info.level_size(l) * surfaces;
    o.done = api->create_event();
    if (o.action.kind == residency_action_kind::load_finer) {
      const stream_view up = upload_streams[next_upload++ % upload_streams.size()];
      storage->upload_level(o.new_chain, o.action.new_first_level, o.staging, up);
      stats.bytes_streamed += t.info.level_size(o.action.new_first_level) * surfaces;
      // The staging block is reused only after the copy that reads it (the pool records an event).
      staging.deallocate(o.staging, o.staging_bytes, 256, up);
      o.staging = nullptr;
      o.shared_done = api->create_event();
      api->record_event(o.shared_done, device_stream);
      api->stream_wait_event(up, o.shared_done);
      api->record_event(o.done, up);
    } else {
      api->record_event(o.done, device_stream);
    }
    o.issued = true;
  }

  // Retires finished work and issues ready copies; starts no new actions.
  bool copies_idle() {
    for (auto& o : ops) {
      if (o.issued && !api->event_done(o.done)) return false;
    }
    return true;
  }

  void progress(stream_view render_stream) {
    // Freeing a CUDA array synchronizes the device: free only while no copy is in flight (and
    // after the render work that used the chain), so that the free never waits for a copy.
    const bool idle = copies_idle();
    for (auto it = frees.begin(); it != frees.end();) {
      if (idle && api->event_done(it->after)) {
        storage->destroy_chain(it->chain);
        api->destroy_event(it->after);
        it = frees.erase(it);
      } else {
        ++it;
      }
    }
    for (auto it = ops.begin(); it != ops.end();) {
      op& o = *it;
      if (!o.issued && (o.action.kind == residency_action_kind::drop_finest || read_done(o)))
        issue(o);
      if (o.issued && api->event_done(o.done)) {
        auto& t = textures[o.action.texture];
        // Render work already queued may still sample the old chain: free it after that work.
        event_view after = api->create_event();
        api->record_event(after, render_stream);
        frees.push_back({t.chain, after});
        t.chain = o.new_chain;
        api->destroy_event(o.done);
        if (o.shared_done.handle) api->destroy_event(o.shared_done);
        policy.complete(o.action);
        it = ops.erase(it);
      } else {
        ++it;
      }
    }
  }

  void start(const std::vector<residency_action>& actions) {
    for (const auto& a : actions) {
      ops.push_back(op{});
      op& o = ops.back();
      o.action = a;
      if (a.kind == residency_action_kind::load_finer) {
        const auto& t = textures[a.texture];
        o.piece_bytes = t.info.level_size(a.new_first_level);
        o.staging_bytes = o.piece_bytes * static_cast<std::uint64_t>(t.info.surfaces());
        o.fd = t.fd;
        for (int surface = 0; surface < t.info.surfaces(); ++surface)
          o.offsets.push_back(t.info.data_offset + t.info.level_offset(surface, a.new_first_level));
        o.staging = staging.allocate(o.staging_bytes, 256, copy_stream);
        {
          std::lock_guard lock(mutex);
          reads.push_back(&o);
        }
        wake.notify_one();
      } else {
        issue(o);
      }
    }
  }
};

namespace {
const mip_streamer_options& checked(const mip_streamer_options& o) {
  if (o.upload_streams < 1 || o.upload_streams > 4) {
    throw invalid_input("mip_streamer: upload_streams must be 1 to 4, not " +
                        std::to_string(o.upload_streams));
  }
  return o;
}
}  // namespace

mip_streamer::mip_streamer(std::shared_ptr<device_api> api, mip_storage& storage,
                           mip_streamer_options options)
    : impl_(std::make_unique<impl>(std::move(api), storage, checked(options))) {}

mip_streamer::~mip_streamer() = default;

int mip_streamer::add_texture(const std::filesystem::path& file) {
  auto& m = *impl_;
  texture_info info = read_texture_info(file);
  if (info.container == file_container::astc)
    throw texture_file_error(file, "ASTC textures cannot be sampled by CUDA");
  if (info.container == file_container::png) {
    throw texture_file_error(file,
                             "PNG holds no compressed mip chain; convert it to DDS to stream it");
  }
  const mip_chain_desc desc{info.format,     info.width,      info.height,
                            info.mip_levels, info.surfaces(), info.faces == 6};
  const int id = m.policy.add_texture(desc);
  impl::texture_state t;
  t.path = file;
  t.info = info;
  t.fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (t.fd < 0)
    throw texture_file_error(file,
                             std::string("cannot open the file (") + std::strerror(errno) + ")");
  const int tail = m.policy.tail_level(id);
  t.chain = m.storage->create_chain(desc, tail);
  // The tail's levels, each with its layers one after another, as upload_level takes them.
  const auto surfaces = static_cast<std::uint64_t>(info.surfaces());
  const std::uint64_t tail_bytes =
      (info.level_offset(0, info.mip_levels) - info.level_offset(0, tail)) * surfaces;
  void* stage = m.staging.allocate(tail_bytes, 256, m.copy_stream);
  auto* at = static_cast<std::uint8_t*>(stage);
  bool ok = true;
  for (int l = tail; l < info.mip_levels; ++l) {
    for (int surface = 0; surface < info.surfaces(); ++surface) {
      ok = ok && impl::read_exactly(t.fd, at, info.level_size(l),
                                    info.data_offset + info.level_offset(surface, l));
      at += info.level_size(l);
    }
  }
  if (!ok) {
    m.staging.deallocate(stage, tail_bytes, 256, m.copy_stream);
    m.storage->destroy_chain(t.chain);
    ::close(t.fd);
    throw texture_file_error(file, "truncated while reading the mip tail");
  }
  std::uint64_t pos = 0;
  for (int l = tail; l < info.mip_levels; ++l) {
    m.storage->upload_level(t.chain, l, static_cast<std::uint8_t*>(stage) + pos, m.copy_stream);
    pos += info.level_size(l) * surfaces;
  }
  m.stats.bytes_streamed += tail_bytes;
  m.api->synchronize(m.copy_stream);
  m.staging.deallocate(stage, tail_bytes, 256, m.copy_stream);
  m.textures.push_back(std::move(t));
  return id;
}

void mip_streamer::prepare_staging() {
  auto& m = *impl_;
  // One block per distinct level size that a load may stage, allocated and returned to the pool,
  // so that pinning (milliseconds per MiB) happens here and not inside a frame.
  std::vector<std::uint64_t> sizes;
  for (const auto& t : m.textures) {
    for (int l = 0; l < m.policy.tail_level(static_cast<int>(&t - m.textures.data())); ++l)
      sizes.push_back(t.info.level_size(l) * static_cast<std::uint64_t>(t.info.surfaces()));
  }
  std::sort(sizes.begin(), sizes.end());
  sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
  std::vector<std::pair<void*, std::uint64_t>> blocks;
  std::uint64_t total = 0;
  for (auto it = sizes.rbegin(); it != sizes.rend(); ++it) {
    // Several of the large ones: loads of different textures overlap.
    const int copies = *it >= (1u << 20) ? 4 : 2;
    for (int c = 0; c < copies && total + *it <= m.policy.options().max_inflight_bytes * 2; ++c) {
      blocks.emplace_back(m.staging.allocate(*it, 256, m.copy_stream), *it);
      total += *it;
    }
  }
  for (auto& [p, n] : blocks) m.staging.deallocate(p, n, 256, m.copy_stream);
  m.api->synchronize(m.copy_stream);
}

void mip_streamer::begin_frame() { impl_->policy.begin_frame(); }

void mip_streamer::request(int texture, float lod, double coverage_pixels) {
  impl_->policy.request(texture, lod, coverage_pixels);
}

void mip_streamer::update(stream_view render_stream) {
  auto& m = *impl_;
  m.progress(render_stream);
  m.start(m.policy.plan_frame());
}

void mip_streamer::drain(stream_view render_stream) {
  auto& m = *impl_;
  while (!m.ops.empty()) {
    {
      std::unique_lock lock(m.mutex);
      m.done_cv.wait(lock, [&] {
        for (auto& o : m.ops) {
          if (!o.issued && o.action.kind == residency_action_kind::load_finer && !o.read_done)
            return false;
        }
        return true;
      });
    }
    m.progress(render_stream);
    m.api->synchronize(m.device_stream);
    for (auto st : m.upload_streams) m.api->synchronize(st);
    m.progress(render_stream);
  }
  m.api->synchronize(render_stream);
  m.progress(render_stream);
}

const mip_chain* mip_streamer::chain(int texture) const {
  (void)impl_->policy.desc(texture);  // range check
  return impl_->textures[texture].chain;
}

int mip_streamer::first_level(int texture) const {
  return impl_->policy.resident_first_level(texture);
}

texture_residency mip_streamer::residency(int texture) const {
  const auto& t = impl_->textures.at(static_cast<std::size_t>(texture));
  texture_residency r;
  r.first_level = impl_->policy.resident_first_level(texture);
  r.wanted_level = impl_->policy.wanted_level(texture);
  for (int l = 0; l < t.info.mip_levels; ++l)
    r.level_bytes.push_back(l >= r.first_level ? t.info.level_size(l) *
                                                     static_cast<std::uint64_t>(t.info.surfaces())
                                               : 0);
  return r;
}

mip_streamer_stats mip_streamer::stats() const {
  auto s = impl_->stats;
  s.policy = impl_->policy.stats();
  std::lock_guard lock(impl_->mutex);
  s.reads_pending = impl_->reads.size();
  s.copies_pending = 0;
  for (const auto& o : impl_->ops) s.copies_pending += o.issued ? 1 : 0;
  return s;
}

const mip_residency_policy& mip_streamer::policy() const { return impl_->policy; }
int mip_streamer::texture_count() const { return impl_->policy.texture_count(); }

}  // namespace vramkit::texture

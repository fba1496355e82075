// Helpers for the mr tests: a device_api decorator that records event and wait calls, a gate
// that a stream's host function blocks on until the test opens it, the stress tests' scale, the
// shadow model of the pools' randomized stress tests and their threaded stress.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "vramkit/core/device_api.hpp"
#include "vramkit/core/device_api_wrapper.hpp"
#include "vramkit/core/host_sim_device.hpp"
#include "vramkit/mr/device_api_resource.hpp"
#include "vramkit/mr/pool_resource.hpp"
#include "vramkit/mr/vmm_pool_resource.hpp"

namespace vramkit::testing {

/// How many times longer the randomized stress tests run: VRAMKIT_STRESS_SCALE (1 to 1000, default
/// 1; scripts/mr-sanitize raises it under the sanitizers).
inline int stress_scale() {
  const char* v = std::getenv("VRAMKIT_STRESS_SCALE");
  const int n = v != nullptr ? std::atoi(v) : 1;
  return n < 1 ? 1 : (n > 1000 ? 1000 : n);
}

/// Forwards everything to a host_sim_device and logs record_event and stream_wait_event.
class recording_device_api final : public device_api_wrapper {
 public:
  explicit recording_device_api(host_sim_options o = {}) : recording_device_api(make_sim(o)) {}

  struct recorded {
    enum class what { record, wait } kind;
    void* event;
    void* stream;
  };
  std::vector<recorded> log() {
    std::lock_guard lock(m_);
    return log_;
  }
  void clear_log() {
    std::lock_guard lock(m_);
    log_.clear();
  }

  std::shared_ptr<host_sim_device> sim;

  void record_event(event_view e, stream_view s) override {
    {
      std::lock_guard lock(m_);
      log_.push_back({recorded::what::record, e.handle, s.handle});
    }
    sim->record_event(e, s);
  }
  void stream_wait_event(stream_view s, event_view e) override {
    {
      std::lock_guard lock(m_);
      log_.push_back({recorded::what::wait, e.handle, s.handle});
    }
    sim->stream_wait_event(s, e);
  }

 private:
  explicit recording_device_api(std::shared_ptr<host_sim_device> s)
      : device_api_wrapper(s), sim(std::move(s)) {}
  static std::shared_ptr<host_sim_device> make_sim(const host_sim_options& o) {
    return std::make_shared<host_sim_device>(o);
  }

  std::mutex m_;
  std::vector<recorded> log_;
};

/// A gate: wait() blocks until open() (used inside a stream's host function to hold the stream).
class gate {
 public:
  void wait() {
    std::unique_lock lock(m_);
    cv_.wait(lock, [this] { return open_; });
  }
  void open() {
    {
      std::lock_guard lock(m_);
      open_ = true;
    }
    cv_.notify_all();
  }

 private:
  std::mutex m_;
  std::condition_variable cv_;
  bool open_ = false;
};

/// The block at an address a test keeps as an integer.
inline void* as_ptr(std::uintptr_t addr) noexcept {
  return reinterpret_cast<void*>(addr);  // NOLINT(performance-no-int-to-ptr)
}

/// n streams of a device, each destroyed before the device.
inline std::vector<std::unique_ptr<owned_stream>> make_streams(host_sim_device& dev, int n) {
  std::vector<std::unique_ptr<owned_stream>> ss;
  ss.reserve(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) ss.push_back(std::make_unique<owned_stream>(dev));
  return ss;
}

/// The two stream-ordered pools on a simulated device: pool_resource over its memory, and
/// vmm_pool_resource on its virtual memory.
struct classic_pool {
  using options = mr::pool_options;
  static std::shared_ptr<mr::pool_resource> make(const std::shared_ptr<host_sim_device>& dev,
                                                 options o) {
    return std::make_shared<mr::pool_resource>(std::make_shared<mr::device_api_resource>(dev), dev,
                                               std::move(o));
  }
};
struct vmm_pool {
  using options = mr::vmm_pool_options;
  static std::shared_ptr<mr::vmm_pool_resource> make(const std::shared_ptr<host_sim_device>& dev,
                                                     options o) {
    return std::make_shared<mr::vmm_pool_resource>(dev, std::move(o));
  }
};

/// A simulated device with two streams and a pool of `Kind` on it; members are destroyed in
/// reverse (the pool before the streams it may still order work on).
template <class Kind>
struct sim_stack {
  explicit sim_stack(typename Kind::options o = {}, host_sim_options d = {})
      : dev(std::make_shared<host_sim_device>(d)),
        a(*dev),
        b(*dev),
        pool(Kind::make(dev, std::move(o))) {}
  std::shared_ptr<host_sim_device> dev;
  owned_stream a;
  owned_stream b;
  decltype(Kind::make(dev, {})) pool;
};

/// The blocks a randomized stress test holds, by address: a pool must hand out 256-byte aligned
/// blocks that overlap no live one. Call add() under ASSERT_NO_FATAL_FAILURE.
struct shadow_model {
  struct live {
    std::size_t bytes;
    int stream;
    unsigned char tag;
  };
  using iterator = std::map<std::uintptr_t, live>::iterator;
  std::map<std::uintptr_t, live> blocks;
  std::int64_t bytes = 0;  ///< live bytes requested

  void add(void* p, std::size_t n, int stream, unsigned char tag) {
    const auto a = reinterpret_cast<std::uintptr_t>(p);
    ASSERT_EQ(a % 256, 0u);
    auto next = blocks.lower_bound(a);
    if (next != blocks.end()) {
      ASSERT_LE(a + n, next->first);
    }
    if (next != blocks.begin()) {
      ASSERT_LE(std::prev(next)->first + std::prev(next)->second.bytes, a);
    }
    blocks.emplace(a, live{n, stream, tag});
    bytes += static_cast<std::int64_t>(n);
  }
  /// A live block drawn by rng (still held).
  iterator pick(std::mt19937& rng) {
    auto it = blocks.begin();
    std::advance(it, rng() % blocks.size());
    return it;
  }
  void erase(iterator it) {
    bytes -= static_cast<std::int64_t>(it->second.bytes);
    blocks.erase(it);
  }
};

/// How the threaded stress of a pool runs: threads on their own and one shared stream, each
/// block written and checked by a host function on the stream that owns it.
struct thread_stress_options {
  std::uint32_t seed = 0;  ///< thread t draws from seed + t
  int ops = 0;             ///< allocations and frees per thread
  std::size_t large = 0;   ///< a quarter of the requests are up to this many bytes (else 8 KiB)
  std::size_t dense = 0;   ///< when not 0: the first min(n, dense) bytes filled, every 64th checked
  std::size_t stride = 0;  ///< otherwise: one byte every `stride` and the last one, checked
  int trim_every = 0;      ///< each thread trims the pool every this many operations (0: never)
};

/// Runs `threads` threads of allocations and frees on streams[t] and streams[threads] (shared)
/// and returns how many checks saw another block's bytes: a block handed to another stream
/// without an event wait is written by two stream workers at once (a data race ThreadSanitizer
/// reports, and a wrong byte here). The device is synchronized before it returns.
template <class Pool, class Streams>
int run_thread_stress(host_sim_device& dev, Pool& pool, Streams& streams, int threads,
                      const thread_stress_options& o) {
  std::atomic<int> corrupt{0};
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      std::mt19937 rng(o.seed + static_cast<std::uint32_t>(t));
      std::vector<std::tuple<void*, std::size_t, int>> mine;
      for (int op = 0; op < o.ops; ++op) {
        if (mine.size() < 8 && (mine.empty() || rng() % 2 == 0)) {
          const std::size_t n = 256 + rng() % (rng() % 4 == 0 ? o.large : std::size_t{8} * 1024);
          const int st = rng() % 3 == 0 ? threads : t;  // own stream or the shared one
          void* p = pool.allocate(n, 256, *streams[st]);
          const auto v = static_cast<unsigned char>(t * 50 + op);
          dev.launch_host_func(*streams[st], [p, n, v, &corrupt, &o] {
            auto* c = static_cast<unsigned char*>(p);
            if (o.dense != 0) {
              const std::size_t m = std::min<std::size_t>(n, o.dense);
              std::memset(c, v, m);
              for (std::size_t i = 0; i < m; i += 64) {
                if (c[i] != v) corrupt.fetch_add(1);
              }
              return;
            }
            for (std::size_t i = 0; i < n; i += o.stride) c[i] = v;
            c[n - 1] = v;
            for (std::size_t i = 0; i < n; i += o.stride) {
              if (c[i] != v) corrupt.fetch_add(1);
            }
          });
          mine.emplace_back(p, n, st);
        } else {
          const std::size_t i = rng() % mine.size();
          auto [p, n, st] = mine[i];
          pool.deallocate(p, n, 256, *streams[st]);
          mine.erase(mine.begin() + static_cast<std::ptrdiff_t>(i));
        }
        if (o.trim_every != 0 && op % o.trim_every == 0) pool.trim();
      }
      for (auto [p, n, st] : mine) pool.deallocate(p, n, 256, *streams[st]);
    });
  }
  for (auto& w : workers) w.join();
  dev.synchronize_device();
  return corrupt.load();
}

}  // namespace vramkit::testing

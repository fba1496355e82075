// copy_pool: a few threads that split large host memcpy calls (pageable <-> pinned staging) so that
// staging is not limited by one core's copy bandwidth. Thread-safe: several callers may copy at
// once; each call returns when its bytes are copied.
#pragma once

#include <algorithm>
#include <condition_variable>
#include <cstddef>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace vramkit::tier::detail {

class copy_pool {
 public:
  /// `threads` workers in total, the calling thread included (so threads - 1 are started).
  explicit copy_pool(int threads) : parts_(std::max(1, threads)) {
    for (int i = 1; i < parts_; ++i) workers_.emplace_back([this] { work(); });
  }
  ~copy_pool() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    cv_.notify_all();
    for (auto& t : workers_) t.join();
  }
  copy_pool(const copy_pool&) = delete;
  copy_pool& operator=(const copy_pool&) = delete;

  /// memcpy(dst, src, bytes) split over the pool; pieces of at least 1 MiB.
  void copy(void* dst, const void* src, std::size_t bytes) {
    constexpr std::size_t min_piece = std::size_t{1} << 20;
    const std::size_t parts = std::min<std::size_t>(static_cast<std::size_t>(parts_),
                                                    std::max<std::size_t>(1, bytes / min_piece));
    if (parts <= 1) {
      std::memcpy(dst, src, bytes);
      return;
    }
    // 4 KiB-aligned pieces so two threads never write the same page.
    const std::size_t piece = (bytes / parts + 4095) & ~std::size_t{4095};
    struct latch {
      std::mutex m;
      std::condition_variable cv;
      std::size_t left;
    } done{{}, {}, 0};
    auto* d = static_cast<char*>(dst);
    const auto* s = static_cast<const char*>(src);
    std::vector<std::pair<std::size_t, std::size_t>> ranges;
    for (std::size_t off = 0; off < bytes; off += piece)
      ranges.emplace_back(off, std::min(piece, bytes - off));
    done.left = ranges.size() - 1;
    {
      std::lock_guard lock(mutex_);
      for (std::size_t i = 1; i < ranges.size(); ++i) {
        const std::size_t off = ranges[i].first;  // (not a structured binding: clang 14 cannot
        const std::size_t n = ranges[i].second;   // capture one)
        tasks_.push_back([d, s, off, n, &done] {
          std::memcpy(d + off, s + off, n);
          std::lock_guard l(done.m);
          if (--done.left == 0) done.cv.notify_all();
        });
      }
    }
    cv_.notify_all();
    std::memcpy(d, s, ranges[0].second);
    std::unique_lock l(done.m);
    done.cv.wait(l, [&] { return done.left == 0; });
  }

 private:
  void work() {
    for (;;) {
      std::function<void()> task;
      {
        std::unique_lock lock(mutex_);
        cv_.wait(lock, [this] { return stopping_ || !tasks_.empty(); });
        if (tasks_.empty()) return;
        task = std::move(tasks_.front());
        tasks_.pop_front();
      }
      task();
    }
  }

  int parts_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;
  bool stopping_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace vramkit::tier::detail

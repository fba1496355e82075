// sample_history: a fixed-capacity ring of the most recent samples, shared between the thread that
// samples and the threads that read (HTTP handlers, the terminal view). Thread-safe (one mutex);
// readers get copies.
#pragma once

#include <cstddef>
#include <deque>
#include <mutex>
#include <optional>
#include <vector>

#include "vramkit/monitor/sample.hpp"

namespace vramkit::monitor {

class sample_history {
 public:
  /// Keeps at most `capacity` samples (at least 1); the oldest is dropped first.
  explicit sample_history(std::size_t capacity);

  void push(sample s);
  [[nodiscard]] std::optional<sample> latest() const;
  /// The samples with timestamp_ms > since_ms, oldest first.
  [[nodiscard]] std::vector<sample> since(std::int64_t since_ms) const;
  [[nodiscard]] std::size_t size() const;
  [[nodiscard]] std::size_t capacity() const noexcept { return capacity_; }

 private:
  std::size_t capacity_;
  mutable std::mutex mutex_;
  std::deque<sample> samples_;
};

}  // namespace vramkit::monitor

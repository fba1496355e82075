// sample_history: a mutex-guarded deque bounded to its capacity.
#include "vramkit/monitor/sample_history.hpp"

#include <algorithm>

namespace vramkit::monitor {

sample_history::sample_history(std::size_t capacity)
    : capacity_(std::max<std::size_t>(capacity, 1)) {}

void sample_history::push(sample s) {
  std::lock_guard lock(mutex_);
  samples_.push_back(std::move(s));
  while (samples_.size() > capacity_) samples_.pop_front();
}

std::optional<sample> sample_history::latest() const {
  std::lock_guard lock(mutex_);
  if (samples_.empty()) return std::nullopt;
  return samples_.back();
}

std::vector<sample> sample_history::since(std::int64_t since_ms) const {
  std::lock_guard lock(mutex_);
  std::vector<sample> out;
  for (const auto& s : samples_) {
    if (s.timestamp_ms > since_ms) out.push_back(s);
  }
  return out;
}

std::size_t sample_history::size() const {
  std::lock_guard lock(mutex_);
  return samples_.size();
}

}  // namespace vramkit::monitor

// statistics_adaptor and limit_adaptor.
#include <algorithm>

#include "vramkit/core/error.hpp"
#include "vramkit/core/units.hpp"
#include "vramkit/mr/limit_adaptor.hpp"
#include "vramkit/mr/statistics_adaptor.hpp"

namespace vramkit::mr {

statistics_adaptor::statistics_adaptor(std::shared_ptr<memory_resource> upstream,
                                       std::size_t small_size)
    : adaptor_resource(std::move(upstream), "statistics_adaptor"), small_size_(small_size) {
  stats_.resource = "statistics";
}

void* statistics_adaptor::do_allocate(std::size_t bytes, std::size_t alignment,
                                      stream_view stream) {
  void* p = nullptr;
  try {
    p = upstream_->allocate(bytes, alignment, stream);
  } catch (...) {
    std::lock_guard lock(mutex_);
    ++stats_.failed_allocations;
    throw;
  }
  if (p != nullptr) {
    const bool small = bytes <= small_size_;
    std::lock_guard lock(mutex_);
    stats_.bytes.add(small, static_cast<std::int64_t>(bytes));
    stats_.allocations.add(small, 1);
  }
  return p;
}

void statistics_adaptor::do_deallocate(void* ptr, std::size_t bytes, std::size_t alignment,
                                       stream_view stream) noexcept {
  upstream_->deallocate(ptr, bytes, alignment, stream);
  if (ptr == nullptr) return;
  const bool small = bytes <= small_size_;
  std::lock_guard lock(mutex_);
  stats_.bytes.remove(small, static_cast<std::int64_t>(bytes));
  stats_.allocations.remove(small, 1);
}

statistics_report statistics_adaptor::report() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

void statistics_adaptor::describe(summary_builder& builder) const {
  builder.add_layer("statistics");
  builder.add(report());
}

void statistics_adaptor::reset_peak() const noexcept {
  std::lock_guard lock(mutex_);
  stats_.bytes.reset_peak();
  stats_.allocations.reset_peak();
}

limit_adaptor::limit_adaptor(std::shared_ptr<memory_resource> upstream, std::size_t limit_bytes)
    : adaptor_resource(std::move(upstream), "limit_adaptor"), limit_(limit_bytes) {}

std::string limit_adaptor::name() const {
  return "limit(" + format_bytes(static_cast<double>(limit_)) + ")";
}

void* limit_adaptor::do_allocate(std::size_t bytes, std::size_t alignment, stream_view stream) {
  if (bytes == 0) return nullptr;
  const std::size_t charge = align_up(bytes, default_alignment);
  std::size_t before = used_.load(std::memory_order_relaxed);
  for (;;) {
    if (charge > limit_ || before > limit_ - charge) {
      rejections_.fetch_add(1, std::memory_order_relaxed);
      throw out_of_memory(bytes, name(),
                          "limit of " + std::to_string(limit_) + " bytes would be exceeded (" +
                              std::to_string(before) + " bytes in use)\n" + memory_summary(*this));
    }
    if (used_.compare_exchange_weak(before, before + charge, std::memory_order_relaxed)) break;
  }
  const std::size_t now = before + charge;
  std::size_t peak = peak_.load(std::memory_order_relaxed);
  while (now > peak && !peak_.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
  }
  try {
    return upstream_->allocate(bytes, alignment, stream);
  } catch (...) {
    used_.fetch_sub(charge, std::memory_order_relaxed);
    throw;
  }
}

void limit_adaptor::do_deallocate(void* ptr, std::size_t bytes, std::size_t alignment,
                                  stream_view stream) noexcept {
  if (ptr == nullptr) return;
  upstream_->deallocate(ptr, bytes, alignment, stream);
  used_.fetch_sub(align_up(bytes, default_alignment), std::memory_order_relaxed);
}

void limit_adaptor::describe(summary_builder& builder) const {
  builder.add_layer(name());
  limit_report r;
  r.resource = name();
  r.limit_bytes = limit_;
  r.used_bytes = used_.load();
  r.peak_bytes = peak_.load();
  r.rejections = rejections_.load();
  builder.add(r);
}

void limit_adaptor::reset_peak() const noexcept { peak_.store(used_.load()); }

}  // namespace vramkit::mr

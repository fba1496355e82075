// discovery_loop (discovery_loop.hpp): one thread waiting on a condition variable between lists,
// so that stop() wakes it at once.
#include "vramkit/cluster/discovery_loop.hpp"

#include <utility>

namespace vramkit::cluster {

discovery_loop::discovery_loop(list_function list, nodes_function set_nodes,
                               failure_function on_failure, discovery_schedule schedule)
    : list_(std::move(list)),
      set_nodes_(std::move(set_nodes)),
      on_failure_(std::move(on_failure)),
      schedule_(schedule) {}

discovery_loop::~discovery_loop() { stop(); }

result<std::size_t> discovery_loop::refresh() {
  auto found = list_();
  if (!found) return found.error();
  const std::size_t n = found->size();
  set_nodes_(std::move(*found));
  return n;
}

void discovery_loop::start(bool listed) {
  thread_ = std::thread([this, listed] { run(listed); });
}

void discovery_loop::run(bool listed) {
  bool ok = listed;
  std::unique_lock lock(mutex_);
  while (!stopping_) {
    wake_.wait_for(lock, ok ? schedule_.period : schedule_.retry, [this] { return stopping_; });
    if (stopping_) break;
    // The list and the callbacks run unlocked: stop() must not wait behind a slow API.
    lock.unlock();
    auto r = refresh();
    if (!r && on_failure_) on_failure_(r.error().reason);
    ok = r.has_value();
    lock.lock();
  }
}

void discovery_loop::stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

}  // namespace vramkit::cluster

// device_plugin_service (device_plugin_service.hpp): a watching thread that checks the socket file
// and, when it is gone, replaces the server with a new one and registers it.
#include "vramkit/cluster/device_plugin_service.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <exception>
#include <filesystem>
#include <utility>

namespace vramkit::cluster {

device_plugin_service::device_plugin_service(device_plugin_options options,
                                             device_plugin_sources sources, kubelet_endpoint where,
                                             log_function log)
    : options_(std::move(options)),
      sources_(std::move(sources)),
      where_(std::move(where)),
      log_(std::move(log)),
      socket_(
          (std::filesystem::path(where_.kubelet_socket).parent_path() / where_.endpoint).string()) {
}

device_plugin_service::~device_plugin_service() { stop(); }

void device_plugin_service::serve_and_register() {
  auto s = std::make_unique<device_plugin_server>(options_, sources_);
  s->start(socket_);
  s->register_with_kubelet(where_.kubelet_socket, where_.endpoint);
  std::lock_guard lock(server_mutex_);
  server_ = std::move(s);
}

void device_plugin_service::start() {
  serve_and_register();
  watcher_ = std::thread([this] { watch(); });
}

void device_plugin_service::watch() {
  // Sleeps in slices of at most 100 ms so that stop() is not kept waiting a whole check period.
  const auto slice =
      std::min<std::chrono::milliseconds>(where_.check_every, std::chrono::milliseconds(100));
  while (!stopping_.load()) {
    for (auto waited = std::chrono::milliseconds(0);
         waited < where_.check_every && !stopping_.load(); waited += slice)
      std::this_thread::sleep_for(slice);
    if (stopping_.load()) break;
    struct stat st {};
    if (::stat(socket_.c_str(), &st) == 0) continue;
    if (log_) log_(socket_ + " is gone (kubelet restart?): re-registering");
    try {
      {
        std::lock_guard lock(server_mutex_);
        if (server_) server_->stop();
      }
      serve_and_register();
    } catch (const std::exception& e) {
      if (log_) log_(e.what());
    }
  }
}

void device_plugin_service::stop() noexcept {
  stopping_.store(true);
  if (watcher_.joinable()) watcher_.join();
  std::lock_guard lock(server_mutex_);
  if (server_) {
    server_->stop();
    server_.reset();
    ::unlink(socket_.c_str());
  }
}

}  // namespace vramkit::cluster

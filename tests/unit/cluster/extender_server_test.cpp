// The extender's HTTP front: a stop() that arrives before run() (SIGTERM right after start) makes
// run() return instead of being lost; bad bind addresses are usage errors.
#include "vramkit/cluster/extender_server.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <future>

#include "vramkit/core/error.hpp"

namespace vramkit::cluster {
namespace {

node_lookup no_nodes() {
  return [](const std::vector<std::string>&) { return node_states{}; };
}

TEST(ExtenderServer, StopBeforeRunIsNotLost) {
  if (!extender_server_available()) GTEST_SKIP() << "built without an HTTP server";
  extender_server s(no_nodes(), {}, "127.0.0.1", 0);
  ASSERT_GT(s.bind(), 0);
  s.stop();
  auto done = std::async(std::launch::async, [&s] { s.run(); });
  EXPECT_EQ(done.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  if (done.wait_for(std::chrono::seconds(0)) != std::future_status::ready) std::abort();
}

TEST(ExtenderServer, BindingSomethingThatIsNoAddressIsAUsageError) {
  if (!extender_server_available()) GTEST_SKIP() << "built without an HTTP server";
  extender_server s(no_nodes(), {}, "notanaddress", 0);
  EXPECT_THROW(s.bind(), invalid_input);
}

}  // namespace
}  // namespace vramkit::cluster

// http_server over real loopback sockets: keep-alive without a request cap, idle and slow
// connections that hold no worker, the per-client limit, the header limit, bind errors, and a
// stop() that comes before anyone waits.
#include "vramkit/monitor/http_server.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "vramkit/core/error.hpp"

namespace vramkit::monitor {
namespace {

// A client socket to 127.0.0.1:port with a receive timeout, closed on destruction.
class client {
 public:
  explicit client(int port, int timeout_ms = 5000) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    timeval tv{timeout_ms / 1000, (timeout_ms % 1000) * 1000};
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    int one = 1;
    setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<std::uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  }
  ~client() {
    if (fd_ >= 0) close(fd_);
  }
  client(const client&) = delete;
  client& operator=(const client&) = delete;
  client(client&& o) noexcept : fd_(o.fd_), connected_(o.connected_) { o.fd_ = -1; }

  [[nodiscard]] bool connected() const { return connected_; }
  bool send_all(const std::string& s) {
    return ::send(fd_, s.data(), s.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(s.size());
  }
  // One response (headers + Content-Length body); empty when the peer closed or timed out.
  std::string read_response() {
    std::string buf;
    char tmp[4096];
    for (;;) {
      auto head_end = buf.find("\r\n\r\n");
      if (head_end != std::string::npos) {
        std::size_t length = 0;
        auto cl = buf.find("Content-Length: ");
        if (cl != std::string::npos && cl < head_end) length = std::stoul(buf.substr(cl + 16));
        if (buf.size() >= head_end + 4 + length) return buf.substr(0, head_end + 4 + length);
      }
      ssize_t n = recv(fd_, tmp, sizeof tmp, 0);
      if (n <= 0) return buf.find("\r\n\r\n") == std::string::npos ? std::string() : buf;
      buf.append(tmp, static_cast<std::size_t>(n));
    }
  }
  // True when the server closed the connection (recv returns 0 or the connection was reset).
  bool closed_by_peer() {
    char c;
    ssize_t n = recv(fd_, &c, 1, 0);
    return n == 0 || (n < 0 && errno == ECONNRESET);
  }

 private:
  int fd_ = -1;
  bool connected_ = false;
};

std::string get(const std::string& path) {
  return "GET " + path + " HTTP/1.1\r\nHost: localhost\r\n\r\n";
}

http_server_options loopback() {
  http_server_options o;
  o.bind_address = "127.0.0.1";
  o.port = 0;
  return o;
}

http_response echo_path(const http_request& r) {
  http_response res;
  res.body = r.method + " " + r.path + (r.param("x") ? " x=" + *r.param("x") : "") + "\n";
  return res;
}

class HttpServer : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!http_server_built()) GTEST_SKIP() << "built without libmicrohttpd";
  }
};

TEST_F(HttpServer, KeepAliveServesHundredsOfRequestsOnOneConnection) {
  http_server s(loopback(), echo_path);
  const int port = s.start();
  client c(port);
  ASSERT_TRUE(c.connected());
  // cpp-httplib's default closed a kept-alive connection after 5 requests (20 as configured).
  for (int i = 0; i < 300; ++i) {
    ASSERT_TRUE(c.send_all(get("/r?x=" + std::to_string(i))));
    std::string r = c.read_response();
    ASSERT_NE(r.find("HTTP/1.1 200"), std::string::npos) << "request " << i << ": " << r;
    ASSERT_NE(r.find("GET /r x=" + std::to_string(i)), std::string::npos) << r;
    ASSERT_EQ(r.find("Connection: close"), std::string::npos) << "request " << i;
  }
}

TEST_F(HttpServer, SlowAndIdleConnectionsDoNotStarveANewRequest) {
  auto o = loopback();
  o.poll_threads = 2;
  o.max_connections_per_client = 0;  // every client here is 127.0.0.1
  http_server s(o, echo_path);
  const int port = s.start();
  // More stalled connections than a thread-per-connection server has workers (64 before): half
  // idle, half stuck in the middle of a request line.
  std::vector<client> stalled;
  for (int i = 0; i < 300; ++i) {
    stalled.emplace_back(port);
    ASSERT_TRUE(stalled.back().connected()) << i;
    if (i % 2 == 1) stalled.back().send_all("GET /metr");
  }
  client c(port, 3000);
  ASSERT_TRUE(c.connected());
  ASSERT_TRUE(c.send_all(get("/healthz")));
  EXPECT_NE(c.read_response().find("HTTP/1.1 200"), std::string::npos);
}

TEST_F(HttpServer, PerClientLimitClosesTheExtraConnectionOnly) {
  auto o = loopback();
  o.max_connections_per_client = 4;
  http_server s(o, echo_path);
  const int port = s.start();
  std::vector<client> held;
  for (int i = 0; i < 4; ++i) {
    held.emplace_back(port);
    ASSERT_TRUE(held.back().send_all(get("/held")));
    ASSERT_NE(held.back().read_response().find("200"), std::string::npos);
  }
  client extra(port, 2000);
  ASSERT_TRUE(extra.connected());  // the kernel accepts; the server closes it at once
  extra.send_all(get("/extra"));
  EXPECT_TRUE(extra.closed_by_peer());
  held.pop_back();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  client again(port);
  ASSERT_TRUE(again.send_all(get("/again")));
  EXPECT_NE(again.read_response().find("GET /again"), std::string::npos);
}

TEST_F(HttpServer, OversizedHeadersAreRefusedAndTheServerKeepsServing) {
  auto o = loopback();
  o.max_header_bytes = 8 * 1024;
  http_server s(o, echo_path);
  const int port = s.start();
  {
    client c(port);
    c.send_all("GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + std::string(64 * 1024, 'a') + "\r\n\r\n");
    std::string r = c.read_response();
    // Refused with a 4xx (libmicrohttpd answers 431 or 413) or closed: never served.
    EXPECT_EQ(r.find("200 OK"), std::string::npos) << r.substr(0, 200);
  }
  client ok(port);
  ASSERT_TRUE(ok.send_all(get("/after")));
  EXPECT_NE(ok.read_response().find("GET /after"), std::string::npos);
}

TEST_F(HttpServer, BodiesArriveWholeAndOversizedOnesGet413) {
  auto o = loopback();
  o.max_body_bytes = 1000;
  http_server s(o, [](const http_request& r) {
    http_response res;
    res.body = std::to_string(r.body.size());
    return res;
  });
  const int port = s.start();
  client c(port);
  std::string body(900, 'b');
  c.send_all("POST /f HTTP/1.1\r\nHost: x\r\nContent-Length: 900\r\n\r\n" + body);
  EXPECT_NE(c.read_response().find("\r\n\r\n900"), std::string::npos);
  client big(port);
  big.send_all("POST /f HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\n\r\n" +
               std::string(5000, 'b'));
  EXPECT_NE(big.read_response().find("HTTP/1.1 413"), std::string::npos);
}

TEST_F(HttpServer, HandlerExceptionsBecome500) {
  http_server s(loopback(),
                [](const http_request&) -> http_response { throw std::runtime_error("boom"); });
  client c(s.start());
  c.send_all(get("/"));
  std::string r = c.read_response();
  EXPECT_NE(r.find("HTTP/1.1 500"), std::string::npos);
  EXPECT_NE(r.find("boom"), std::string::npos);
}

TEST_F(HttpServer, AnAddressThatIsNoneIsAUsageError) {
  auto o = loopback();
  o.bind_address = "notanaddress";
  http_server s(o, echo_path);
  try {
    s.start();
    FAIL() << "bound 'notanaddress'";
  } catch (const invalid_input& e) {
    EXPECT_NE(std::string(e.what()).find("'notanaddress'"), std::string::npos) << e.what();
  }
}

TEST_F(HttpServer, APortInUseIsNamed) {
  http_server first(loopback(), echo_path);
  const int port = first.start();
  auto o = loopback();
  o.port = port;
  http_server second(o, echo_path);
  try {
    second.start();
    FAIL() << "bound a port in use";
  } catch (const error& e) {
    EXPECT_NE(std::string(e.what()).find("address already in use"), std::string::npos) << e.what();
  }
}

TEST_F(HttpServer, StopBeforeWaitMakesWaitReturn) {
  http_server s(loopback(), echo_path);
  s.start();
  s.stop();
  s.wait();  // would block forever if the stop were lost
  http_server never(loopback(), echo_path);
  never.stop();
  never.wait();
  EXPECT_THROW(never.start(), error);
}

TEST(HttpUrl, BracketsIpv6Literals) {
  EXPECT_EQ(http_url("127.0.0.1", 9410), "http://127.0.0.1:9410/");
  EXPECT_EQ(http_url("::1", 9410), "http://[::1]:9410/");
  EXPECT_EQ(http_url("fe80::1%eth0", 80), "http://[fe80::1%eth0]:80/");
  EXPECT_EQ(http_url("node-1", 80), "http://node-1:80/");
}

}  // namespace
}  // namespace vramkit::monitor

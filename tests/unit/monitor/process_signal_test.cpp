// process_signal: a signal reaches our own child; a missing pid and (as root, from a child that
// drops to an unprivileged uid) another user's process are refused with a reason.
#include "vramkit/monitor/process_signal.hpp"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>

using namespace vramkit::monitor;

TEST(process_signal, sends_to_own_child) {
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    pause();
    _exit(0);
  }
  EXPECT_EQ(signal_refusal(static_cast<std::uint32_t>(child)), "");
  auto out = send_process_signal(static_cast<std::uint32_t>(child), SIGTERM);
  EXPECT_TRUE(out.sent) << out.message;
  EXPECT_EQ(out.message, "sent SIGTERM to pid " + std::to_string(child));
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status));
  EXPECT_EQ(WTERMSIG(status), SIGTERM);
}

TEST(process_signal, refuses_a_missing_pid) {
  auto out = send_process_signal(0x7ffffff0u, SIGTERM);
  EXPECT_FALSE(out.sent);
  EXPECT_NE(out.message.find("not visible"), std::string::npos) << out.message;
  EXPECT_EQ(send_process_signal(0, SIGKILL).message, "no process selected");
}

TEST(process_signal, refuses_another_users_process) {
  // Checked from an unprivileged uid against a process of another (this one, or init as a
  // non-root user).
  pid_t target = geteuid() == 0 ? getpid() : 1;
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    if (geteuid() == 0 && setuid(65534) != 0) _exit(3);
    auto why = signal_refusal(static_cast<std::uint32_t>(target));
    auto out = send_process_signal(static_cast<std::uint32_t>(target), 0);
    bool ok = why.find("only your own processes") != std::string::npos && !out.sent;
    _exit(ok ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "3 = setuid failed, 1 = not refused";
}

TEST(process_signal, names) {
  EXPECT_EQ(signal_name(SIGKILL), "SIGKILL");
  EXPECT_EQ(signal_name(SIGINT), "SIGINT");
  EXPECT_EQ(signal_name(SIGUSR1), "signal " + std::to_string(SIGUSR1));
}

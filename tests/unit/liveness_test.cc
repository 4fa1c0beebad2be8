// A watched peer process that ends is noticed; a pid not seen when the
// watch begins (another pid namespace) is never taken for an ended one.
#include "engine/common/liveness.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

namespace ferry {
namespace {

TEST(PeerLiveness, AnEndedPeerIsNoticed) {
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    pause();
    _exit(0);
  }
  PeerLiveness liveness;
  liveness.watch({0, static_cast<std::int32_t>(child)});
  EXPECT_EQ(liveness.ended_rank(), -1);
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  int ended = -1;
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (ended < 0 && std::chrono::steady_clock::now() < give_up) {
    ended = liveness.ended_rank();
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(ended, 1);
}

TEST(PeerLiveness, APidNotSeenAtTheStartIsNotWatched) {
  // Beyond any pid_max: a process in another pid namespace, as seen here.
  PeerLiveness liveness;
  liveness.watch({0, 0x7ffffff0});
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  EXPECT_EQ(liveness.ended_rank(), -1);
}

}  // namespace
}  // namespace ferry

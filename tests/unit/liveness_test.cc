// A watched peer process that ends is noticed; a pid not seen when the
// watch begins (another pid namespace) is never taken for an ended one. The
// peer watch raises the abandon word device waits poll, and only while it
// lives.
#include "engine/common/liveness.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>

#include "engine/core/peer_watch.h"

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


pid_t paused_child() {
  const pid_t child = fork();
  if (child == 0) {
    pause();
    _exit(0);
  }
  return child;
}

void end(pid_t child) {
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
}

int threads_of_this_process() {
  int threads = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator("/proc/self/task")) ++threads;
  return threads;
}

// Each in a process of its own: the abandon word, once raised, stays so.
TEST(PeerWatch, AnEndedPeerRaisesTheAbandonWord) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  auto noticed = [] {
    const pid_t child = paused_child();
    if (child < 0) _exit(2);
    const std::uint32_t* word = abandon_word(gpu::emulated_backend());
    if (!word || __atomic_load_n(word, __ATOMIC_ACQUIRE) != 0 || device_waits_abandoned()) _exit(3);
    {  // The watch's thread has ended before _exit.
      PeerWatch watch({0, 0, static_cast<std::int32_t>(child)});
      end(child);
      const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(2);
      while (!device_waits_abandoned() && std::chrono::steady_clock::now() < give_up)
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    const std::string named = "rank 2 (pid " + std::to_string(child) + ") of a communicator of 3 ranks";
    const std::uint32_t raised = __atomic_load_n(word, __ATOMIC_ACQUIRE);
    std::fprintf(stderr, "abandoned %d word %u: %s\n", device_waits_abandoned(), raised, last_ended_peer().c_str());
    const bool right = device_waits_abandoned() && raised == 1 && last_ended_peer().find(named) == 0 &&
                       abandoned_or(Status::kTimeout) == Status::kPeerEnded &&
                       abandoned_or(Status::kGpuError) == Status::kGpuError;
    _exit(right ? 0 : 1);
  };
  EXPECT_EXIT(noticed(), ::testing::ExitedWithCode(0), "abandoned 1 word 1: rank 2");
}

TEST(PeerWatch, OnlyWhileItLivesAndItsThreadEndsWithTheLast) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  auto ignored = [] {
    const pid_t child = paused_child();
    if (child < 0) _exit(2);
    // One round first: a sanitizer's own thread may start with the first one.
    { PeerWatch warm_up({0, child}); }
    const int threads = threads_of_this_process();
    for (int round = 0; round < 50; ++round) {
      auto first = std::make_unique<PeerWatch>(std::vector<std::int32_t>{0, child});
      PeerWatch second({child, 0});
      first.reset();
    }
    const int threads_after = threads_of_this_process();
    end(child);
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    std::fprintf(stderr, "threads %d then %d; abandoned %d\n", threads, threads_after, device_waits_abandoned());
    _exit(threads_after == threads && !device_waits_abandoned() ? 0 : 1);
  };
  EXPECT_EXIT(ignored(), ::testing::ExitedWithCode(0), "abandoned 0");
}

}  // namespace
}  // namespace ferry

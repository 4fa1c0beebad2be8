#include "engine/transport/fd_passing.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "tests/unit/process_ranks.h"
#include "tests/unit/thread_bootstrap.h"

namespace ferry {
namespace {

constexpr std::size_t kMemfds = 3;

std::string memfd_text(int rank, std::size_t i) { return "rank " + std::to_string(rank) + " memfd " + std::to_string(i); }

// Each rank offers kMemfds memfds holding its own text and one end of a
// datagram socket pair: a descriptor that /proc/<pid>/fd cannot open, like
// CUDA's. Every rank checks every rank's memfds, then sends one datagram
// through every rank's socket and checks it got one from each rank.
std::string exchange_and_check(int rank, Bootstrap& bootstrap, FdPassing method, FdPassing expect_used) {
  const int n = bootstrap.size();
  std::vector<int> mine;
  for (std::size_t i = 0; i < kMemfds; ++i) {
    const int fd = memfd_create("fd-passing-test", MFD_CLOEXEC);
    const std::string text = memfd_text(rank, i);
    if (fd < 0 || pwrite(fd, text.data(), text.size(), 0) != static_cast<ssize_t>(text.size())) return "memfd";
    mine.push_back(fd);
  }
  int pair[2];
  if (socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0, pair) != 0) return "socketpair";
  mine.push_back(pair[0]);
  const std::size_t count = mine.size();

  std::vector<int> all(n * count, -1);
  FdPassing used = FdPassing::kAuto;
  const Status status = allgather_fds(bootstrap, mine.data(), count, all.data(), method, &used);
  for (int fd : mine) close(fd);  // the received descriptors must not depend on these
  if (status != Status::kOk) return std::string("allgather_fds: ") + status_name(status);
  if (used != expect_used) return std::string("went by ") + fd_passing_name(used);

  std::string failure;
  for (int q = 0; q < n && failure.empty(); ++q) {
    for (std::size_t i = 0; i < kMemfds; ++i) {
      const int fd = all[q * count + i];
      char text[64] = {};
      if (fd < 0 || pread(fd, text, sizeof(text) - 1, 0) < 0 || memfd_text(q, i) != text) {
        failure = "rank " + std::to_string(q) + " memfd " + std::to_string(i) + " reads '" + text + "'";
        break;
      }
      if (!(fcntl(fd, F_GETFD) & FD_CLOEXEC)) failure = "a received descriptor is not close-on-exec";
    }
    const int to_q = all[q * count + kMemfds];
    const std::int32_t from = rank;
    if (failure.empty() && send(to_q, &from, sizeof(from), 0) != sizeof(from))
      failure = "cannot send through rank " + std::to_string(q) + "'s socket";
  }
  std::vector<int> heard(n, 0);
  for (int k = 0; k < n && failure.empty(); ++k) {
    std::int32_t from = -1;
    if (recv(pair[1], &from, sizeof(from), 0) != sizeof(from) || from < 0 || from >= n) {
      failure = "no datagram";
      break;
    }
    ++heard[from];
  }
  for (int q = 0; q < n && failure.empty(); ++q)
    if (heard[q] != 1) failure = "heard " + std::to_string(heard[q]) + " datagrams from rank " + std::to_string(q);
  for (int fd : all) close(fd);
  close(pair[1]);
  if (bootstrap.barrier() != Status::kOk && failure.empty()) failure = "barrier";
  return failure;
}

bool pidfd_usable() {
  const int pidfd = static_cast<int>(syscall(434 /* pidfd_open */, getpid(), 0));
  if (pidfd < 0) return false;
  const int fd = static_cast<int>(syscall(438 /* pidfd_getfd */, pidfd, 0, 0));
  close(pidfd);
  if (fd < 0) return false;
  close(fd);
  return true;
}

void expect_all_ok(const std::vector<std::string>& results) {
  for (std::size_t r = 0; r < results.size(); ++r) EXPECT_EQ(results[r], "") << "rank " << r;
}

TEST(FdPassing, ProcessesBySocket) {
  expect_all_ok(testing::run_rank_processes(3, [](int rank, Bootstrap& bootstrap) {
    return exchange_and_check(rank, bootstrap, FdPassing::kSocket, FdPassing::kSocket);
  }));
}

TEST(FdPassing, ProcessesByPidfd) {
  if (!pidfd_usable()) GTEST_SKIP() << "pidfd_getfd is not permitted here";
  expect_all_ok(testing::run_rank_processes(3, [](int rank, Bootstrap& bootstrap) {
    return exchange_and_check(rank, bootstrap, FdPassing::kPidfd, FdPassing::kPidfd);
  }));
}

TEST(FdPassing, ProcessesAutoPrefersPidfd) {
  const FdPassing expected = pidfd_usable() ? FdPassing::kPidfd : FdPassing::kSocket;
  expect_all_ok(testing::run_rank_processes(2, [expected](int rank, Bootstrap& bootstrap) {
    return exchange_and_check(rank, bootstrap, FdPassing::kAuto, expected);
  }));
}

TEST(FdPassing, RanksAsThreadsBothWays) {
  for (FdPassing method : {FdPassing::kSocket, FdPassing::kPidfd}) {
    std::vector<std::string> results(4);
    testing::run_ranks(4, [&](int rank, std::unique_ptr<Bootstrap> bootstrap) {
      results[rank] = exchange_and_check(rank, *bootstrap, method, method);
    });
    expect_all_ok(results);
  }
}

// A rank that offers another count than the others: every rank is told.
TEST(FdPassing, MismatchedCountsFailEverywhere) {
  std::vector<Status> statuses(3);
  testing::run_ranks(3, [&](int rank, std::unique_ptr<Bootstrap> bootstrap) {
    int fds[2] = {dup(0), dup(0)};
    int all[6] = {-1, -1, -1, -1, -1, -1};
    statuses[rank] = allgather_fds(*bootstrap, fds, rank == 1 ? 1 : 2, all, FdPassing::kSocket);
    for (int fd : fds) close(fd);
    for (int fd : all)
      if (fd >= 0) close(fd);
  });
  for (Status s : statuses) EXPECT_EQ(s, Status::kInvalidArgument);
}

}  // namespace
}  // namespace ferry

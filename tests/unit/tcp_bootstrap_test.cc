#include "engine/bootstrap/tcp_bootstrap.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace ferry {
namespace {

TcpBootstrapOptions loopback_within(std::int64_t timeout_s, std::string* failure = nullptr) {
  TcpBootstrapOptions options;
  options.timeout_s = timeout_s;
  options.loopback = true;
  options.failure = failure;
  return options;
}

// Runs body(rank, bootstrap) for each rank in `ranks` on its own thread, all
// joining the job `id` of `size` ranks.
void run_tcp_ranks(const std::string& id, int size, const std::vector<int>& ranks,
                   const std::function<void(int, Status, Bootstrap*)>& body, std::int64_t timeout_s = 5) {
  std::vector<std::thread> threads;
  for (int rank : ranks)
    threads.emplace_back([&, rank] {
      std::unique_ptr<Bootstrap> bootstrap;
      const Status status = make_tcp_bootstrap(id, rank, size, &bootstrap, loopback_within(timeout_s));
      body(rank, status, bootstrap.get());
    });
  for (auto& t : threads) t.join();
}

std::vector<int> all_ranks(int size) {
  std::vector<int> ranks(static_cast<std::size_t>(size));
  for (int r = 0; r < size; ++r) ranks[r] = r;
  return ranks;
}

// Round r of rank `rank` contributes bytes that no other (rank, round) does.
std::vector<std::uint8_t> contribution(int rank, int round, std::size_t bytes) {
  std::vector<std::uint8_t> data(bytes);
  for (std::size_t i = 0; i < bytes; ++i) data[i] = static_cast<std::uint8_t>(rank * 31 + round * 7 + i);
  return data;
}

void expect_allgather_rounds(int rank, Bootstrap* bootstrap) {
  const int size = bootstrap->size();
  EXPECT_EQ(bootstrap->rank(), rank);
  for (int round = 0; round < 4; ++round) {
    const std::size_t bytes = 1 + round * 1000;  // up to a few KiB: frames span several reads
    std::vector<std::uint8_t> all(bytes * size);
    ASSERT_EQ(bootstrap->allgather(contribution(rank, round, bytes).data(), all.data(), bytes), Status::kOk);
    for (int r = 0; r < size; ++r) {
      const auto expected = contribution(r, round, bytes);
      EXPECT_EQ(std::memcmp(all.data() + r * bytes, expected.data(), bytes), 0) << "rank " << r << " round " << round;
    }
    ASSERT_EQ(bootstrap->barrier(), Status::kOk);
  }
}

int port_of(const std::string& id) {
  const std::size_t secret = id.rfind(':');
  const std::size_t port = id.rfind(':', secret - 1);
  return std::stoi(id.substr(port + 1, secret - port - 1));
}

// A raw loopback connection to the root, with a receive timeout so that a
// root that fails to reject it fails the test instead of hanging it.
int connect_raw(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<std::uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  timeval limit{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof(limit));
  EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  return fd;
}

// Reads until the root closes the connection; false if it never does. A root
// that closes with our bytes unread resets the connection instead.
bool root_closes(int fd) {
  char buffer[256];
  for (;;) {
    const ssize_t got = recv(fd, buffer, sizeof(buffer), 0);
    if (got == 0 || (got < 0 && errno == ECONNRESET)) return true;
    if (got < 0) return false;
  }
}

TEST(TcpBootstrap, AllgatherAndBarrierOverSeveralRounds) {
  for (int size : {1, 2, 3, 8}) {
    SCOPED_TRACE("size " + std::to_string(size));
    std::string id;
    ASSERT_EQ(create_unique_id(&id, loopback_within(5)), Status::kOk);
    run_tcp_ranks(id, size, all_ranks(size), [](int rank, Status status, Bootstrap* bootstrap) {
      ASSERT_EQ(status, Status::kOk) << "rank " << rank;
      expect_allgather_rounds(rank, bootstrap);
    });
  }
}

TEST(TcpBootstrap, WrongSecretIsRejectedWithoutTakingARank) {
  std::string id;
  ASSERT_EQ(create_unique_id(&id, loopback_within(5)), Status::kOk);
  std::string forged = id;
  forged.back() = forged.back() == '0' ? '1' : '0';

  std::thread root([&] {
    run_tcp_ranks(id, 3, {0}, [](int rank, Status status, Bootstrap* bootstrap) {
      ASSERT_EQ(status, Status::kOk);
      expect_allgather_rounds(rank, bootstrap);
    });
  });
  // The impostor claims rank 1 before the real rank 1 arrives.
  std::string failure;
  std::unique_ptr<Bootstrap> impostor;
  EXPECT_NE(make_tcp_bootstrap(forged, 1, 3, &impostor, loopback_within(5, &failure)), Status::kOk);
  EXPECT_NE(failure.find("turned away"), std::string::npos) << failure;
  EXPECT_EQ(impostor, nullptr);

  run_tcp_ranks(id, 3, {1, 2}, [](int rank, Status status, Bootstrap* bootstrap) {
    ASSERT_EQ(status, Status::kOk) << "rank " << rank;
    expect_allgather_rounds(rank, bootstrap);
  });
  root.join();
}

TEST(TcpBootstrap, MissingRankTimesOutNamingIt) {
  std::string id;
  ASSERT_EQ(create_unique_id(&id, loopback_within(1)), Status::kOk);
  std::string root_failure;
  Status root_status = Status::kOk;
  const auto start = std::chrono::steady_clock::now();
  std::thread root([&] {
    std::unique_ptr<Bootstrap> bootstrap;
    root_status = make_tcp_bootstrap(id, 0, 4, &bootstrap, loopback_within(1, &root_failure));
  });
  run_tcp_ranks(id, 4, {1, 2}, [](int rank, Status status, Bootstrap*) {
    EXPECT_NE(status, Status::kOk) << "rank " << rank << " formed a bootstrap with a rank missing";
  }, 1);
  root.join();
  EXPECT_EQ(root_status, Status::kTimeout);
  EXPECT_NE(root_failure.find("rank 3 of 4 did not connect to the bootstrap root within 1 s"), std::string::npos)
      << root_failure;
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(3));
}

TEST(TcpBootstrap, MalformedAndOversizedJoinsAreRejected) {
  std::string id;
  ASSERT_EQ(create_unique_id(&id, loopback_within(5)), Status::kOk);
  std::thread root([&] {
    run_tcp_ranks(id, 2, {0}, [](int rank, Status status, Bootstrap* bootstrap) {
      ASSERT_EQ(status, Status::kOk);
      expect_allgather_rounds(rank, bootstrap);
    });
  });

  // Frames are a uint32 length, then the payload; a join is 24 bytes.
  const std::uint32_t oversized = 1u << 30;
  const std::uint32_t join_bytes = 24;
  std::uint8_t garbage[24];
  std::memset(garbage, 0xab, sizeof(garbage));
  struct Attempt {
    const char* what;
    std::uint32_t length;
    std::size_t payload_bytes;
  };
  for (const Attempt& attempt : {Attempt{"oversized", oversized, 0}, Attempt{"short", 8, 8},
                                 Attempt{"bad magic", join_bytes, sizeof(garbage)}}) {
    SCOPED_TRACE(attempt.what);
    const int fd = connect_raw(port_of(id));
    ASSERT_EQ(send(fd, &attempt.length, sizeof(attempt.length), MSG_NOSIGNAL), 4);
    ASSERT_EQ(send(fd, garbage, attempt.payload_bytes, MSG_NOSIGNAL), static_cast<ssize_t>(attempt.payload_bytes));
    EXPECT_TRUE(root_closes(fd));
    close(fd);
  }

  run_tcp_ranks(id, 2, {1}, [](int rank, Status status, Bootstrap* bootstrap) {
    ASSERT_EQ(status, Status::kOk);
    expect_allgather_rounds(rank, bootstrap);
  });
  root.join();
}

TEST(TcpBootstrap, RootMustHaveCreatedTheId) {
  std::string id;
  ASSERT_EQ(create_unique_id(&id, loopback_within(5)), Status::kOk);
  std::unique_ptr<Bootstrap> bootstrap;
  std::string foreign = id;
  foreign.back() = foreign.back() == '0' ? '1' : '0';
  EXPECT_EQ(make_tcp_bootstrap(foreign, 0, 1, &bootstrap, loopback_within(1)), Status::kInvalidArgument);
  EXPECT_EQ(make_tcp_bootstrap("no-port-here", 1, 2, &bootstrap, loopback_within(1)), Status::kInvalidArgument);
  EXPECT_EQ(make_tcp_bootstrap(id, 0, 1, &bootstrap, loopback_within(1)), Status::kOk);
  EXPECT_EQ(make_tcp_bootstrap(id, 0, 1, &bootstrap, loopback_within(1)), Status::kInvalidArgument);
}

}  // namespace
}  // namespace ferry

// The socket provider in one process: ranks as threads over a loopback TCP
// bootstrap. Interface choice, the challenge-response against a stranger,
// messages in posting order whichever stream and whenever their receive is
// posted (across the edges of a stream's read-ahead buffer too), a send
// that goes on while its sender is away, a rank whose
// interface is unusable, and a peer that leaves.
#include "engine/transport/socket_network.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "engine/bootstrap/tcp_bootstrap.h"
#include "tests/unit/loopback_ranks.h"

namespace ferry {
namespace {

using Clock = std::chrono::steady_clock;

// Runs body(rank, bootstrap) for every rank of a fresh loopback TCP
// bootstrap, each on its own thread.

SocketNetworkOptions on_loopback(int streams = 2) {
  SocketNetworkOptions options;
  options.ifname = "lo";
  options.streams = streams;
  return options;
}


std::vector<char> pattern(int from, int message, std::size_t bytes) {
  std::vector<char> data(bytes);
  for (std::size_t i = 0; i < bytes; ++i) data[i] = static_cast<char>(from * 131 + message * 7 + i * 13);
  return data;
}

TEST(SocketInterface, ChosenByNameOrPrefix) {
  SocketInterface chosen;
  ASSERT_EQ(choose_socket_interface("lo", &chosen), Status::kOk);
  EXPECT_EQ(chosen.name, "lo");
  EXPECT_EQ(chosen.address, "127.0.0.1");
  EXPECT_EQ(chosen.ipv4, htonl(INADDR_LOOPBACK));
  ASSERT_EQ(choose_socket_interface("l", &chosen), Status::kOk);
  EXPECT_EQ(chosen.name.substr(0, 1), "l");
  // The default: some interface that is up, never the wildcard address.
  ASSERT_EQ(choose_socket_interface("", &chosen), Status::kOk);
  EXPECT_FALSE(chosen.name.empty());
  EXPECT_NE(chosen.ipv4, htonl(INADDR_ANY));
}

TEST(SocketInterface, UnknownNameIsAnError) {
  SocketInterface chosen;
  EXPECT_EQ(choose_socket_interface("no-such-if0", &chosen), Status::kInvalidArgument);
}

TEST(SocketNetwork, AnUnusableInterfaceOnOneRankFailsEveryRank) {
  testing::run_loopback_ranks(3, [](int rank, Bootstrap& bootstrap) {
    SocketNetworkOptions options = on_loopback();
    if (rank == 1) options.ifname = "no-such-if0";
    std::unique_ptr<NetProvider> net;
    const Status status = make_socket_network(bootstrap, &net, options);
    EXPECT_EQ(status, rank == 1 ? Status::kInvalidArgument : Status::kUnavailable) << "rank " << rank;
    EXPECT_EQ(net, nullptr);
  });
}

// Several messages on a tag, larger than a socket's buffer, all sent before
// most receives are posted: they arrive unexpected, on both streams, and
// must still be taken in posting order; another tag is matched on its own.
TEST(SocketNetwork, MessagesMatchInPostingOrder) {
  const std::size_t sizes[] = {1, 4096, 3 << 20, 0, 17, 1 << 20};
  for (int streams : {1, 2, 3}) {
    SCOPED_TRACE("streams " + std::to_string(streams));
    testing::run_loopback_ranks(2, [&](int rank, Bootstrap& bootstrap) {
      std::unique_ptr<NetProvider> net;
      ASSERT_EQ(make_socket_network(bootstrap, &net, on_loopback(streams)), Status::kOk);
      ASSERT_STREQ(net->name(), "socket");
      const int peer = 1 - rank;
      std::vector<std::vector<char>> out, in;
      std::vector<NetRequest> sends(std::size(sizes)), receives(std::size(sizes));
      NetRequest early;
      std::vector<char> early_in(8), early_out = pattern(rank, 99, 8);
      // One receive posted before anything is sent, on a tag of its own.
      ASSERT_EQ(net->post_recv(peer, 5, early_in.data(), early_in.size(), &early), Status::kOk);
      for (std::size_t m = 0; m < std::size(sizes); ++m) {
        out.push_back(pattern(rank, static_cast<int>(m), sizes[m]));
        ASSERT_EQ(net->post_send(peer, 3, out[m].data(), sizes[m], &sends[m]), Status::kOk);
      }
      NetRequest late_send;
      ASSERT_EQ(net->post_send(peer, 5, early_out.data(), early_out.size(), &late_send), Status::kOk);
      ASSERT_EQ(bootstrap.barrier(), Status::kOk);
      for (std::size_t m = 0; m < std::size(sizes); ++m) {
        in.push_back(std::vector<char>(sizes[m], 'x'));
        ASSERT_EQ(net->post_recv(peer, 3, in[m].data(), sizes[m], &receives[m]), Status::kOk);
      }
      for (std::size_t m = 0; m < std::size(sizes); ++m) {
        ASSERT_EQ(testing::wait_request(*net, &sends[m]), Status::kOk) << "send " << m;
        ASSERT_EQ(testing::wait_request(*net, &receives[m]), Status::kOk) << "receive " << m;
        EXPECT_TRUE(in[m] == pattern(peer, static_cast<int>(m), sizes[m])) << "message " << m;
      }
      ASSERT_EQ(testing::wait_request(*net, &late_send), Status::kOk);
      ASSERT_EQ(testing::wait_request(*net, &early), Status::kOk);
      EXPECT_TRUE(early_in == pattern(peer, 99, 8));
      ASSERT_EQ(bootstrap.barrier(), Status::kOk);
    });
  }
}

// Streams read ahead a buffer at a time (8 KiB): messages whose headers
// and payloads fall across its edges, back to back on one stream, arrive
// whole, into receives posted before they came and into ones posted after.
TEST(SocketNetwork, MessagesAcrossTheReadAheadBufferArriveWhole) {
  const std::size_t sizes[] = {0, 1, 7, 23, 24, 25, 8143, 8144, 8167, 8168, 8169, 8191, 8192, 8193, 16384, 3, 40000};
  constexpr int kRepeats = 3;
  const std::size_t count = std::size(sizes) * kRepeats;
  for (int streams : {1, 2}) {
    SCOPED_TRACE("streams " + std::to_string(streams));
    testing::run_loopback_ranks(2, [&](int rank, Bootstrap& bootstrap) {
      std::unique_ptr<NetProvider> net;
      ASSERT_EQ(make_socket_network(bootstrap, &net, on_loopback(streams)), Status::kOk);
      const int peer = 1 - rank;
      const auto size_of = [&](std::size_t m) { return sizes[m % std::size(sizes)]; };
      std::vector<std::vector<char>> out(count), in(count);
      std::vector<NetRequest> sends(count), receives(count);
      // The first half's receives are posted before anything is sent.
      for (std::size_t m = 0; m < count / 2; ++m) {
        in[m].assign(size_of(m), 'x');
        ASSERT_EQ(net->post_recv(peer, 2, in[m].data(), in[m].size(), &receives[m]), Status::kOk);
      }
      ASSERT_EQ(bootstrap.barrier(), Status::kOk);
      for (std::size_t m = 0; m < count; ++m) {
        out[m] = pattern(rank, static_cast<int>(m), size_of(m));
        ASSERT_EQ(net->post_send(peer, 2, out[m].data(), out[m].size(), &sends[m]), Status::kOk);
      }
      for (std::size_t m = 0; m < count / 2; ++m) ASSERT_EQ(testing::wait_request(*net, &receives[m]), Status::kOk);
      for (std::size_t m = count / 2; m < count; ++m) {
        in[m].assign(size_of(m), 'x');
        ASSERT_EQ(net->post_recv(peer, 2, in[m].data(), in[m].size(), &receives[m]), Status::kOk);
        ASSERT_EQ(testing::wait_request(*net, &receives[m]), Status::kOk);
      }
      for (std::size_t m = 0; m < count; ++m) {
        ASSERT_EQ(testing::wait_request(*net, &sends[m]), Status::kOk);
        EXPECT_TRUE(in[m] == pattern(peer, static_cast<int>(m), size_of(m))) << "message " << m;
      }
      ASSERT_EQ(bootstrap.barrier(), Status::kOk);
    });
  }
}

// A send far larger than the sockets' buffers, whose sender then waits
// elsewhere (here: in the bootstrap's barrier) without calling test(): the
// provider's own thread must carry the rest to the receive.
TEST(SocketNetwork, ASendGoesOnWhileItsSenderIsAway) {
  testing::run_loopback_ranks(2, [](int rank, Bootstrap& bootstrap) {
    std::unique_ptr<NetProvider> net;
    ASSERT_EQ(make_socket_network(bootstrap, &net, on_loopback()), Status::kOk);
    const std::size_t bytes = std::size_t{64} << 20;
    const std::vector<char> out = pattern(0, 1, bytes);
    std::vector<char> in(rank == 1 ? bytes : 0, 'x');
    NetRequest request;
    if (rank == 0) {
      ASSERT_EQ(net->post_send(1, 7, out.data(), bytes, &request), Status::kOk);
      ASSERT_EQ(bootstrap.barrier(), Status::kOk);  // rank 1 has the whole message
      ASSERT_EQ(testing::wait_request(*net, &request), Status::kOk);
    } else {
      ASSERT_EQ(net->post_recv(0, 7, in.data(), bytes, &request), Status::kOk);
      ASSERT_EQ(testing::wait_request(*net, &request), Status::kOk);
      EXPECT_TRUE(in == out);
      ASSERT_EQ(bootstrap.barrier(), Status::kOk);
    }
  });
}

// The connector's half of the handshake, as a stranger without the secret
// writes it (socket_connect.cc's wire format).
struct StrangerJoin {
  std::uint32_t magic = 0x46525953;
  std::uint32_t version = 1;
  std::int32_t rank = 1;
  std::int32_t stream = 0;
  std::int32_t size = 2;
  std::int32_t unused = 0;
  std::uint8_t nonce[16] = {};
  std::uint64_t proof = 0x0123456789abcdefull;
};
static_assert(sizeof(StrangerJoin) == 48, "the handshake's wire format");

// Passes everything through; after the address exchange, first connects to
// rank 0 as a stranger claiming rank 1's first stream with a guessed proof.
class StrangerFirst final : public Bootstrap {
 public:
  explicit StrangerFirst(Bootstrap& inner) : inner_(inner) {}
  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  Status barrier() override { return inner_.barrier(); }
  Status allgather(const void* mine, void* all, std::size_t bytes) override {
    FERRY_CHECK(inner_.allgather(mine, all, bytes));
    if (bytes == sizeof(SocketEndpoint) && !tried) {
      tried = true;
      dropped = stranger_is_dropped(static_cast<const SocketEndpoint*>(all)[0]);
    }
    return Status::kOk;
  }
  bool tried = false;
  bool dropped = false;

 private:
  static bool stranger_is_dropped(const SocketEndpoint& rank0) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(rank0.port);
    address.sin_addr.s_addr = rank0.ipv4;
    timeval limit{5, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof(limit));
    bool closed = false;
    char hello[24];
    if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0 &&
        recv(fd, hello, sizeof(hello), MSG_WAITALL) == static_cast<ssize_t>(sizeof(hello))) {
      const StrangerJoin join;
      if (send(fd, &join, sizeof(join), MSG_NOSIGNAL) == static_cast<ssize_t>(sizeof(join))) {
        char answer[64];
        const ssize_t got = recv(fd, answer, sizeof(answer), 0);
        closed = got == 0 || (got < 0 && errno == ECONNRESET);
      }
    }
    close(fd);
    return closed;
  }

  Bootstrap& inner_;
};

TEST(SocketNetwork, AStrangerWithoutTheSecretIsDroppedAndTheRankStillJoins) {
  testing::run_loopback_ranks(2, [](int rank, Bootstrap& bootstrap) {
    StrangerFirst spied(bootstrap);
    std::unique_ptr<NetProvider> net;
    ASSERT_EQ(make_socket_network(rank == 1 ? spied : bootstrap, &net, on_loopback()), Status::kOk);
    if (rank == 1) {
      EXPECT_TRUE(spied.tried);
      EXPECT_TRUE(spied.dropped) << "rank 0 answered a stranger that has no secret";
    }
    char byte = static_cast<char>(rank + 40), got = 0;
    NetRequest send, receive;
    ASSERT_EQ(net->post_recv(1 - rank, 0, &got, 1, &receive), Status::kOk);
    ASSERT_EQ(net->post_send(1 - rank, 0, &byte, 1, &send), Status::kOk);
    ASSERT_EQ(testing::wait_request(*net, &send), Status::kOk);
    ASSERT_EQ(testing::wait_request(*net, &receive), Status::kOk);
    EXPECT_EQ(got, static_cast<char>(1 - rank + 40));
  });
}

// A peer that closes its network: a receive waiting on it, and every later
// operation with it, fail in kPeerEnded at once.
TEST(SocketNetwork, APeerThatLeavesEndsItsOperations) {
  testing::run_loopback_ranks(2, [](int rank, Bootstrap& bootstrap) {
    std::unique_ptr<NetProvider> net;
    ASSERT_EQ(make_socket_network(bootstrap, &net, on_loopback()), Status::kOk);
    if (rank == 1) {
      ASSERT_EQ(bootstrap.barrier(), Status::kOk);
      net.reset();
      return;
    }
    char byte = 0;
    NetRequest receive;
    ASSERT_EQ(net->post_recv(1, 0, &byte, 1, &receive), Status::kOk);
    ASSERT_EQ(bootstrap.barrier(), Status::kOk);
    const auto start = Clock::now();
    EXPECT_EQ(testing::wait_request(*net, &receive), Status::kPeerEnded);
    EXPECT_LT(Clock::now() - start, std::chrono::seconds(5));
    net->cancel(&receive);
    NetRequest later;
    EXPECT_EQ(net->post_send(1, 0, &byte, 1, &later), Status::kPeerEnded);
    EXPECT_EQ(net->post_recv(1, 0, &byte, 1, &later), Status::kPeerEnded);
  });
}

}  // namespace
}  // namespace ferry

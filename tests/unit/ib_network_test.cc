// The ib provider end to end on a software RDMA device (soft_verbs.h): its
// set-up (queue pairs through INIT, RTR and RTS with the exchanged
// numbers), messages of every size both ways with receives posted before
// and after their sends, more messages than a send queue holds, a receive
// smaller than its message, a peer that has gone, and the net transport's
// pinned chunks staying registered. Ranks are threads over a loopback TCP
// bootstrap. What the device itself does (the wire, timing, GPUDirect)
// only a real one shows.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "engine/bootstrap/tcp_bootstrap.h"
#include "engine/gpu/gpu.h"
#include "engine/transport/ib_network.h"
#include "engine/transport/net_transport.h"
#include "tests/unit/soft_verbs.h"
#include "tests/unit/loopback_ranks.h"

namespace ferry {
namespace {

using Clock = std::chrono::steady_clock;


std::unique_ptr<NetProvider> open_soft(Bootstrap& bootstrap, int queue_pairs = 2) {
  IbNetworkOptions options;
  options.verbs = &soft_verbs::verbs();
  options.queue_pairs = queue_pairs;
  std::unique_ptr<NetProvider> net;
  EXPECT_EQ(make_ib_network(bootstrap, &net, options), Status::kOk);
  return net;
}


std::vector<char> pattern(int from, int to, int message, std::size_t bytes) {
  std::vector<char> data(bytes);
  for (std::size_t i = 0; i < bytes; ++i) data[i] = static_cast<char>(from * 131 + to * 17 + message * 7 + i * 13);
  return data;
}

TEST(IbNetworkSoft, MessagesOfEverySizeReachEveryPeerInPostingOrder) {
  // Past 64 KiB a message is several writes (the soft port's largest).
  const std::size_t sizes[] = {0, 1, 4099, 64 * 1024, 200000, 7};
  const int size = 3;
  testing::run_loopback_ranks(size, [&](int rank, Bootstrap& bootstrap) {
    std::unique_ptr<NetProvider> net = open_soft(bootstrap);
    ASSERT_NE(net, nullptr);
    EXPECT_STREQ(net->name(), "ib");
    std::vector<std::vector<char>> out, in;
    std::vector<NetRequest> requests;
    std::vector<std::pair<int, int>> checks;  // (peer, message) of each receive
    out.reserve(64);
    in.reserve(64);
    requests.reserve(128);
    for (int peer = 0; peer < size; ++peer) {
      if (peer == rank) continue;
      for (int m = 0; m < static_cast<int>(std::size(sizes)); ++m) {
        // Half the receives go first, half after the sends.
        const bool receive_first = m % 2 == 0;
        const int tag = 1 + m % 2;
        auto post_recv = [&] {
          in.emplace_back(sizes[m], 0);
          requests.emplace_back();
          ASSERT_EQ(net->post_recv(peer, tag, in.back().data(), sizes[m], &requests.back()), Status::kOk);
          checks.push_back({peer, m});
        };
        if (receive_first) post_recv();
        out.push_back(pattern(rank, peer, m, sizes[m]));
        requests.emplace_back();
        ASSERT_EQ(net->post_send(peer, tag, out.back().data(), sizes[m], &requests.back()), Status::kOk);
        checks.push_back({-1, -1});
        if (!receive_first) post_recv();
      }
    }
    for (NetRequest& r : requests) ASSERT_EQ(testing::wait_request(*net, &r), Status::kOk);
    std::size_t received = 0;
    for (const auto& [peer, m] : checks) {
      if (peer < 0) continue;
      EXPECT_EQ(in[received], pattern(peer, rank, m, sizes[m])) << "from " << peer << ", message " << m;
      ++received;
    }
    EXPECT_EQ(bootstrap.barrier(), Status::kOk);
  });
}

TEST(IbNetworkSoft, MoreMessagesThanASendQueueHoldsWaitTheirTurn) {
  constexpr int kMessages = 600;  // records and writes past the send queues' depth
  testing::run_loopback_ranks(2, [&](int rank, Bootstrap& bootstrap) {
    std::unique_ptr<NetProvider> net = open_soft(bootstrap, 1);
    ASSERT_NE(net, nullptr);
    std::vector<int> values(kMessages, -1);
    std::vector<NetRequest> requests(kMessages);
    // Every receive first, while rank 0 takes none of their records: rank
    // 1's send queue fills, and the rest wait in its backlog.
    if (rank == 1)
      for (int m = 0; m < kMessages; ++m)
        ASSERT_EQ(net->post_recv(0, 3, &values[m], sizeof(int), &requests[m]), Status::kOk);
    ASSERT_EQ(bootstrap.barrier(), Status::kOk);
    if (rank == 0)
      for (int m = 0; m < kMessages; ++m) {
        values[m] = m * 3 + 1;
        ASSERT_EQ(net->post_send(1, 3, &values[m], sizeof(int), &requests[m]), Status::kOk);
      }
    for (NetRequest& r : requests) ASSERT_EQ(testing::wait_request(*net, &r), Status::kOk);
    if (rank == 1)
      for (int m = 0; m < kMessages; ++m) ASSERT_EQ(values[m], m * 3 + 1) << m;
    EXPECT_EQ(bootstrap.barrier(), Status::kOk);
  });
}

TEST(IbNetworkSoft, AReceiveSmallerThanItsMessageFailsBothSides) {
  testing::run_loopback_ranks(2, [&](int rank, Bootstrap& bootstrap) {
    std::unique_ptr<NetProvider> net = open_soft(bootstrap);
    ASSERT_NE(net, nullptr);
    std::vector<char> buffer(100, 1);
    NetRequest request;
    if (rank == 0) {
      ASSERT_EQ(net->post_send(1, 4, buffer.data(), 100, &request), Status::kOk);
    } else {
      ASSERT_EQ(net->post_recv(0, 4, buffer.data(), 50, &request), Status::kOk);
    }
    EXPECT_EQ(testing::wait_request(*net, &request), Status::kInvalidArgument);
    net->cancel(&request);
    // The pair still works afterwards.
    NetRequest next;
    int value = rank == 0 ? 99 : 0;
    if (rank == 0) {
      ASSERT_EQ(net->post_send(1, 4, &value, sizeof(value), &next), Status::kOk);
    } else {
      ASSERT_EQ(net->post_recv(0, 4, &value, sizeof(value), &next), Status::kOk);
    }
    EXPECT_EQ(testing::wait_request(*net, &next), Status::kOk);
    EXPECT_EQ(value, 99);
    EXPECT_EQ(bootstrap.barrier(), Status::kOk);
  });
}

TEST(IbNetworkSoft, APeerThatHasGoneFailsItsOperations) {
  testing::run_loopback_ranks(2, [&](int rank, Bootstrap& bootstrap) {
    std::unique_ptr<NetProvider> net = open_soft(bootstrap);
    ASSERT_NE(net, nullptr);
    if (rank == 1) net.reset();  // its queue pairs are destroyed
    ASSERT_EQ(bootstrap.barrier(), Status::kOk);
    if (rank == 0) {
      int value = 0;
      NetRequest request;
      // The receive's record cannot reach rank 1: the connection has ended.
      ASSERT_EQ(net->post_recv(1, 5, &value, sizeof(value), &request), Status::kOk);
      EXPECT_EQ(testing::wait_request(*net, &request), Status::kPeerEnded);
      net->cancel(&request);
      NetRequest later;
      EXPECT_EQ(net->post_send(1, 5, &value, sizeof(value), &later), Status::kPeerEnded);
    }
    EXPECT_EQ(bootstrap.barrier(), Status::kOk);
  });
}

// Six rounds of a device message of six chunks from rank 0 to rank 1 over
// the net transport on the soft device, gpudirect or not; the data checked.
void device_rounds(bool gpudirect) {
  constexpr std::size_t kChunk = 64 * 1024, kBytes = 5 * kChunk + 123;
  testing::run_loopback_ranks(2, [&](int rank, Bootstrap& bootstrap) {
    gpu::Backend* device = gpu::emulated_backend();
    NetTransport transport(kChunk, 2);
    IbNetworkOptions options;
    options.verbs = &soft_verbs::verbs();
    options.gpudirect = gpudirect;
    std::unique_ptr<NetProvider> net;
    ASSERT_EQ(make_ib_network(bootstrap, &net, options), Status::kOk);
    transport.attach(std::move(net));
    void* memory = nullptr;
    ASSERT_EQ(device->device_alloc(kBytes, &memory), Status::kOk);
    for (int round = 0; round < 6; ++round) {
      const std::vector<char> expected = pattern(0, 1, round, kBytes);
      if (rank == 0) ASSERT_EQ(gpu::copy(memory, expected.data(), kBytes), Status::kOk);
      Completion done;
      if (rank == 0) {
        ASSERT_EQ(transport.post_send(1, memory, kBytes, 9, &done), Status::kOk);
      } else {
        ASSERT_EQ(transport.post_recv(0, memory, kBytes, 9, &done), Status::kOk);
      }
      ASSERT_EQ(transport.wait_all({&done}, Clock::now() + std::chrono::seconds(20)), Status::kOk);
      if (rank == 1) {
        std::vector<char> got(kBytes);
        ASSERT_EQ(gpu::copy(got.data(), memory, kBytes), Status::kOk);
        EXPECT_EQ(got, expected) << "round " << round;
      }
    }
    ASSERT_EQ(device->device_free(memory), Status::kOk);
    EXPECT_EQ(bootstrap.barrier(), Status::kOk);
  });
}

TEST(IbNetworkSoft, TheNetTransportsChunksStayRegistered) {
  const soft_verbs::Counts before = soft_verbs::counts();
  const NetTraffic traffic = net_traffic();
  device_rounds(false);
  // 36 chunks each way through the same few pinned chunks: each registered
  // once (and each rank's receive slots), not once a message.
  const soft_verbs::Counts after = soft_verbs::counts();
  EXPECT_LE(after.registrations - before.registrations, 2u * 9) << "registrations";
  EXPECT_GE(after.writes - before.writes, 36u);
  EXPECT_EQ(after.live_regions, before.live_regions);
  EXPECT_EQ(after.errors, before.errors);
  EXPECT_EQ(net_traffic().straight_device_messages, traffic.straight_device_messages);
}

TEST(IbNetworkSoft, DeviceMemoryGoesStraightWithGpuDirect) {
  const soft_verbs::Counts before = soft_verbs::counts();
  const NetTraffic traffic = net_traffic();
  device_rounds(true);
  // Each message's device memory registered once on each side, written
  // straight into (no pinned chunks), let go when the message ends.
  const soft_verbs::Counts after = soft_verbs::counts();
  EXPECT_EQ(net_traffic().straight_device_messages - traffic.straight_device_messages, 12u);
  EXPECT_EQ(after.registrations - before.registrations, 2u * (6 + 1)) << "registrations";
  EXPECT_GE(after.writes - before.writes, 36u);
  EXPECT_EQ(after.live_regions, before.live_regions);
  EXPECT_EQ(after.errors, before.errors);
}

}  // namespace
}  // namespace ferry

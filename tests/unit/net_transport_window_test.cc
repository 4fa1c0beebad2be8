// The net transport keeps a queue's chunks in flight within its window
// however many messages wait in it (a bcast's chain of pieces posts them all
// at once). Ranks
// are threads over a loopback TCP bootstrap, on the socket provider, with a
// provider between that counts what is posted and not yet done.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <unordered_set>
#include <vector>

#include "engine/bootstrap/tcp_bootstrap.h"
#include "engine/transport/net_transport.h"
#include "engine/transport/socket_network.h"
#include "tests/unit/loopback_ranks.h"

namespace ferry {
namespace {

using Clock = std::chrono::steady_clock;


// Passes everything to the socket provider; counts requests in flight.
class Counting final : public NetProvider {
 public:
  explicit Counting(std::unique_ptr<NetProvider> inner) : inner_(std::move(inner)) {}
  const char* name() const override { return inner_->name(); }
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  Status post_send(int peer, int tag, const void* data, std::size_t bytes, NetRequest* request) override {
    FERRY_CHECK(inner_->post_send(peer, tag, data, bytes, request));
    started(request);
    return Status::kOk;
  }
  Status post_recv(int peer, int tag, void* data, std::size_t bytes, NetRequest* request) override {
    FERRY_CHECK(inner_->post_recv(peer, tag, data, bytes, request));
    started(request);
    return Status::kOk;
  }
  Status test(NetRequest* request, bool* done) override {
    void* handle = request->handle;
    FERRY_CHECK(inner_->test(request, done));
    if (*done) in_flight_.erase(handle);
    return Status::kOk;
  }
  void cancel(NetRequest* request) override {
    in_flight_.erase(request->handle);
    inner_->cancel(request);
  }
  std::size_t most_in_flight() const { return most_; }

 private:
  void started(const NetRequest* request) {
    in_flight_.insert(request->handle);
    most_ = std::max(most_, in_flight_.size());
  }
  std::unique_ptr<NetProvider> inner_;
  std::unordered_set<void*> in_flight_;
  std::size_t most_ = 0;
};

TEST(NetTransportWindow, AQueuesChunksInFlightStayWithinItsWindow) {
  constexpr std::size_t kChunk = 4096, kPiece = 4 * kChunk;
  constexpr int kPieces = 64, kWindow = 4;
  testing::run_loopback_ranks(2, [&](int rank, Bootstrap& bootstrap) {
    SocketNetworkOptions options;
    options.ifname = "lo";
    std::unique_ptr<NetProvider> socket;
    ASSERT_EQ(make_socket_network(bootstrap, &socket, options), Status::kOk);
    auto counting = std::make_unique<Counting>(std::move(socket));
    Counting* counts = counting.get();
    NetTransport transport(kChunk, kWindow);
    transport.attach(std::move(counting));
    std::vector<char> buffer(kPiece * kPieces);
    for (std::size_t i = 0; i < buffer.size(); ++i) buffer[i] = rank == 0 ? static_cast<char>(i * 7 + 3) : 0;
    // Every piece posted at once, as a chain bcast does.
    std::vector<Completion> pieces(kPieces);
    std::vector<Completion*> all;
    for (int p = 0; p < kPieces; ++p) {
      char* at = buffer.data() + p * kPiece;
      ASSERT_EQ(rank == 0 ? transport.post_send(1, at, kPiece, 2, &pieces[p])
                          : transport.post_recv(0, at, kPiece, 2, &pieces[p]),
                Status::kOk);
      all.push_back(&pieces[p]);
    }
    ASSERT_EQ(transport.wait_all(all, Clock::now() + std::chrono::seconds(20)), Status::kOk);
    if (rank == 1)
      for (std::size_t i = 0; i < buffer.size(); ++i) ASSERT_EQ(buffer[i], static_cast<char>(i * 7 + 3)) << i;
    EXPECT_LE(counts->most_in_flight(), static_cast<std::size_t>(kWindow)) << "rank " << rank;
    EXPECT_EQ(bootstrap.barrier(), Status::kOk);
  });
}

}  // namespace
}  // namespace ferry

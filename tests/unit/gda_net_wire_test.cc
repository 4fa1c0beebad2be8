// What the proxy GDA (gda_net.h) puts on the wire. Small puts: data of at
// most kInlineWireBytes travels inside its request, one message with no
// data message after it, whether the proxy read it from the source (kPut),
// the descriptor carried it (kPutInline), or the descriptor carried data
// and signal together (kPutInlineSignal); it lands whole, with its signal,
// at another rank and at the origin itself. Larger data still follows its
// request. Acknowledgements: a request to a rank carries the
// count of that rank's requests applied here, and that count alone
// completes the rank's operations.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <memory>
#include <vector>

#include "engine/transport/gda/gda_net.h"
#include "tests/unit/gda_net_ranks.h"
#include "tests/unit/loopback_ranks.h"

namespace ferry::gda {
namespace {

// What a rank's proxy sent, as a network wrapper saw it.
struct Sent {
  std::atomic<int> messages{0};
  std::atomic<std::uint64_t> last_acknowledged{0};  // inside the last request
};

// A rank's network that counts the messages it sends, and with
// drop_acknowledgements, sends none on kAckTag (each seems to go at once).
class WatchedNetwork : public NetProvider {
 public:
  WatchedNetwork(std::unique_ptr<NetProvider> inner, Sent* sent, bool drop_acknowledgements)
      : inner_(std::move(inner)), sent_(sent), drop_acknowledgements_(drop_acknowledgements) {}
  const char* name() const override { return inner_->name(); }
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  Status post_send(int peer, int tag, const void* data, std::size_t bytes, NetRequest* request) override {
    sent_->messages.fetch_add(1);
    if (tag == kRequestTag && bytes == sizeof(GdaWireRequest)) {
      GdaWireRequest r{};
      std::memcpy(&r, data, sizeof r);
      sent_->last_acknowledged.store(r.acknowledged);
    }
    if (tag == kAckTag && drop_acknowledgements_) {
      request->handle = &dropped_;
      return Status::kOk;
    }
    return inner_->post_send(peer, tag, data, bytes, request);
  }
  Status post_recv(int peer, int tag, void* data, std::size_t bytes, NetRequest* request) override {
    return inner_->post_recv(peer, tag, data, bytes, request);
  }
  Status test(NetRequest* request, bool* done) override {
    if (request->handle != &dropped_) return inner_->test(request, done);
    request->handle = nullptr;
    *done = true;
    return Status::kOk;
  }
  void cancel(NetRequest* request) override {
    if (request->handle == &dropped_)
      request->handle = nullptr;
    else
      inner_->cancel(request);
  }

 private:
  std::unique_ptr<NetProvider> inner_;
  Sent* sent_;
  bool drop_acknowledgements_;
  char dropped_ = 0;
};

NetworkWrapper watch(Sent* sent, bool drop_acknowledgements = false) {
  return [sent, drop_acknowledgements](std::unique_ptr<NetProvider> net) {
    return std::unique_ptr<NetProvider>(new WatchedNetwork(std::move(net), sent, drop_acknowledgements));
  };
}

class GdaNetWire : public ::testing::TestWithParam<Provider> {};

constexpr std::size_t kSignalWords = 64;  // the signal words come first in the window
constexpr std::size_t kData = 8 * kSignalWords;
constexpr GdaOp kSmallPuts[] = {GdaOp::kPut, GdaOp::kPutInline, GdaOp::kPutInlineSignal};
constexpr int kKinds = sizeof kSmallPuts / sizeof kSmallPuts[0];

// Where a put of `kind` and `bytes` (1 to 9) lands, and its signal word.
std::size_t data_offset(int kind, std::size_t bytes) { return kData + 16 * (9 * kind + bytes) + 1; }
std::size_t signal_offset(int kind, std::size_t bytes) { return 8 * (9 * kind + bytes - 1); }

GdaDescriptor small_put(int kind, std::size_t bytes, int target, const std::vector<char>& data) {
  GdaDescriptor d{};
  d.op = static_cast<std::uint8_t>(kSmallPuts[kind]);
  d.window = kWindowId;
  d.target = target;
  d.offset = data_offset(kind, bytes);
  d.bytes = bytes;
  if (kSmallPuts[kind] == GdaOp::kPut) {
    d.source = reinterpret_cast<std::uintptr_t>(data.data());
  } else {
    std::uint64_t bits = 0;
    std::memcpy(&bits, data.data(), bytes);
    (kSmallPuts[kind] == GdaOp::kPutInline ? d.value : d.source) = bits;
  }
  if (kSmallPuts[kind] == GdaOp::kPutInlineSignal) {
    d.signal_op = static_cast<std::uint8_t>(GdaSignalOp::kSet);
    d.signal_offset = signal_offset(kind, bytes);
    d.value = 1000 + bytes;
  }
  return d;
}

// Every small put of rank 0 (1 to 8 bytes of each kind, and 9 bytes of
// kPut) in window bytes, with its signal.
void expect_landed(const std::vector<char>& window, int target) {
  for (int kind = 0; kind < kKinds; ++kind)
    for (std::size_t bytes = 1; bytes <= (kSmallPuts[kind] == GdaOp::kPut ? 9u : 8u); ++bytes) {
      const std::vector<char> data = pattern(0, target, kind * 16 + static_cast<int>(bytes), bytes);
      EXPECT_EQ(std::memcmp(window.data() + data_offset(kind, bytes), data.data(), bytes), 0)
          << "kind " << kind << ", " << bytes << " bytes";
      EXPECT_EQ(window[data_offset(kind, bytes) + bytes], 0) << "past the put's end";
      if (kSmallPuts[kind] == GdaOp::kPutInlineSignal)
        EXPECT_EQ(word_at(window, signal_offset(kind, bytes)), 1000 + bytes);
    }
}

TEST_P(GdaNetWire, SmallPutsTravelInsideTheirRequestAndLandWhole) {
  testing::run_loopback_ranks(2, [](int me, Bootstrap& bootstrap) {
    Sent sent;
    GdaRank rank(bootstrap, nullptr, watch(&sent));
    int requests_to_peer = 0;
    if (me == 0) {
      std::vector<std::vector<char>> sources;  // kept until quiet
      sources.reserve(2 * kKinds * 9);
      std::uint64_t last = 0;
      for (int target : {1, 0})
        for (int kind = 0; kind < kKinds; ++kind)
          for (std::size_t bytes = 1; bytes <= (kSmallPuts[kind] == GdaOp::kPut ? 9u : 8u); ++bytes) {
            sources.push_back(pattern(0, target, kind * 16 + static_cast<int>(bytes), bytes));
            last = post(rank.ring, small_put(kind, bytes, target, sources.back()));
            ASSERT_NE(last, kRingFailed);
            if (target == 1) ++requests_to_peer;
          }
      ASSERT_TRUE(wait_completed(rank.ring, last));
      EXPECT_EQ(rank.proxy->status(), Status::kOk);
      expect_landed(rank.window_bytes(), 0);
      // One message a request; the 9-byte put's data follows its request.
      EXPECT_EQ(sent.messages.load(), requests_to_peer + 1);
    }
    ASSERT_EQ(bootstrap.barrier(), Status::kOk);
    if (me == 1) {
      rank.wait_applied(3 * 8 + 1);
      expect_landed(rank.window_bytes(), 1);
    }
    ASSERT_EQ(bootstrap.barrier(), Status::kOk);
  });
}

// Rank 1 sends no acknowledgement of its own (the wrapper drops them): rank
// 0's puts complete only through the count inside rank 1's put to rank 0,
// which rank 1 posts once it has applied them.
TEST_P(GdaNetWire, ARequestCarriesTheAcknowledgementOfItsTargetsRequests) {
  static constexpr std::uint64_t kPuts = 5;
  testing::run_loopback_ranks(2, [](int me, Bootstrap& bootstrap) {
    Sent sent;
    GdaRank rank(bootstrap, nullptr, watch(&sent, /*drop_acknowledgements=*/me == 1));
    const auto put_to = [&rank](int target, std::uint64_t value) {
      GdaDescriptor d{};
      d.op = static_cast<std::uint8_t>(GdaOp::kPutInline);
      d.window = kWindowId;
      d.target = target;
      d.offset = kData + 8 * value;
      d.bytes = 8;
      d.value = value;
      return post(rank.ring, d);
    };
    if (me == 0) {
      std::uint64_t last = 0;
      for (std::uint64_t i = 1; i <= kPuts; ++i) last = put_to(1, i);
      ASSERT_NE(last, kRingFailed);
      // wait_completed, with a deadline: without the count it never comes.
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (detail::load_word(&rank.ring.words->completed) <= last && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      EXPECT_GT(detail::load_word(&rank.ring.words->completed), last) << "rank 0's puts never completed";
      EXPECT_EQ(rank.proxy->status(), Status::kOk);
    } else {
      rank.wait_applied(kPuts);
      const std::uint64_t ticket = put_to(0, 99);
      ASSERT_TRUE(wait_completed(rank.ring, ticket));
      EXPECT_EQ(sent.last_acknowledged.load(), kPuts);
    }
    ASSERT_EQ(bootstrap.barrier(), Status::kOk);
  });
}

#if defined(FERRY_HAVE_IBVERBS)
INSTANTIATE_TEST_SUITE_P(Providers, GdaNetWire, ::testing::Values(Provider::kSocket, Provider::kIb),
                         provider_name);
#else
INSTANTIATE_TEST_SUITE_P(Providers, GdaNetWire, ::testing::Values(Provider::kSocket), provider_name);
#endif

}  // namespace
}  // namespace ferry::gda

// The proxy GDA over the net transport (gda_net.h) between ranks as
// threads of one process, over the socket provider on loopback and the ib
// provider on the tests' software RDMA device (soft_verbs.h): puts with
// signals to every rank (itself too) land whole before their signal and
// before quiet returns, gets read what every rank holds, atomic adds from
// every rank sum, fetching atomics and element reads return the target's
// values, flagged puts arrive as flagged words, and a request past the
// target's window is refused without touching it.
#include "engine/transport/gda/gda_net.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "tests/unit/gda_net_ranks.h"
#include "tests/unit/loopback_ranks.h"

namespace ferry::gda {
namespace {

constexpr int kRounds = 12;
// Each source's puts land in its own part of every window, after the
// signal words.
constexpr std::size_t kSignals = 64;
constexpr std::size_t kPart = 20000;

std::size_t put_bytes(int round) { return 1 + static_cast<std::size_t>(round) * 1237; }  // 1 .. 13608, odd sizes
std::size_t put_offset(int source, int round) { return kSignals + source * kPart + 3 + 5 * round; }

class GdaNet : public ::testing::TestWithParam<Provider> {};

TEST_P(GdaNet, PutsWithSignalsReachEveryRankWholeAndInOrder) {
  constexpr int kRanks = 3;
  testing::run_loopback_ranks(kRanks, [](int me, Bootstrap& bootstrap) {
    GdaRank rank(bootstrap);
    std::vector<std::vector<char>> sources;  // kept until quiet
    std::uint64_t last = 0;
    for (int round = 0; round < kRounds; ++round)
      for (int target = 0; target < kRanks; ++target) {
        sources.push_back(pattern(me, target, round, put_bytes(round)));
        GdaDescriptor d{};
        d.op = static_cast<std::uint8_t>(GdaOp::kPutSignal);
        d.window = kWindowId;
        d.target = target;
        d.source = reinterpret_cast<std::uintptr_t>(sources.back().data());
        d.offset = put_offset(me, round);
        d.bytes = sources.back().size();
        d.signal_op = static_cast<std::uint8_t>(GdaSignalOp::kAdd);
        d.signal_offset = 8 * me;
        d.value = 1;
        d.producer = me;
        last = post(rank.ring, d);
        ASSERT_NE(last, kRingFailed);
      }
    ASSERT_TRUE(wait_completed(rank.ring, last));  // quiet: visible at every target
    ASSERT_EQ(bootstrap.barrier(), Status::kOk);
    rank.wait_applied(std::uint64_t{kRounds} * (kRanks - 1));
    const std::vector<char> window = rank.window_bytes();
    for (int source = 0; source < kRanks; ++source) {
      EXPECT_EQ(word_at(window, 8 * source), std::uint64_t{kRounds}) << "signals from rank " << source;
      // Later rounds overlap earlier ones: the last write of each byte wins.
      std::vector<char> expected(kPart, 0);
      for (int round = 0; round < kRounds; ++round) {
        const std::vector<char> data = pattern(source, me, round, put_bytes(round));
        std::memcpy(expected.data() + (put_offset(source, round) - put_offset(source, 0)), data.data(), data.size());
      }
      const std::size_t span = put_offset(source, kRounds - 1) + put_bytes(kRounds - 1) - put_offset(source, 0);
      EXPECT_EQ(std::memcmp(window.data() + put_offset(source, 0), expected.data(), span), 0)
          << "rank " << me << ": data from rank " << source;
    }
    EXPECT_EQ(rank.proxy->status(), Status::kOk);
    ASSERT_EQ(bootstrap.barrier(), Status::kOk);
  });
}

TEST_P(GdaNet, AtomicAddsFromEveryRankSum) {
  constexpr int kRanks = 3, kAdds = 200;
  testing::run_loopback_ranks(kRanks, [](int me, Bootstrap& bootstrap) {
    GdaRank rank(bootstrap);
    std::uint64_t last = 0;
    for (int i = 0; i < kAdds; ++i) {
      GdaDescriptor d{};
      d.op = static_cast<std::uint8_t>(GdaOp::kAtomicAdd);
      d.window = kWindowId;
      d.target = 0;
      d.offset = 40;
      d.value = me + 1;
      last = post(rank.ring, d);
    }
    ASSERT_TRUE(wait_completed(rank.ring, last));
    ASSERT_EQ(bootstrap.barrier(), Status::kOk);
    if (me == 0) {
      rank.wait_applied(std::uint64_t{kAdds} * (kRanks - 1));
      EXPECT_EQ(word_at(rank.window_bytes(), 40), std::uint64_t{kAdds} * (1 + 2 + 3));
    }
    ASSERT_EQ(bootstrap.barrier(), Status::kOk);
  });
}

TEST_P(GdaNet, GetsReadWhatEveryRankHolds) {
  constexpr int kRanks = 3;
  testing::run_loopback_ranks(kRanks, [](int me, Bootstrap& bootstrap) {
    GdaRank rank(bootstrap);
    const std::vector<char> mine = pattern(me, me, 99, kWindowBytes);
    ASSERT_EQ(rank.backend->copy(rank.window, mine.data(), kWindowBytes), Status::kOk);
    ASSERT_EQ(bootstrap.barrier(), Status::kOk);
    std::vector<std::vector<char>> got;
    got.reserve(kRounds * kRanks);
    std::uint64_t last = 0;
    for (int round = 0; round < kRounds; ++round)
      for (int target = 0; target < kRanks; ++target) {
        got.emplace_back(put_bytes(round), 0);
        GdaDescriptor d{};
        d.op = static_cast<std::uint8_t>(GdaOp::kGet);
        d.window = kWindowId;
        d.target = target;
        d.source = reinterpret_cast<std::uintptr_t>(got.back().data());  // the destination
        d.offset = put_offset(me, round);
        d.bytes = got.back().size();
        last = post(rank.ring, d);
      }
    ASSERT_TRUE(wait_completed(rank.ring, last));
    std::size_t i = 0;
    for (int round = 0; round < kRounds; ++round)
      for (int target = 0; target < kRanks; ++target, ++i) {
        const std::vector<char> theirs = pattern(target, target, 99, kWindowBytes);
        EXPECT_EQ(std::memcmp(got[i].data(), theirs.data() + put_offset(me, round), got[i].size()), 0)
            << "rank " << me << ": get from rank " << target << ", round " << round;
      }
    ASSERT_EQ(bootstrap.barrier(), Status::kOk);
  });
}

// Rank 0's word at 48, from every rank (itself too) through the queue:
// fetch-adds whose old values are all distinct, then compare-and-swaps of
// which exactly one wins, then reads of single elements.
TEST_P(GdaNet, FetchingOperationsReturnTheTargetsOldValues) {
  constexpr int kRanks = 3, kAdds = 150;
  constexpr std::size_t kWord = 48;
  testing::run_loopback_ranks(kRanks, [](int me, Bootstrap& bootstrap) {
    GdaRank rank(bootstrap);
    auto value_op = [&](GdaOp op, int target, std::uint64_t offset, std::uint64_t value, std::uint64_t compare,
                        std::uint64_t bytes) {
      GdaDescriptor d{};
      d.op = static_cast<std::uint8_t>(op);
      d.window = kWindowId;
      d.target = target;
      d.offset = offset;
      d.value = value;
      d.signal_offset = compare;
      d.bytes = bytes;
      std::uint64_t result = 0;
      EXPECT_TRUE(take_result(rank.ring, post(rank.ring, d), &result));
      return result;
    };
    std::vector<std::uint64_t> olds;
    for (int i = 0; i < kAdds; ++i) olds.push_back(value_op(GdaOp::kFetchAdd, 0, kWord, 1, 0, 0));
    for (int i = 1; i < kAdds; ++i) ASSERT_GT(olds[i], olds[i - 1]);
    // Every old value from 0 to the total, once over all ranks.
    std::vector<std::uint64_t> all(std::size_t{kRanks} * kAdds);
    ASSERT_EQ(bootstrap.allgather(olds.data(), all.data(), olds.size() * sizeof(std::uint64_t)), Status::kOk);
    std::sort(all.begin(), all.end());
    for (std::size_t i = 0; i < all.size(); ++i) ASSERT_EQ(all[i], i);

    // The word is kRanks * kAdds now: one swap from it wins.
    const std::uint64_t total = std::uint64_t{kRanks} * kAdds;
    const std::uint64_t swapped = value_op(GdaOp::kCompareSwap, 0, kWord, 1000 + me, total, 8);
    const std::uint64_t won = swapped == total ? 1 : 0;
    std::vector<std::uint64_t> wins(kRanks);
    ASSERT_EQ(bootstrap.allgather(&won, wins.data(), sizeof won), Status::kOk);
    EXPECT_EQ(std::count(wins.begin(), wins.end(), 1u), 1);
    if (!won) EXPECT_GE(swapped, 1000u);  // the winner's value

    // Single elements: 8, 4 and 1 bytes, at unaligned offsets too.
    const std::uint64_t word = value_op(GdaOp::kGetValue, 0, kWord, 0, 0, 8);
    EXPECT_GE(word, 1000u);
    EXPECT_LT(word, 1000u + kRanks);
    const std::vector<char> theirs = pattern(0, 0, 5, 64);
    if (me == 0) ASSERT_EQ(rank.backend->copy(static_cast<char*>(rank.window) + 1000, theirs.data(), 64), Status::kOk);
    ASSERT_EQ(bootstrap.barrier(), Status::kOk);
    std::uint32_t four = 0;
    std::memcpy(&four, theirs.data() + 3, 4);
    EXPECT_EQ(value_op(GdaOp::kGetValue, 0, 1003, 0, 0, 4), four);
    EXPECT_EQ(value_op(GdaOp::kGetValue, 0, 1017, 0, 0, 1), static_cast<unsigned char>(theirs[17]));
    EXPECT_EQ(rank.proxy->status(), Status::kOk);
    ASSERT_EQ(bootstrap.barrier(), Status::kOk);
  });
}

// Accumulates combined by the target's combiner (here: 32-bit integer sum,
// code 1) from every rank into rank 0's window, with and without the bytes
// they replaced; and compare-and-swaps of 4 bytes.
TEST_P(GdaNet, AccumulatesAreCombinedAtTheTarget) {
  constexpr int kRanks = 3, kElements = 333, kRounds = 5;
  constexpr std::size_t kAt = 8192;
  testing::run_loopback_ranks(kRanks, [](int me, Bootstrap& bootstrap) {
    GdaRank rank(bootstrap, [](std::uint64_t code, const void* origin, void* target, std::size_t bytes) {
      if (code != 1 || bytes % 4 != 0) return Status::kInvalidArgument;
      for (std::size_t i = 0; i < bytes / 4; ++i)
        static_cast<std::int32_t*>(target)[i] += static_cast<const std::int32_t*>(origin)[i];
      return Status::kOk;
    });
    std::vector<std::int32_t> adds(kElements);
    for (int i = 0; i < kElements; ++i) adds[i] = (me + 1) * 1000 + i;
    std::vector<std::vector<std::int32_t>> before(kRounds, std::vector<std::int32_t>(kElements, -1));
    std::uint64_t last = 0;
    for (int round = 0; round < kRounds; ++round) {
      GdaDescriptor d{};
      d.op = static_cast<std::uint8_t>(round % 2 ? GdaOp::kGetAccumulate : GdaOp::kAccumulate);
      d.window = kWindowId;
      d.target = 0;
      d.source = reinterpret_cast<std::uintptr_t>(adds.data());
      d.offset = kAt;
      d.bytes = adds.size() * 4;
      d.value = 1;
      d.signal_offset = reinterpret_cast<std::uintptr_t>(before[round].data());
      last = post(rank.ring, d);
    }
    ASSERT_TRUE(wait_completed(rank.ring, last));
    ASSERT_EQ(bootstrap.barrier(), Status::kOk);
    if (me == 0) {
      rank.wait_applied(std::uint64_t{kRounds} * (kRanks - 1));
      const std::vector<char> window = rank.window_bytes();
      for (int i = 0; i < kElements; ++i) {
        std::int32_t sum = 0;
        std::memcpy(&sum, window.data() + kAt + 4 * i, 4);
        ASSERT_EQ(sum, kRounds * ((1 + 2 + 3) * 1000 + 3 * i)) << "element " << i;
      }
    }
    // What a get-accumulate replaced came back: a partial sum of whole
    // contributions (each rank adds (r + 1) * 1000 + i to element i).
    for (int round = 1; round < kRounds; round += 2)
      for (int i = 0; i < kElements; ++i) {
        const std::int32_t seen = before[round][i];
        ASSERT_GE(seen, 0) << "round " << round;
        bool whole = false;  // some count of adds per rank sums to it
        for (int a = 0; a <= kRounds && !whole; ++a)
          for (int b = 0; b <= kRounds && !whole; ++b)
            for (int c = 0; c <= kRounds && !whole; ++c)
              whole = seen == a * (1000 + i) + b * (2000 + i) + c * (3000 + i);
        ASSERT_TRUE(whole) << "round " << round << ", element " << i << ": " << seen;
      }
    ASSERT_EQ(bootstrap.barrier(), Status::kOk);

    // 4-byte compare-and-swap on rank 1's window: one rank wins.
    GdaDescriptor cas{};
    cas.op = static_cast<std::uint8_t>(GdaOp::kCompareSwap);
    cas.window = kWindowId;
    cas.target = 1;
    cas.offset = 100;  // 4-byte aligned
    cas.bytes = 4;
    cas.signal_offset = 0;
    cas.value = 0xabc00000u + me;
    std::uint64_t old = 1;
    ASSERT_TRUE(take_result(rank.ring, post(rank.ring, cas), &old));
    const std::uint64_t won = old == 0;
    std::vector<std::uint64_t> wins(kRanks);
    ASSERT_EQ(bootstrap.allgather(&won, wins.data(), sizeof won), Status::kOk);
    EXPECT_EQ(std::count(wins.begin(), wins.end(), 1u), 1);
    if (me == 1) {
      const std::vector<char> window = rank.window_bytes();
      std::uint32_t word = 0;
      std::memcpy(&word, window.data() + 100, 4);
      EXPECT_EQ(word & 0xfff00000u, 0xabc00000u);
      EXPECT_EQ(word_at(window, 104), 0u);  // the bytes after the word untouched
    }
    ASSERT_EQ(bootstrap.barrier(), Status::kOk);
  });
}

// Flagged puts (ll::put to another machine) arrive as the words a GPU
// thread would have stored: 4 data bytes (zero padded) under the flag.
TEST_P(GdaNet, FlaggedPutsArriveAsFlaggedWords) {
  testing::run_loopback_ranks(2, [](int me, Bootstrap& bootstrap) {
    GdaRank rank(bootstrap);
    const std::vector<char> message = pattern(me, 1 - me, 3, 37);  // 10 words, the last one 1 byte
    constexpr std::uint32_t kFlag = 0xfeed0007;
    GdaDescriptor d{};
    d.op = static_cast<std::uint8_t>(GdaOp::kPutFlagged);
    d.window = kWindowId;
    d.target = 1 - me;
    d.source = reinterpret_cast<std::uintptr_t>(message.data());
    d.offset = 4096 + 512 * me;
    d.bytes = message.size();
    d.value = kFlag;
    ASSERT_TRUE(wait_completed(rank.ring, post(rank.ring, d)));
    ASSERT_EQ(bootstrap.barrier(), Status::kOk);
    rank.wait_applied(1);
    const std::vector<char> window = rank.window_bytes();
    const std::vector<char> sent = pattern(1 - me, me, 3, 37);
    for (std::size_t i = 0; i < 10; ++i) {
      const std::uint64_t word = word_at(window, 4096 + 512 * (1 - me) + 8 * i);
      std::uint32_t data = 0;
      std::memcpy(&data, sent.data() + 4 * i, std::min<std::size_t>(4, sent.size() - 4 * i));
      EXPECT_EQ(word >> 32, kFlag) << "word " << i;
      EXPECT_EQ(static_cast<std::uint32_t>(word), data) << "word " << i;
    }
    EXPECT_EQ(word_at(window, 4096 + 512 * (1 - me) + 80), 0u);  // nothing past the message's words
    ASSERT_EQ(bootstrap.barrier(), Status::kOk);
  });
}

// The proxy reads a turn's sources together: a producer that refills its
// one source once each put has started must still have every put land as
// it was when posted.
TEST_P(GdaNet, ASourceMayBeReusedOnceItsPutStarted) {
  constexpr int kPuts = 40;
  constexpr std::size_t kBytes = 2001;
  testing::run_loopback_ranks(2, [](int me, Bootstrap& bootstrap) {
    GdaRank rank(bootstrap);
    const auto offset = [](int source, int round) { return kSignals + (source * kPuts + round) * kBytes; };
    std::vector<char> source;
    std::uint64_t last = 0;
    for (int round = 0; round < kPuts; ++round) {
      source = pattern(me, 1 - me, round, kBytes);
      GdaDescriptor d{};
      d.op = static_cast<std::uint8_t>(GdaOp::kPut);
      d.window = kWindowId;
      d.target = 1 - me;
      d.source = reinterpret_cast<std::uintptr_t>(source.data());
      d.offset = offset(me, round);
      d.bytes = kBytes;
      last = post(rank.ring, d);
      ASSERT_TRUE(wait_started(rank.ring, last));
    }
    ASSERT_TRUE(wait_completed(rank.ring, last));
    ASSERT_EQ(bootstrap.barrier(), Status::kOk);
    rank.wait_applied(kPuts);
    const std::vector<char> window = rank.window_bytes();
    for (int round = 0; round < kPuts; ++round)
      EXPECT_EQ(std::memcmp(window.data() + offset(1 - me, round), pattern(1 - me, me, round, kBytes).data(), kBytes),
                0)
          << "rank " << me << ": put " << round;
    ASSERT_EQ(bootstrap.barrier(), Status::kOk);
  });
}

// A set signal lands after its put's data: the target, polling the word
// while the puts arrive, finds every signalled put whole.
TEST_P(GdaNet, ASetSignalIsSeenOnlyAfterItsData) {
  static constexpr std::uint64_t kPuts = 60;
  static constexpr std::size_t kBytes = 3001, kData = 4096;
  testing::run_loopback_ranks(2, [](int me, Bootstrap& bootstrap) {
    GdaRank rank(bootstrap);
    if (me == 0) {
      std::vector<std::vector<char>> sources;
      sources.reserve(kPuts);
      std::uint64_t last = 0;
      for (std::uint64_t round = 0; round < kPuts; ++round) {
        sources.push_back(pattern(0, 1, static_cast<int>(round), kBytes));
        GdaDescriptor d{};
        d.op = static_cast<std::uint8_t>(GdaOp::kPutSignal);
        d.window = kWindowId;
        d.target = 1;
        d.source = reinterpret_cast<std::uintptr_t>(sources.back().data());
        d.offset = kData + round * kBytes;
        d.bytes = kBytes;
        d.signal_op = static_cast<std::uint8_t>(GdaSignalOp::kSet);
        d.signal_offset = 0;
        d.value = round + 1;
        last = post(rank.ring, d);
      }
      ASSERT_TRUE(wait_completed(rank.ring, last));
    } else {
      // Failures end the polling, not the rank: rank 0 waits at the barrier.
      std::uint64_t checked = 0;
      bool whole = true;
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (whole && checked < kPuts && std::chrono::steady_clock::now() < deadline) {
        std::uint64_t signal = 0;
        EXPECT_EQ(rank.backend->copy(&signal, rank.window, sizeof signal), Status::kOk);
        EXPECT_LE(signal, kPuts);
        for (; whole && checked < std::min(signal, kPuts); ++checked) {
          std::vector<char> landed(kBytes);
          const char* at = static_cast<char*>(rank.window) + kData + checked * kBytes;
          EXPECT_EQ(rank.backend->copy(landed.data(), at, kBytes), Status::kOk);
          whole = landed == pattern(0, 1, static_cast<int>(checked), kBytes);
          EXPECT_TRUE(whole) << "put " << checked << " not whole when the signal read " << signal;
        }
      }
      if (whole) EXPECT_EQ(checked, kPuts);
    }
    ASSERT_EQ(bootstrap.barrier(), Status::kOk);
  });
}

TEST_P(GdaNet, ARequestPastTheWindowIsRefusedAndTouchesNothing) {
  testing::run_loopback_ranks(2, [](int me, Bootstrap& bootstrap) {
    GdaRank rank(bootstrap);
    if (me == 0) {
      std::vector<char> data(100, 'x');
      GdaDescriptor d{};
      d.op = static_cast<std::uint8_t>(GdaOp::kPutSignal);
      d.window = kWindowId;
      d.target = 1;
      d.source = reinterpret_cast<std::uintptr_t>(data.data());
      d.offset = kWindowBytes - 50;  // its last 50 bytes would fall outside
      d.bytes = data.size();
      d.signal_offset = 0;
      d.value = 9;
      const std::uint64_t ticket = post(rank.ring, d);
      EXPECT_FALSE(wait_completed(rank.ring, ticket));
      EXPECT_EQ(rank.proxy->status(), Status::kInvalidArgument);
    }
    ASSERT_EQ(bootstrap.barrier(), Status::kOk);
    if (me == 1) {
      const std::vector<char> window = rank.window_bytes();
      EXPECT_EQ(word_at(window, 0), 0u);  // nor the signal
      for (std::size_t i = kWindowBytes - 50; i < kWindowBytes; ++i) ASSERT_EQ(window[i], 0);
      EXPECT_EQ(rank.proxy->status(), Status::kOk);
    }
    ASSERT_EQ(bootstrap.barrier(), Status::kOk);
  });
}

#if defined(FERRY_HAVE_IBVERBS)
INSTANTIATE_TEST_SUITE_P(Providers, GdaNet, ::testing::Values(Provider::kSocket, Provider::kIb), provider_name);
#else
INSTANTIATE_TEST_SUITE_P(Providers, GdaNet, ::testing::Values(Provider::kSocket), provider_name);
#endif

}  // namespace
}  // namespace ferry::gda

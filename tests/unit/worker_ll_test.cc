// The engine worker's LL and LL128 items: two ranks' workers in one process
// reduce over each other's receive buffers, calls share the worker's blocks
// by size, and a peer that never sends or has ended ends the wait. On the
// emulated device (a host thread plays the persistent kernel), or with
// FERRY_UNIT_TEST_DEVICE=cuda on GPU 0.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "engine/common/liveness.h"
#include "engine/core/peer_watch.h"
#include "tests/unit/worker_test_buffers.h"

namespace ferry {
namespace {

using namespace worker_test;

// Both ranks' inputs, a and b, and their outputs, as many elements of -1.
struct SumBuffers {
  SumBuffers(const std::vector<std::int64_t>& a, const std::vector<std::int64_t>& b)
      : in0(a.size() * 8), in1(b.size() * 8), out0(a.size() * 8), out1(b.size() * 8), a(a), b(b) {
    in0.fill(a);
    in1.fill(b);
    out0.fill(std::vector<std::int64_t>(a.size(), -1));
    out1.fill(std::vector<std::int64_t>(b.size(), -1));
  }
  // Both outputs hold a + b in their first count elements and -1 after.
  void expect_sums(std::size_t count, const std::string& call) const {
    for (const DeviceBuffer* out : {&out0, &out1}) {
      const auto got = out->read<std::int64_t>();
      for (std::size_t i = 0; i < count; ++i) ASSERT_EQ(got[i], a[i] + b[i]) << call << ", element " << i;
      EXPECT_EQ(got[count], -1) << call << ": written past the count";
    }
  }
  DeviceBuffer in0, in1, out0, out1;
  std::vector<std::int64_t> a, b;
};

// Two ranks' workers (of one block each unless asked) and their zeroed LL
// receive buffers.
struct TwoLlRanks {
  explicit TwoLlRanks(int blocks = 1)
      : worker0(Worker::create(device(), 0, blocks, 100000)), worker1(Worker::create(device(), 0, blocks, 100000)) {
    ll0.fill(std::vector<char>(kLlBufferBytes, 0));
    ll1.fill(std::vector<char>(kLlBufferBytes, 0));
  }
  // Runs item0 on rank 0's worker and item1 on rank 1's at once; both statuses.
  std::pair<Status, Status> run(const WorkItem& item0, const WorkItem& item1) {
    Status status1 = Status::kInternal;
    std::thread rank1([&] { status1 = worker1->run(item1); });
    const Status status0 = worker0->run(item0);
    rank1.join();
    return {status0, status1};
  }
  std::unique_ptr<Worker> worker0, worker1;
  DeviceBuffer ll0{kLlBufferBytes}, ll1{kLlBufferBytes};
  std::vector<DeviceBuffer*> ll = {&ll0, &ll1};
};

// Two ranks' workers in one process, each with its LL receive buffer: every
// call's sum is right, the buffers' halves alternate, and odd counts leave
// the bytes past the output alone.
TEST(EngineWorkerLl, TwoRanksReduceOverLlBuffers) {
  TwoLlRanks ranks;
  ASSERT_TRUE(ranks.worker0 && ranks.worker1);
  const auto& ll = ranks.ll;
  for (std::uint64_t call = 1; call <= 40; ++call) {
    const std::size_t count = 1 + (call * 9973) % (ll_max_bytes(2) / 8);
    std::vector<std::int64_t> a(count + 1), b(count + 1);
    for (std::size_t i = 0; i <= count; ++i) {
      a[i] = static_cast<std::int64_t>(i * call) - 7;
      b[i] = 1000 - static_cast<std::int64_t>(i);
    }
    SumBuffers buffers(a, b);
    DeviceBuffer &in0 = buffers.in0, &in1 = buffers.in1, &out0 = buffers.out0, &out1 = buffers.out1;
    const auto [status0, status1] =
        ranks.run(ll_sum(in0, out0, count, ll, 0, call, 10000), ll_sum(in1, out1, count, ll, 1, call, 10000));
    ASSERT_EQ(status0, Status::kOk);
    ASSERT_EQ(status1, Status::kOk);
    ASSERT_NO_FATAL_FAILURE(buffers.expect_sums(count, "call " + std::to_string(call)));
  }
}

// LL128 calls alternating with LL calls on the same buffers (a slot holds
// the other protocol's lines from two calls before): every sum is right,
// from single elements to whole slots, and nothing past the count changes.
TEST(EngineWorkerLl128, TwoRanksReduceOverLl128LinesBetweenLlCalls) {
  TwoLlRanks ranks;
  ASSERT_TRUE(ranks.worker0 && ranks.worker1);
  const auto& ll = ranks.ll;
  for (std::uint64_t call = 1; call <= 48; ++call) {
    const bool ll128 = call % 3 != 0;
    const std::size_t largest = (ll128 ? ll128_max_bytes(2) : ll_max_bytes(2)) / 8;
    const std::size_t count = call == 1 ? 1 : call == 2 ? largest : 1 + (call * 7919) % largest;
    std::vector<std::int64_t> a(count + 1), b(count + 1);
    for (std::size_t i = 0; i <= count; ++i) {
      a[i] = static_cast<std::int64_t>(i * call) - 11;
      b[i] = 5000 - static_cast<std::int64_t>(3 * i);
    }
    SumBuffers buffers(a, b);
    DeviceBuffer &in0 = buffers.in0, &in1 = buffers.in1, &out0 = buffers.out0, &out1 = buffers.out1;
    WorkItem item0 = ll_sum(in0, out0, count, ll, 0, call, 10000), item1 = ll_sum(in1, out1, count, ll, 1, call, 10000);
    if (ll128) item0.kind = item1.kind = WorkKind::kLl128Allreduce;
    const auto [status0, status1] = ranks.run(item0, item1);
    ASSERT_EQ(status0, Status::kOk);
    ASSERT_EQ(status1, Status::kOk);
    ASSERT_NO_FATAL_FAILURE(buffers.expect_sums(count, (ll128 ? "LL128 call " : "LL call ") + std::to_string(call)));
  }
}

// LL calls on workers of several blocks, shared by one, some or all of
// them in turn, and by different numbers on the two ranks (as the engine
// runs them by size; alltoallv's ranks size theirs apart): a block that
// skipped items takes up the next one it shares, every sharing block's
// chunks land, and the caller waits for each of their reports. Asking for
// more blocks than the worker has takes them all. Allreduce and bcast, odd
// sizes.
TEST(EngineWorkerLl, SharedByOneSomeOrAllBlocksInTurn) {
  constexpr int kBlocks = 5;
  constexpr int kShares[] = {1, kBlocks, 2, 3, 1, 8, 4};
  constexpr int kPatterns = sizeof(kShares) / sizeof(kShares[0]);
  TwoLlRanks ranks(kBlocks);
  ASSERT_TRUE(ranks.worker0 && ranks.worker1);
  const auto& ll = ranks.ll;
  std::uint64_t call = 0;
  for (int round = 0; round < 21; ++round) {
    const int blocks = kShares[round % kPatterns], peer_blocks = kShares[(round / kPatterns + round) % kPatterns];
    const std::size_t count = 1 + (round * 40009 + 7) % (ll_max_bytes(2) / 8);
    std::vector<std::int64_t> a(count + 1), b(count + 1);
    for (std::size_t i = 0; i <= count; ++i) {
      a[i] = static_cast<std::int64_t>(i * 31 + round) - 9;
      b[i] = 7000 - static_cast<std::int64_t>(5 * i);
    }
    SumBuffers buffers(a, b);
    DeviceBuffer &in0 = buffers.in0, &in1 = buffers.in1, &out0 = buffers.out0, &out1 = buffers.out1;
    ++call;
    WorkItem item0 = ll_sum(in0, out0, count, ll, 0, call, 10000), item1 = ll_sum(in1, out1, count, ll, 1, call, 10000);
    item0.blocks = blocks;
    item1.blocks = peer_blocks;
    const auto [status0, status1] = ranks.run(item0, item1);
    ASSERT_EQ(status0, Status::kOk);
    ASSERT_EQ(status1, Status::kOk);
    ASSERT_NO_FATAL_FAILURE(buffers.expect_sums(count, "round " + std::to_string(round) + " (" +
                                                           std::to_string(blocks) + " and " +
                                                           std::to_string(peer_blocks) + " blocks)"));

    // Rank 1's input, broadcast from rank 1 into rank 0's sums (not a
    // whole number of elements).
    const std::size_t bytes = count * 8 - 3;
    WorkItem bcast[2] = {};
    ++call;
    for (int r = 0; r < 2; ++r) {
      LlBcastArgs& args = bcast[r].ll_bcast;
      bcast[r].kind = WorkKind::kLlBcast;
      bcast[r].blocks = r == 0 ? peer_blocks : blocks;
      args.buffer = r == 0 ? out0.ptr : in1.ptr;
      for (int p = 0; p < 2; ++p) args.buffers[p] = ll[p]->ptr;
      args.bytes = bytes;
      args.rank = r;
      args.nranks = 2;
      args.root = 1;
      args.flag = doorbell_flag(call);
      args.parity = static_cast<std::uint32_t>(call % 2);
      args.timeout_ms = 10000;
    }
    const auto [bcast0, bcast1] = ranks.run(bcast[0], bcast[1]);
    ASSERT_EQ(bcast0, Status::kOk);
    ASSERT_EQ(bcast1, Status::kOk);
    const auto got = out0.read<std::int64_t>();
    ASSERT_EQ(std::memcmp(got.data(), b.data(), bytes), 0) << "bcast, round " << round;
    // The last element: 5 bytes of rank 1's, 3 of the sum left in place.
    std::int64_t expected_last = a[count - 1] + b[count - 1];
    std::memcpy(&expected_last, &b[count - 1], 5);
    EXPECT_EQ(got[count - 1], expected_last) << "bcast, round " << round << ": the bytes past it changed";
  }
}

// An LL call's blocks by size: block 0 alone up to 8 KiB a rank, then a
// block per 4 KiB (at least two), never more than the worker has.
TEST(EngineWorkerLl, CallsTakeABlockPerFourKiBAboveEightKiB) {
  constexpr std::size_t KiB = 1024;
  EXPECT_EQ(ll_share_blocks(1, 32), 1);
  EXPECT_EQ(ll_share_blocks(8 * KiB, 32), 1);
  EXPECT_EQ(ll_share_blocks(8 * KiB + 1, 32), 3);
  EXPECT_EQ(ll_share_blocks(16 * KiB, 32), 4);
  EXPECT_EQ(ll_share_blocks(128 * KiB, 32), 32);
  EXPECT_EQ(ll_share_blocks(512 * KiB, 32), 32);
  EXPECT_EQ(ll_share_blocks(512 * KiB, 64), 64);
  EXPECT_EQ(ll_share_blocks(512 * KiB, 1), 1);
  EXPECT_EQ(ll_share_blocks(12 * KiB, 2), 2);
  EXPECT_EQ(ll_share_blocks(64 * KiB, 16, 16 * KiB, 0), 16) << "0 bytes a block: every block";
}

// A line's lanes and the flag word: the layout the kernels and the
// emulated device share.
TEST(EngineWorkerLl128, LinesFitTheSlotsAndFlagsDifferFromLlWords) {
  EXPECT_EQ(ll128_max_bytes(2), std::size_t{960} << 10);
  for (int nranks = 1; nranks <= kInlineRanks; ++nranks) {
    const std::size_t lines = ll128_max_bytes(nranks) / kLl128LineData;
    EXPECT_EQ(lines * kLl128LineBytes, ll_slot_bytes(nranks)) << nranks << " ranks";
    EXPECT_EQ(ll128_line_offset(1, nranks - 1, lines - 1, nranks) + kLl128LineBytes, 2 * nranks * ll_slot_bytes(nranks));
  }
  // An LL word in the flag's place carries an older call's flag in its upper
  // half; the LL128 flag word has the call's own in both halves.
  const std::uint32_t flag = doorbell_flag(41), older = doorbell_flag(39);
  const std::uint64_t ll_word = static_cast<std::uint64_t>(older) << 32 | flag;
  EXPECT_NE(ll_word, ll128_flag_word(flag));
  EXPECT_EQ(ll128_flag_word(flag) >> 32, flag);
}

// Every sender's slot of both parities lies inside the buffer, apart from
// every other, and holds ll_max_bytes of data as lines.
TEST(EngineWorkerLl, SlotsFitTheBufferForEveryRankCount) {
  EXPECT_EQ(ll_max_bytes(2), std::size_t{512} << 10);
  EXPECT_EQ(ll_max_bytes(kInlineRanks), std::size_t{64} << 10);
  for (int nranks = 1; nranks <= kInlineRanks; ++nranks) {
    const std::size_t chunks = ll_max_bytes(nranks) / kLlChunkBytes;
    std::size_t end = 0;
    for (std::uint32_t parity = 0; parity < 2; ++parity) {
      for (int sender = 0; sender < nranks; ++sender) {
        const std::size_t first = ll_chunk_offset(parity, sender, 0, nranks);
        EXPECT_GE(first, end) << nranks << " ranks, parity " << parity << ", sender " << sender;
        EXPECT_EQ(first % kLlSlotAlign, 0u);
        end = ll_chunk_offset(parity, sender, chunks - 1, nranks) + kLlChunkLineBytes;
      }
    }
    EXPECT_LE(end, kLlBufferBytes) << nranks << " ranks";
  }
}

TEST(EngineWorkerLl, APeerThatNeverSendsEndsInTimeout) {
  auto worker = Worker::create(device(), 0, 1, 100000);
  ASSERT_NE(worker, nullptr);
  DeviceBuffer ll0(kLlBufferBytes), ll1(kLlBufferBytes), in(64), out(64);
  ll0.fill(std::vector<char>(kLlBufferBytes, 0));
  in.fill(std::vector<std::int64_t>(8, 5));
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(worker->run(ll_sum(in, out, 8, {&ll0, &ll1}, 0, 1, 100)), Status::kTimeout);
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(100));
  // The worker goes on serving.
  ASSERT_EQ(worker->run(sum_of({&in, &in}, out, 8)), Status::kOk);
  EXPECT_EQ(out.read<std::int64_t>()[0], 10);
}

// A peer process that ends while an LL call waits for its lines: the wait
// has no deadline, yet the worker gives the item up once the peer watch has
// seen the process end, and the call fails as kPeerEnded naming it. In a
// process of its own: the abandon word stays raised for the whole process.
TEST(EngineWorkerLl, APeerThatEndsIsGivenUpWithoutADeadline) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  auto waits_for_an_ended_peer = [] {
    const pid_t peer = fork();
    if (peer == 0) {
      pause();
      _exit(0);
    }
    if (peer < 0) _exit(2);
    Status status = Status::kInternal;
    double seconds = 0;
    {  // Every thread (the worker's, the watch's) has ended before _exit.
      auto worker = Worker::create(device(), 0, 1, 100000);
      if (!worker) _exit(2);
      PeerWatch watch({0, static_cast<std::int32_t>(peer)});
      DeviceBuffer ll0(kLlBufferBytes), ll1(kLlBufferBytes), in(64), out(64);
      ll0.fill(std::vector<char>(kLlBufferBytes, 0));
      in.fill(std::vector<std::int64_t>(8, 5));
      std::thread killer([peer] {
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        kill(peer, SIGKILL);
        waitpid(peer, nullptr, 0);
      });
      const auto start = std::chrono::steady_clock::now();
      status = worker->run(ll_sum(in, out, 8, {&ll0, &ll1}, 0, 1, 0));
      seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      killer.join();
    }
    const std::string named = "rank 1 (pid " + std::to_string(peer) + ")";
    std::fprintf(stderr, "status %s after %.2f s; %s\n", status_name(status), seconds, last_ended_peer().c_str());
    _exit(status == Status::kPeerEnded && seconds < 5 && last_ended_peer().find(named) == 0 ? 0 : 1);
  };
  EXPECT_EXIT(waits_for_an_ended_peer(), ::testing::ExitedWithCode(0), "status a peer process has ended after");
}
}  // namespace
}  // namespace ferry

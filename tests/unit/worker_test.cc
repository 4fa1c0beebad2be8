// The engine worker's mailbox protocol on the emulated device (a host thread
// plays the persistent kernel): items run in order, a worker that left idle
// is started again without losing an item, failures come back as statuses.
// With FERRY_UNIT_TEST_DEVICE=cuda the same tests run the persistent kernel
// on GPU 0 (two "ranks" are two workers of this process there).
#include "engine/collectives/worker.h"

#include "engine/collectives/worker_common.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "engine/common/liveness.h"
#include "engine/core/peer_watch.h"
#include "tests/unit/unit_test_device.h"

namespace ferry {
namespace {

gpu::Backend* device() { return testing::unit_test_device(); }

struct DeviceBuffer {
  explicit DeviceBuffer(std::size_t bytes) : bytes(bytes) {
    EXPECT_EQ(device()->device_alloc(bytes, &ptr), Status::kOk);
  }
  ~DeviceBuffer() { EXPECT_TRUE(ferry::ok(device()->device_free(ptr))); }
  template <typename T>
  void fill(const std::vector<T>& values) {
    ASSERT_EQ(gpu::copy(ptr, values.data(), values.size() * sizeof(T)), Status::kOk);
  }
  template <typename T>
  std::vector<T> read() const {
    std::vector<T> values(bytes / sizeof(T));
    EXPECT_EQ(gpu::copy(values.data(), ptr, bytes), Status::kOk);
    return values;
  }
  std::size_t bytes;
  void* ptr = nullptr;
};

WorkItem sum_of(const std::vector<DeviceBuffer*>& inputs, DeviceBuffer& output, std::size_t count) {
  WorkItem item{};
  item.kind = WorkKind::kDirectReduce;
  item.blocks = 1;
  item.reduce.ninputs = static_cast<int>(inputs.size());
  for (std::size_t r = 0; r < inputs.size(); ++r) item.reduce.inputs[r] = inputs[r]->ptr;
  item.reduce.noutputs = 1;
  item.reduce.outputs[0] = output.ptr;
  item.reduce.count = count;
  item.reduce.type = DataType::kInt64;
  item.reduce.op = ReduceOp::kSum;
  return item;
}

TEST(EngineWorkerDoorbell, EncodesWhatFitsAndDefersTheRest) {
  for (int inputs = 1; inputs <= kInlineRanks; ++inputs) {
    for (int outputs : {1, inputs}) {
      WorkItem item{};
      item.kind = WorkKind::kDirectReduce;
      item.blocks = 300 + inputs;
      item.reduce.ninputs = inputs;
      item.reduce.noutputs = outputs;
      item.reduce.count = (std::size_t{1} << 40) + 12345 * inputs;
      item.reduce.type = DataType::kComplex128;
      item.reduce.op = ReduceOp::kProd;
      for (int r = 0; r < inputs; ++r) item.reduce.inputs[r] = reinterpret_cast<void*>(0x7f0000001000ull + 64 * r);
      for (int k = 0; k < outputs; ++k) item.reduce.outputs[k] = reinterpret_cast<void*>(0x7e0000000008ull + 8 * k);
      std::uint32_t words[kDoorbellWords];
      const int used = encode_doorbell(item, words);
      ASSERT_LE(used, kDoorbellWords);
      EXPECT_EQ(doorbell_words(words[0]), used);
      WorkItem back{};
      const bool fits = 4 + 2 * (inputs + outputs) <= kDoorbellWords;
      ASSERT_EQ(decode_doorbell(words, &back), fits) << inputs << " inputs, " << outputs << " outputs";
      EXPECT_EQ(doorbell_in_mailbox(words[0]), !fits);
      if (!fits) continue;
      EXPECT_EQ(back.kind, item.kind);
      EXPECT_EQ(back.blocks, item.blocks);
      EXPECT_EQ(back.reduce.count, item.reduce.count);
      EXPECT_EQ(back.reduce.type, item.reduce.type);
      EXPECT_EQ(back.reduce.op, item.reduce.op);
      ASSERT_EQ(back.reduce.ninputs, inputs);
      ASSERT_EQ(back.reduce.noutputs, outputs);
      for (int r = 0; r < inputs; ++r) EXPECT_EQ(back.reduce.inputs[r], item.reduce.inputs[r]);
      for (int k = 0; k < outputs; ++k) EXPECT_EQ(back.reduce.outputs[k], item.reduce.outputs[k]);
    }
  }
  for (int count = 1; count <= kMaxWorkerCopies; ++count) {
    WorkItem item{};
    item.kind = WorkKind::kCopies;
    item.blocks = 1;
    item.copies.count = count;
    for (int c = 0; c < count; ++c) {
      item.copies.sources[c] = reinterpret_cast<void*>(0x1000ull * (c + 1) + 3);
      item.copies.destinations[c] = reinterpret_cast<void*>(0x7fff00000000ull + c);
      item.copies.bytes[c] = (std::uint64_t{1} << 33) + c;
    }
    std::uint32_t words[kDoorbellWords];
    encode_doorbell(item, words);
    WorkItem back{};
    const bool fits = 2 + 6 * count <= kDoorbellWords;
    ASSERT_EQ(decode_doorbell(words, &back), fits) << count << " copies";
    if (!fits) continue;
    ASSERT_EQ(back.copies.count, count);
    for (int c = 0; c < count; ++c) {
      EXPECT_EQ(back.copies.sources[c], item.copies.sources[c]);
      EXPECT_EQ(back.copies.destinations[c], item.copies.destinations[c]);
      EXPECT_EQ(back.copies.bytes[c], item.copies.bytes[c]);
    }
  }
  for (int nranks = 2; nranks <= kInlineRanks; ++nranks) {
    WorkItem item{};
    item.kind = WorkKind::kLlAlltoallv;
    item.blocks = 1;
    LlAlltoallvArgs& a = item.ll_alltoallv;
    a.rank = nranks - 1;
    a.nranks = nranks;
    a.flag = 0xfffffffeu;
    a.parity = 1;
    a.timeout_ms = 600000;
    for (int r = 0; r < nranks; ++r) {
      a.send[r] = reinterpret_cast<void*>(0x7f0000000000ull + 4096 * r + 3);
      a.send_bytes[r] = ll_max_bytes(nranks) - r;
      a.recv[r] = reinterpret_cast<void*>(0x7e0000000000ull + 4096 * r + 5);
      a.recv_bytes[r] = r;
      a.buffers[r] = reinterpret_cast<void*>(0x7d0000000000ull + (std::uint64_t{1} << 20) * r);
    }
    std::uint32_t words[kDoorbellWords];
    encode_doorbell(item, words);
    WorkItem back{};
    const bool fits = 4 + 8 * nranks <= kDoorbellWords;
    ASSERT_EQ(decode_doorbell(words, &back), fits) << nranks << " ranks";
    if (!fits) continue;
    const LlAlltoallvArgs& b = back.ll_alltoallv;
    EXPECT_EQ(back.kind, WorkKind::kLlAlltoallv);
    EXPECT_EQ(b.rank, a.rank);
    EXPECT_EQ(b.flag, a.flag);
    EXPECT_EQ(b.parity, a.parity);
    EXPECT_EQ(b.timeout_ms, a.timeout_ms);
    for (int r = 0; r < nranks; ++r) {
      EXPECT_EQ(b.send[r], a.send[r]);
      EXPECT_EQ(b.send_bytes[r], a.send_bytes[r]);
      EXPECT_EQ(b.recv[r], a.recv[r]);
      EXPECT_EQ(b.recv_bytes[r], a.recv_bytes[r]);
      EXPECT_EQ(b.buffers[r], a.buffers[r]);
    }
  }
  {
    WorkItem item{};
    item.kind = WorkKind::kLlBcast;
    item.blocks = 1;
    LlBcastArgs& a = item.ll_bcast;
    a.buffer = reinterpret_cast<void*>(0x7f0000000123ull);
    a.bytes = ll_max_bytes(kInlineRanks);
    a.rank = 3;
    a.nranks = kInlineRanks;
    a.root = 15;
    a.flag = 7;
    a.timeout_ms = 1;
    for (int r = 0; r < kInlineRanks; ++r) a.buffers[r] = reinterpret_cast<void*>(0x7d0000000000ull + r);
    std::uint32_t words[kDoorbellWords];
    encode_doorbell(item, words);
    WorkItem back{};
    ASSERT_TRUE(decode_doorbell(words, &back));
    EXPECT_EQ(back.ll_bcast.buffer, a.buffer);
    EXPECT_EQ(back.ll_bcast.bytes, a.bytes);
    EXPECT_EQ(back.ll_bcast.root, a.root);
    EXPECT_EQ(back.ll_bcast.rank, a.rank);
    EXPECT_EQ(back.ll_bcast.nranks, a.nranks);
    EXPECT_EQ(back.ll_bcast.flag, a.flag);
    EXPECT_EQ(back.ll_bcast.parity, 0u);
    EXPECT_EQ(back.ll_bcast.timeout_ms, a.timeout_ms);
    for (int r = 0; r < kInlineRanks; ++r) EXPECT_EQ(back.ll_bcast.buffers[r], a.buffers[r]);
  }
  // Past kInlineRanks the pointers are in tables: the item waits in the mailbox.
  {
    WorkItem item{};
    item.kind = WorkKind::kLlAllreduce;
    item.ll.nranks = kInlineRanks + 1;
    std::uint32_t words[kDoorbellWords];
    encode_doorbell(item, words);
    EXPECT_TRUE(doorbell_in_mailbox(words[0]));
    item.kind = WorkKind::kDirectReduce;
    item.reduce.ninputs = kInlineRanks + 1;
    item.reduce.noutputs = 1;
    item.reduce.table = reinterpret_cast<const void* const*>(0x7f0000000000ull);
    encode_doorbell(item, words);
    EXPECT_TRUE(doorbell_in_mailbox(words[0]));
  }
  EXPECT_NE(doorbell_flag(0xffffffffull), 0u);
  EXPECT_NE(doorbell_flag(0xfffffffeull), doorbell_flag(0xffffffffull));
}

TEST(EngineWorker, RunsItemsTooLargeForTheDoorbell) {
  auto worker = Worker::create(device(), 0, 1, 100000);
  ASSERT_NE(worker, nullptr);
  DeviceBuffer a(8), sum(8);
  a.fill(std::vector<std::int64_t>{3});
  std::vector<DeviceBuffer*> inputs(kInlineRanks, &a);
  std::vector<std::unique_ptr<DeviceBuffer>> outputs;
  WorkItem item = sum_of(inputs, sum, 1);
  item.reduce.noutputs = kInlineRanks;  // two-shot at 16 ranks: 32 pointers
  for (int k = 0; k < kInlineRanks; ++k) {
    outputs.push_back(std::make_unique<DeviceBuffer>(8));
    item.reduce.outputs[k] = outputs.back()->ptr;
  }
  ASSERT_EQ(worker->run(item), Status::kOk);
  for (const auto& out : outputs) EXPECT_EQ(out->read<std::int64_t>()[0], 3 * kInlineRanks);
}

WorkItem ll_sum(DeviceBuffer& input, DeviceBuffer& output, std::size_t count, const std::vector<DeviceBuffer*>& ll,
               int rank, std::uint64_t call, std::uint32_t timeout_ms) {
  WorkItem item{};
  item.kind = WorkKind::kLlAllreduce;
  item.blocks = 1;
  item.ll.input = input.ptr;
  item.ll.output = output.ptr;
  for (std::size_t r = 0; r < ll.size(); ++r) item.ll.buffers[r] = ll[r]->ptr;
  item.ll.count = count;
  item.ll.type = DataType::kInt64;
  item.ll.op = ReduceOp::kSum;
  item.ll.rank = rank;
  item.ll.nranks = static_cast<int>(ll.size());
  item.ll.flag = doorbell_flag(call);
  item.ll.parity = static_cast<std::uint32_t>(call % 2);
  item.ll.timeout_ms = timeout_ms;
  return item;
}

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

TEST(EngineWorker, RunsReducesAndCopiesInOrder) {
  constexpr std::size_t kCount = 1001;
  auto worker = Worker::create(device(), 0, 4, 100000);
  ASSERT_NE(worker, nullptr);
  DeviceBuffer a(kCount * 8), b(kCount * 8), out(kCount * 8), copy(kCount * 8);
  for (std::int64_t round = 0; round < 50; ++round) {
    std::vector<std::int64_t> x(kCount), y(kCount);
    std::iota(x.begin(), x.end(), round);
    std::iota(y.begin(), y.end(), 3 * round - 500);
    a.fill(x);
    b.fill(y);
    ASSERT_EQ(worker->run(sum_of({&a, &b}, out, kCount)), Status::kOk);
    WorkItem copies{};
    copies.kind = WorkKind::kCopies;
    copies.blocks = 1;
    copies.copies.count = 2;
    copies.copies.sources[0] = out.ptr;  // the sum's first half
    copies.copies.destinations[0] = copy.ptr;
    copies.copies.bytes[0] = kCount / 2 * 8;
    copies.copies.sources[1] = static_cast<char*>(a.ptr) + kCount / 2 * 8 + 3;  // odd offsets, odd length
    copies.copies.destinations[1] = static_cast<char*>(copy.ptr) + kCount / 2 * 8 + 3;
    copies.copies.bytes[1] = kCount * 8 - kCount / 2 * 8 - 3;
    ASSERT_EQ(worker->run(copies), Status::kOk);
    const auto sum = out.read<std::int64_t>();
    const auto copied = copy.read<std::int64_t>();
    for (std::size_t i = 0; i < kCount; ++i) {
      ASSERT_EQ(sum[i], x[i] + y[i]) << "round " << round << " element " << i;
      if (i < kCount / 2) ASSERT_EQ(copied[i], x[i] + y[i]) << "round " << round << " element " << i;
      if (i > kCount / 2) ASSERT_EQ(copied[i], x[i]) << "round " << round << " element " << i;
    }
  }
  EXPECT_EQ(worker->launches(), 1u) << "a busy worker with a long idle limit stays up";
}

// A list of copies at every alignment class (16-byte, 4-byte and byte
// accesses; heads and tails), from a few bytes to past a MiB, by the
// launched kernel and by the worker's blocks; bytes outside them untouched.
TEST(EngineCopyList, EveryAlignmentAndSizeByKernelAndWorker) {
  constexpr std::size_t kBytes = (std::size_t{3} << 20) + 4096;
  DeviceBuffer source(kBytes), target(kBytes);
  std::vector<std::uint8_t> data(kBytes), before(kBytes);
  for (std::size_t i = 0; i < kBytes; ++i) {
    data[i] = static_cast<std::uint8_t>(i * 2654435761u >> 13);
    before[i] = static_cast<std::uint8_t>(~data[i]);
  }
  source.fill(data);
  // (source offset, target offset, bytes): equal misalignment mod 16, mod 4
  // only, and neither; some shorter than their head.
  const std::size_t cases[][3] = {{0, 0, 1 << 20},  {3, 19, 100000}, {4, 8, 87380},  {1, 2, 4099},
                                  {12, 44, 3},      {5, 5, 11},      {7, 3, 65541},  {16, 48, 16},
                                  {2, 6, 70001},    {9, 25, 0},      {13, 1, 1},     {6, 10, 262147},
                                  {0, 4, 4096 * 3}, {15, 15, 17},    {8, 0, 1048579}, {11, 23, 30}};
  static_assert(sizeof(cases) / sizeof(cases[0]) == kMaxListedCopies, "one list");
  CopyListArgs list{};
  std::size_t from = 0, to = 0;
  std::vector<std::uint8_t> expected = before;
  for (const auto& c : cases) {
    list.sources[list.count] = static_cast<char*>(source.ptr) + from + c[0];
    list.destinations[list.count] = static_cast<char*>(target.ptr) + to + c[1];
    list.bytes[list.count++] = c[2];
    std::memcpy(expected.data() + to + c[1], data.data() + from + c[0], c[2]);
    from += c[0] + c[2] / 2;  // sources overlap: copies only read them
    to += c[1] + c[2] + 32;
  }
  ASSERT_LE(to, kBytes);
  gpu::Stream stream = nullptr;
  ASSERT_EQ(device()->stream_create(&stream), Status::kOk);
  target.fill(before);
  ASSERT_EQ(launch_copies(device(), list, stream), Status::kOk);
  ASSERT_EQ(device()->stream_synchronize(stream), Status::kOk);
  EXPECT_TRUE(target.read<std::uint8_t>() == expected) << "launched kernel";
  EXPECT_TRUE(ferry::ok(device()->stream_destroy(stream)));

  auto worker = Worker::create(device(), 0, 4, 100000);
  ASSERT_NE(worker, nullptr);
  for (int blocks : {1, 3}) {
    target.fill(before);
    WorkItem item{};
    item.kind = WorkKind::kCopies;
    item.blocks = blocks;
    item.copies = list;
    ASSERT_EQ(worker->run(item), Status::kOk);
    EXPECT_TRUE(target.read<std::uint8_t>() == expected) << "worker, " << blocks << " blocks";
  }
}

TEST(EngineWorker, StartsAgainAfterLeavingIdle) {
  // Idle limit 0: the worker leaves as soon as it finds no work, so calls
  // race its exit; none may be lost or run twice.
  auto worker = Worker::create(device(), 0, 1, 0);
  ASSERT_NE(worker, nullptr);
  DeviceBuffer counter(8), one(8);
  counter.fill(std::vector<std::int64_t>{0});
  one.fill(std::vector<std::int64_t>{1});
  constexpr int kCalls = 300;
  for (int call = 0; call < kCalls; ++call) {
    ASSERT_EQ(worker->run(sum_of({&counter, &one}, counter, 1)), Status::kOk);
    if (call % 50 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(counter.read<std::int64_t>()[0], kCalls);
  EXPECT_GT(worker->launches(), 1u);
}

TEST(EngineWorker, AnItemItCannotRunFailsAndTheNextRuns) {
  auto worker = Worker::create(device(), 0, 1, 100000);
  ASSERT_NE(worker, nullptr);
  DeviceBuffer a(16), out(16);
  a.fill(std::vector<std::int64_t>{5, 7});
  WorkItem bad = sum_of({&a}, out, 1);
  bad.reduce.type = DataType::kComplex64;
  bad.reduce.op = ReduceOp::kMin;  // MPI defines no MIN on complex numbers
  EXPECT_EQ(worker->run(bad), Status::kUnsupported);
  ASSERT_EQ(worker->run(sum_of({&a, &a}, out, 2)), Status::kOk);
  EXPECT_EQ(out.read<std::int64_t>(), (std::vector<std::int64_t>{10, 14}));
}

}  // namespace
}  // namespace ferry

// The engine worker's mailbox protocol on the emulated device (a host thread
// plays the persistent kernel): items run in order, a worker that left idle
// is started again without losing an item, failures come back as statuses
// (its LL items: worker_ll_test.cc).
// With FERRY_UNIT_TEST_DEVICE=cuda the same tests run the persistent kernel
// on GPU 0 (two "ranks" are two workers of this process there).
#include "engine/collectives/worker.h"

#include "engine/collectives/worker_common.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "tests/unit/worker_test_buffers.h"

namespace ferry {
namespace {

using namespace worker_test;

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

// Past kInlineRanks ranks, kernels and worker items read their per-rank
// pointers from tables in device memory: direct reduces (launched and on
// the worker) and LL calls among 17 to 33 ranks match host references on
// random data. On the emulated device unless FERRY_UNIT_TEST_DEVICE=cuda.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "engine/collectives/worker.h"
#include "engine/collectives/worker_common.h"
#include "engine/core/executor.h"
#include "engine/core/resources.h"
#include "tests/unit/worker_test_buffers.h"

namespace ferry {
namespace {

using namespace worker_test;

std::vector<std::int64_t> random_values(std::size_t count, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<std::int64_t> value(-1000000, 1000000);
  std::vector<std::int64_t> values(count);
  for (auto& v : values) v = value(rng);
  return values;
}

// n inputs of random int64s, reduced into one output or n, by the launched
// kernel and by the worker; an unaligned start takes the element path.
TEST(WorkerTables, DirectReducePastInlineRanks) {
  DeviceResources resources;
  gpu::Stream stream = nullptr;
  ASSERT_EQ(resources.stream_for(device(), 0, &stream), Status::kOk);
  auto worker = Worker::create(device(), 0, 1, 100000);
  ASSERT_NE(worker, nullptr);
  constexpr std::size_t kCount = 1029;
  for (int n : {17, 24, 33}) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
      for (std::size_t skip : {std::size_t{0}, std::size_t{1}}) {
        std::vector<std::unique_ptr<DeviceBuffer>> ins, outs;
        std::vector<std::int64_t> expected;
        std::vector<const void*> inputs;
        for (int r = 0; r < n; ++r) {
          const auto values = random_values(kCount + 1, static_cast<unsigned>(n * 100 + r));
          ins.push_back(std::make_unique<DeviceBuffer>((kCount + 1) * 8));
          ins.back()->fill(values);
          inputs.push_back(static_cast<char*>(ins.back()->ptr) + skip * 8);
          if (r == 0) expected.assign(values.begin() + skip, values.begin() + skip + kCount);
          for (std::size_t i = 0; i < kCount && r > 0; ++i)
            expected[i] = op == ReduceOp::kSum ? expected[i] + values[skip + i] : std::max(expected[i], values[skip + i]);
        }
        for (int noutputs : {1, n}) {
          for (bool on_worker : {false, true}) {
            std::vector<void*> outputs;
            outs.clear();
            for (int k = 0; k < noutputs; ++k) {
              outs.push_back(std::make_unique<DeviceBuffer>((kCount + 1) * 8));
              outs.back()->fill(std::vector<std::int64_t>(kCount + 1, -1));
              outputs.push_back(static_cast<char*>(outs.back()->ptr) + skip * 8);
            }
            DirectReduceArgs args{};
            args.count = kCount;
            args.type = DataType::kInt64;
            args.op = op;
            ASSERT_EQ(list_direct_pointers(device(), resources, 0, stream, inputs, outputs, &args), Status::kOk);
            ASSERT_NE(args.table, nullptr);
            if (on_worker) {
              ASSERT_EQ(device()->stream_synchronize(stream), Status::kOk);
              WorkItem item{};
              item.kind = WorkKind::kDirectReduce;
              item.blocks = 1;
              item.reduce = args;
              ASSERT_EQ(worker->run(item), Status::kOk);
            } else {
              ASSERT_EQ(launch_direct_reduce(device(), args, stream), Status::kOk);
              ASSERT_EQ(device()->stream_synchronize(stream), Status::kOk);
            }
            for (int k = 0; k < noutputs; ++k) {
              const auto got = outs[k]->read<std::int64_t>();
              for (std::size_t i = 0; i < kCount; ++i)
                ASSERT_EQ(got[skip + i], expected[i]) << n << " inputs, output " << k << ", element " << i
                                                      << (on_worker ? ", worker" : ", kernel");
              EXPECT_EQ(got[skip ? 0 : kCount], -1) << "written outside the output";
            }
          }
        }
      }
    }
  }
}

// n ranks' workers and zeroed LL receive buffers, and the table of those
// buffers every rank's items point to.
struct LlRanks {
  explicit LlRanks(int n) : n(n), table(n * sizeof(void*)), blocks(n * n * sizeof(LlBlocks)) {
    std::vector<void*> pointers;
    for (int r = 0; r < n; ++r) {
      workers.push_back(Worker::create(device(), 0, 1, 100000));
      buffers.push_back(std::make_unique<DeviceBuffer>(kLlBufferBytes));
      buffers.back()->fill(std::vector<char>(kLlBufferBytes, 0));
      pointers.push_back(buffers.back()->ptr);
    }
    table.fill(pointers);
  }
  // Fills what every LL call's arguments share about the ranks.
  template <typename LlArgs>
  void list(int rank, std::uint64_t call, LlArgs* a) const {
    for (int r = 0; r < n && r < kInlineRanks; ++r) a->buffers[r] = buffers[r]->ptr;
    a->buffer_table = static_cast<void* const*>(table.ptr);
    a->rank = rank;
    a->nranks = n;
    a->flag = doorbell_flag(call);
    a->parity = static_cast<std::uint32_t>(call % 2);
    a->timeout_ms = 20000;
  }
  // Runs items[r] on rank r's worker, every rank at once; every status.
  std::vector<Status> run(const std::vector<WorkItem>& items) {
    std::vector<Status> statuses(n, Status::kInternal);
    std::vector<std::thread> threads;
    for (int r = 0; r < n; ++r) threads.emplace_back([&, r] { statuses[r] = workers[r]->run(items[r]); });
    for (auto& t : threads) t.join();
    return statuses;
  }
  int n;
  std::vector<std::unique_ptr<Worker>> workers;
  std::vector<std::unique_ptr<DeviceBuffer>> buffers;
  DeviceBuffer table;
  DeviceBuffer blocks;  // each rank's alltoallv block table, n entries apiece
};

TEST(WorkerTables, LlAllreduceBcastAndAlltoallvPastInlineRanks) {
  constexpr int kRanks = 17;
  LlRanks ranks(kRanks);
  for (const auto& w : ranks.workers) ASSERT_NE(w, nullptr);
  std::uint64_t call = 0;

  // Allreduce (sum) of random int64s.
  constexpr std::size_t kCount = 301;
  std::vector<std::unique_ptr<DeviceBuffer>> ins, outs;
  std::vector<std::int64_t> expected(kCount, 0);
  std::vector<WorkItem> items(kRanks);
  ++call;
  for (int r = 0; r < kRanks; ++r) {
    const auto values = random_values(kCount, static_cast<unsigned>(r + 7));
    for (std::size_t i = 0; i < kCount; ++i) expected[i] += values[i];
    ins.push_back(std::make_unique<DeviceBuffer>(kCount * 8));
    ins.back()->fill(values);
    outs.push_back(std::make_unique<DeviceBuffer>(kCount * 8));
    WorkItem& item = items[r];
    item.kind = WorkKind::kLlAllreduce;
    item.blocks = 1;
    ranks.list(r, call, &item.ll);
    item.ll.input = ins.back()->ptr;
    item.ll.output = outs.back()->ptr;
    item.ll.count = kCount;
    item.ll.type = DataType::kInt64;
    item.ll.op = ReduceOp::kSum;
  }
  for (Status s : ranks.run(items)) ASSERT_EQ(s, Status::kOk);
  for (int r = 0; r < kRanks; ++r) EXPECT_EQ(outs[r]->read<std::int64_t>(), expected) << "rank " << r;

  // Bcast from the last rank, past the inline ones.
  constexpr std::size_t kBytes = 1000;
  const int root = kRanks - 1;
  const auto payload = random_values(kBytes / 8, 99);
  ++call;
  for (int r = 0; r < kRanks; ++r) {
    outs[r]->fill(r == root ? payload : std::vector<std::int64_t>(kBytes / 8, 0));
    WorkItem& item = items[r];
    item = WorkItem{};
    item.kind = WorkKind::kLlBcast;
    item.blocks = 1;
    ranks.list(r, call, &item.ll_bcast);
    item.ll_bcast.buffer = outs[r]->ptr;
    item.ll_bcast.bytes = kBytes;
    item.ll_bcast.root = root;
  }
  for (Status s : ranks.run(items)) ASSERT_EQ(s, Status::kOk);
  for (int r = 0; r < kRanks; ++r) {
    const auto got = outs[r]->read<std::int64_t>();
    EXPECT_TRUE(std::equal(payload.begin(), payload.end(), got.begin())) << "rank " << r;
  }

  // Alltoallv: rank s sends 8 * (s + d + 1) bytes to rank d, packed.
  const auto block_bytes = [](int s, int d) { return std::size_t{8} * (s + d + 1); };
  const auto word = [](int s, int d, std::size_t k) { return static_cast<std::int64_t>(s * 1000000 + d * 1000 + k); };
  std::vector<std::unique_ptr<DeviceBuffer>> sends, recvs;
  std::vector<std::vector<LlBlocks>> tables(kRanks, std::vector<LlBlocks>(kRanks));
  ++call;
  for (int r = 0; r < kRanks; ++r) {
    std::size_t sent = 0, received = 0;
    for (int p = 0; p < kRanks; ++p) sent += block_bytes(r, p), received += block_bytes(p, r);
    sends.push_back(std::make_unique<DeviceBuffer>(sent));
    recvs.push_back(std::make_unique<DeviceBuffer>(received));
    std::vector<std::int64_t> words;
    for (int p = 0; p < kRanks; ++p)
      for (std::size_t k = 0; k < block_bytes(r, p) / 8; ++k) words.push_back(word(r, p, k));
    sends.back()->fill(words);
    recvs.back()->fill(std::vector<std::int64_t>(received / 8, -1));
    WorkItem& item = items[r];
    item = WorkItem{};
    item.kind = WorkKind::kLlAlltoallv;
    item.blocks = 1;
    LlAlltoallvArgs& a = item.ll_alltoallv;
    ranks.list(r, call, &a);
    std::size_t send_at = 0, recv_at = 0;
    for (int p = 0; p < kRanks; ++p) {
      tables[r][p] = {static_cast<char*>(sends.back()->ptr) + send_at, block_bytes(r, p),
                      static_cast<char*>(recvs.back()->ptr) + recv_at, block_bytes(p, r)};
      if (p < kInlineRanks) {
        a.send[p] = tables[r][p].send;
        a.send_bytes[p] = tables[r][p].send_bytes;
        a.recv[p] = tables[r][p].recv;
        a.recv_bytes[p] = tables[r][p].recv_bytes;
      }
      send_at += block_bytes(r, p);
      recv_at += block_bytes(p, r);
    }
    void* table = static_cast<char*>(ranks.blocks.ptr) + r * kRanks * sizeof(LlBlocks);
    ASSERT_EQ(gpu::copy(table, tables[r].data(), kRanks * sizeof(LlBlocks)), Status::kOk);
    a.block_table = static_cast<const LlBlocks*>(table);
  }
  for (Status s : ranks.run(items)) ASSERT_EQ(s, Status::kOk);
  for (int r = 0; r < kRanks; ++r) {
    const auto got = recvs[r]->read<std::int64_t>();
    std::size_t at = 0;
    for (int p = 0; p < kRanks; ++p)
      for (std::size_t k = 0; k < block_bytes(p, r) / 8; ++k, ++at)
        ASSERT_EQ(got[at], word(p, r, k)) << "rank " << r << ", from " << p << ", word " << k;
  }
}

}  // namespace
}  // namespace ferry

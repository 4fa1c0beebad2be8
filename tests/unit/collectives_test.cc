// Engine collectives with every rank a thread of this process, on the
// emulated device, checked against references computed here on the host.
#include "engine/collectives/collectives.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <complex>
#include <cstring>
#include <functional>
#include <random>
#include <type_traits>

#include "engine/core/reduce_common.h"
#include "engine/common/params.h"
#include "engine/collectives/tuner.h"
#include "tests/unit/thread_bootstrap.h"

namespace ferry {
namespace {

using testing::run_ranks;

gpu::Backend* device() { return gpu::emulated_backend(); }

void* device_copy_of(const void* host, std::size_t bytes) {
  void* d = nullptr;
  EXPECT_EQ(device()->device_alloc(bytes ? bytes : 1, &d), Status::kOk);
  EXPECT_EQ(gpu::copy(d, host, bytes), Status::kOk);
  return d;
}

std::vector<char> host_copy_of(const void* device_ptr, std::size_t bytes) {
  std::vector<char> host(bytes);
  EXPECT_EQ(gpu::copy(host.data(), device_ptr, bytes), Status::kOk);
  return host;
}

// Inputs small enough that sums and products of up to 8 ranks are exact.
template <typename T>
T sample(std::mt19937& rng, ReduceOp op) {
  std::uniform_int_distribution<int> small(-3, 3), positive(1, 2), bit(0, 1), byte(0, 255);
  auto pick = [&]() -> int {
    switch (op) {
      case ReduceOp::kProd: return positive(rng);
      case ReduceOp::kLand: case ReduceOp::kLor: case ReduceOp::kLxor: return bit(rng) * (1 + bit(rng));
      case ReduceOp::kBand: case ReduceOp::kBor: case ReduceOp::kBxor: return byte(rng);
      default: return std::is_unsigned_v<T> ? positive(rng) : small(rng);
    }
  };
  if constexpr (kIsComplex<T>) {
    return T{static_cast<decltype(T{}.re)>(pick()), static_cast<decltype(T{}.re)>(pick())};
  } else {
    return static_cast<T>(pick());
  }
}

// The reference, written independently of reduce_common.h.
template <typename T>
T reference(T a, T b, ReduceOp op) {
  if constexpr (kIsComplex<T>) {
    using Real = decltype(T{}.re);
    const std::complex<Real> x(a.re, a.im), y(b.re, b.im);
    const std::complex<Real> r = op == ReduceOp::kSum ? x + y : x * y;
    return T{r.real(), r.imag()};
  } else {
    switch (op) {
      case ReduceOp::kSum: return static_cast<T>(a + b);
      case ReduceOp::kProd: return static_cast<T>(a * b);
      case ReduceOp::kMin: return std::min(a, b);
      case ReduceOp::kMax: return std::max(a, b);
      default: break;
    }
    if constexpr (std::is_integral_v<T>) {
      switch (op) {
        case ReduceOp::kLand: return static_cast<T>(a && b);
        case ReduceOp::kLor: return static_cast<T>(a || b);
        case ReduceOp::kLxor: return static_cast<T>(!a != !b);
        case ReduceOp::kBand: return static_cast<T>(a & b);
        case ReduceOp::kBor: return static_cast<T>(a | b);
        case ReduceOp::kBxor: return static_cast<T>(a ^ b);
        default: break;
      }
    }
    ADD_FAILURE() << "no reference for op " << reduce_op_name(op);
    return a;
  }
}

struct AllreduceCase {
  int nranks;
  std::size_t count;
  std::size_t offset_elements;  // unaligned starts
  bool in_place;
  DataType type;
  ReduceOp op;

  template <typename T, ReduceOp Op>
  void run() {
    std::vector<std::vector<T>> inputs(nranks);
    for (int r = 0; r < nranks; ++r) {
      std::mt19937 rng(1000 + r + static_cast<int>(count));
      for (std::size_t i = 0; i < count; ++i) inputs[r].push_back(sample<T>(rng, Op));
    }
    std::vector<T> expected(inputs[0]);
    for (int r = 1; r < nranks; ++r)
      for (std::size_t i = 0; i < count; ++i) expected[i] = reference(expected[i], inputs[r][i], Op);

    const std::size_t bytes = count * sizeof(T);
    const std::size_t skip = offset_elements * sizeof(T);
    run_ranks(nranks, [&](int rank, std::unique_ptr<Bootstrap> bootstrap) {
      std::unique_ptr<Communicator> comm;
      ASSERT_EQ(Communicator::create(std::move(bootstrap), &comm), Status::kOk);
      std::vector<char> padded(skip + bytes);
      std::memcpy(padded.data() + skip, inputs[rank].data(), bytes);
      char* send = static_cast<char*>(device_copy_of(padded.data(), padded.size()));
      char* recv = in_place ? send : static_cast<char*>(device_copy_of(padded.data(), padded.size()));
      bool ran = false;
      ASSERT_EQ(allreduce(*comm, in_place ? nullptr : send + skip, recv + skip, count, type, op, true, &ran),
                Status::kOk);
      EXPECT_EQ(ran, count > 0);
      if (ran) {
        const std::vector<char> got = host_copy_of(recv + skip, bytes);
        for (std::size_t i = 0; i < count; ++i)
          ASSERT_EQ(std::memcmp(got.data() + i * sizeof(T), &expected[i], sizeof(T)), 0)
              << data_type_name(type) << " " << reduce_op_name(op) << " rank " << rank << " element " << i;
      }
      EXPECT_TRUE(ferry::ok(device()->device_free(send)));
      if (!in_place) EXPECT_TRUE(ferry::ok(device()->device_free(recv)));
    });
  }
};

TEST(EngineAllreduce, EveryTypeAndOpMatchesTheHostReference) {
  for (int t = 0; t < static_cast<int>(DataType::kCount); ++t) {
    for (int o = 0; o < static_cast<int>(ReduceOp::kCount); ++o) {
      AllreduceCase c{3, 1001, 1, false, static_cast<DataType>(t), static_cast<ReduceOp>(o)};
      if (!reduction_defined(c.type, c.op)) continue;
      ASSERT_TRUE(dispatch_reduction(c.type, c.op, c));
    }
  }
}

TEST(EngineAllreduce, RankCountsSizesOffsetsAndInPlace) {
  for (int nranks : {1, 2, 3, 4, 5, 8}) {
    for (std::size_t count : {1, 3, 17, 4096, 65537, 300007}) {
      for (bool in_place : {false, true}) {
        AllreduceCase c{nranks, count, count % 3, in_place, DataType::kFloat32, ReduceOp::kSum};
        dispatch_reduction(c.type, c.op, c);
      }
    }
  }
}

// Past 16 ranks the per-rank pointers travel in tables: the engine still
// takes the call (under FERRY_TUNE, with the forced algorithm) and every
// rank gets the reference.
TEST(EngineAllreduce, PastSixteenRanks) {
  for (int nranks : {17, 20}) {
    for (std::size_t count : {3, 5001}) {
      for (bool in_place : {false, true}) {
        AllreduceCase c{nranks, count, count % 2, in_place, DataType::kInt64, ReduceOp::kSum};
        dispatch_reduction(c.type, c.op, c);
      }
    }
  }
}

// Calls of several sizes, one after another, on one communicator: what the
// algorithms keep from call to call (LL's flags and halves, the ring and
// tree FIFOs' counters) stays in step on every rank.
TEST(EngineAllreduce, ManyCallsOnOneCommunicator) {
  constexpr int kRanks = 3;
  const std::size_t counts[] = {5, 40000, 1, 100003, 7, 100003, 12345};
  run_ranks(kRanks, [&](int rank, std::unique_ptr<Bootstrap> bootstrap) {
    std::unique_ptr<Communicator> comm;
    ASSERT_EQ(Communicator::create(std::move(bootstrap), &comm), Status::kOk);
    for (std::size_t call = 0; call < sizeof(counts) / sizeof(counts[0]); ++call) {
      const std::size_t count = counts[call];
      auto value = [&](int r, std::size_t i) { return static_cast<std::int32_t>((i * 7 + call * 13 + r) % 1000); };
      std::vector<std::int32_t> mine(count);
      for (std::size_t i = 0; i < count; ++i) mine[i] = value(rank, i);
      void* buffer = device_copy_of(mine.data(), count * sizeof(std::int32_t));
      bool ran = false;
      ASSERT_EQ(allreduce(*comm, nullptr, buffer, count, DataType::kInt32, ReduceOp::kSum, true, &ran), Status::kOk);
      ASSERT_TRUE(ran);
      const std::vector<char> got = host_copy_of(buffer, count * sizeof(std::int32_t));
      for (std::size_t i = 0; i < count; ++i) {
        std::int32_t expected = 0, actual = 0;
        for (int r = 0; r < kRanks; ++r) expected += value(r, i);
        std::memcpy(&actual, got.data() + i * sizeof(actual), sizeof(actual));
        ASSERT_EQ(actual, expected) << "call " << call << " element " << i;
      }
      EXPECT_TRUE(ferry::ok(device()->device_free(buffer)));
    }
  });
}

// Under FERRY_TUNE forcing one algorithm for every size (the
// engine_allreduce.tune.* tests, with FERRY_STATS=1), that algorithm ran,
// rather than a fallback that would pass the checks above just as well.
TEST(EngineAllreduce, TheForcedAlgorithmRuns) {
  std::vector<std::string> problems;
  const std::vector<TuneRule> rules = parse_tune(params().tune, &problems);
  if (rules.size() != 1 || rules[0].min_bytes != 0 || !params().stats)
    GTEST_SKIP() << "needs FERRY_TUNE=allreduce:0-:<algorithm> and FERRY_STATS=1";
  const AllreduceAlgorithm forced = rules[0].algorithm;
  const std::uint64_t before = allreduce_choice_count(forced);
  constexpr std::size_t kCount = 4099;
  run_ranks(3, [&](int rank, std::unique_ptr<Bootstrap> bootstrap) {
    std::unique_ptr<Communicator> comm;
    ASSERT_EQ(Communicator::create(std::move(bootstrap), &comm), Status::kOk);
    std::vector<std::int32_t> mine(kCount, rank + 1);
    // Out of place: one-shot runs only so.
    void* send = device_copy_of(mine.data(), kCount * sizeof(std::int32_t));
    void* buffer = device_copy_of(mine.data(), kCount * sizeof(std::int32_t));
    bool ran = false;
    ASSERT_EQ(allreduce(*comm, send, buffer, kCount, DataType::kInt32, ReduceOp::kSum, true, &ran), Status::kOk);
    ASSERT_TRUE(ran);
    const std::vector<char> got = host_copy_of(buffer, kCount * sizeof(std::int32_t));
    std::int32_t last = 0;
    std::memcpy(&last, got.data() + (kCount - 1) * sizeof(last), sizeof(last));
    EXPECT_EQ(last, 6);
    EXPECT_TRUE(ferry::ok(device()->device_free(send)));
    EXPECT_TRUE(ferry::ok(device()->device_free(buffer)));
  });
  EXPECT_GE(allreduce_choice_count(forced), before + 3) << algorithm_info(forced).name << " did not run";
}

// On a communicator of one rank an allreduce in place moves nothing and
// runs no algorithm; out of place it copies the input.
TEST(EngineAllreduce, OneRankInPlaceMovesNothing) {
  if (!params().stats) GTEST_SKIP() << "needs FERRY_STATS=1";
  auto runs = [] {
    std::uint64_t total = 0;
    for (int a = 0; a < static_cast<int>(AllreduceAlgorithm::kCount); ++a)
      total += allreduce_choice_count(static_cast<AllreduceAlgorithm>(a));
    return total;
  };
  const std::uint64_t before = runs();
  run_ranks(1, [&](int, std::unique_ptr<Bootstrap> bootstrap) {
    std::unique_ptr<Communicator> comm;
    ASSERT_EQ(Communicator::create(std::move(bootstrap), &comm), Status::kOk);
    std::vector<double> mine(1001);
    std::mt19937 rng(17);
    for (double& v : mine) v = std::uniform_real_distribution<double>(-1, 1)(rng);
    void* buffer = device_copy_of(mine.data(), mine.size() * sizeof(double));
    bool ran = false;
    ASSERT_EQ(allreduce(*comm, nullptr, buffer, mine.size(), DataType::kFloat64, ReduceOp::kProd, true, &ran),
              Status::kOk);
    EXPECT_TRUE(ran);
    EXPECT_EQ(host_copy_of(buffer, mine.size() * sizeof(double)),
              std::vector<char>(reinterpret_cast<char*>(mine.data()),
                                reinterpret_cast<char*>(mine.data() + mine.size())));
    EXPECT_EQ(runs(), before) << "a one-rank allreduce in place ran an algorithm";
    void* output = device_copy_of(mine.data(), mine.size() * sizeof(double));
    ASSERT_EQ(allreduce(*comm, buffer, output, mine.size(), DataType::kFloat64, ReduceOp::kMax, true, &ran),
              Status::kOk);
    EXPECT_TRUE(ran);
    EXPECT_EQ(host_copy_of(output, mine.size() * sizeof(double)), host_copy_of(buffer, mine.size() * sizeof(double)));
    EXPECT_TRUE(ferry::ok(device()->device_free(output)));
    EXPECT_TRUE(ferry::ok(device()->device_free(buffer)));
  });
}

// Under FERRY_GPU_LEADER=on (the engine_collectives.gpu_leader test), every
// rank shares the emulated device, so rank 0 does the device work of all:
// the tests above then check its results for every rank, and this one that
// it is so.
TEST(EngineAllreduce, OneRankDoesTheDeviceWorkOfEveryRankOnItsGpu) {
  if (params().gpu_leader != "on") GTEST_SKIP() << "needs FERRY_GPU_LEADER=on";
  constexpr int kRanks = 5;
  constexpr std::size_t kCount = 100003;
  run_ranks(kRanks, [&](int rank, std::unique_ptr<Bootstrap> bootstrap) {
    std::unique_ptr<Communicator> comm;
    ASSERT_EQ(Communicator::create(std::move(bootstrap), &comm), Status::kOk);
    ASSERT_TRUE(comm->by_gpu_leaders());
    EXPECT_EQ(comm->gpu_leader(rank), 0);
    EXPECT_EQ(comm->gpu_leader_count(), 1);
    EXPECT_EQ(comm->gpu_leaders_before_me(), rank == 0 ? 0 : 1);
    auto value = [](int r, std::size_t i) { return static_cast<std::int64_t>((i * 2654435761u + r * 97) % 100000); };
    std::vector<std::int64_t> mine(kCount);
    for (std::size_t i = 0; i < kCount; ++i) mine[i] = value(rank, i);
    void* buffer = device_copy_of(mine.data(), kCount * sizeof(std::int64_t));
    bool ran = false;
    ASSERT_EQ(allreduce(*comm, nullptr, buffer, kCount, DataType::kInt64, ReduceOp::kMax, true, &ran), Status::kOk);
    ASSERT_TRUE(ran);
    const std::vector<char> got = host_copy_of(buffer, kCount * sizeof(std::int64_t));
    for (std::size_t i = 0; i < kCount; ++i) {
      std::int64_t expected = value(0, i), actual = 0;
      for (int r = 1; r < kRanks; ++r) expected = std::max(expected, value(r, i));
      std::memcpy(&actual, got.data() + i * sizeof(actual), sizeof(actual));
      ASSERT_EQ(actual, expected) << "rank " << rank << " element " << i;
    }
    EXPECT_TRUE(ferry::ok(device()->device_free(buffer)));
  });
}

TEST(EngineAllreduce, AnIneligibleRankMakesEveryRankFallBack) {
  run_ranks(3, [](int rank, std::unique_ptr<Bootstrap> bootstrap) {
    std::unique_ptr<Communicator> comm;
    ASSERT_EQ(Communicator::create(std::move(bootstrap), &comm), Status::kOk);
    std::vector<float> ones(64, 1.0f);
    void* buffer = device_copy_of(ones.data(), 256);
    bool ran = true;
    ASSERT_EQ(allreduce(*comm, nullptr, buffer, 64, DataType::kFloat32, ReduceOp::kSum, rank != 1, &ran),
              Status::kOk);
    EXPECT_FALSE(ran);
    EXPECT_EQ(host_copy_of(buffer, 256), host_copy_of(device_copy_of(ones.data(), 256), 256));
  });
}

TEST(EngineBcast, EveryRootAndSize) {
  // From 3 ranks and 1 MiB on, bcast runs along a chain (Simple protocol).
  for (int nranks : {1, 2, 3, 5}) {
    for (std::size_t bytes : {std::size_t{1}, std::size_t{7}, std::size_t{4096}, std::size_t{100001},
                              (std::size_t{3} << 20) + 13}) {
      for (int root = 0; root < nranks; ++root) {
        std::vector<char> payload(bytes);
        std::mt19937 rng(static_cast<unsigned>(bytes + root));
        for (auto& b : payload) b = static_cast<char>(rng());
        run_ranks(nranks, [&](int rank, std::unique_ptr<Bootstrap> bootstrap) {
          std::unique_ptr<Communicator> comm;
          ASSERT_EQ(Communicator::create(std::move(bootstrap), &comm), Status::kOk);
          std::vector<char> initial(bytes, static_cast<char>(rank == root ? 0 : 0x5a));
          if (rank == root) initial = payload;
          void* buffer = device_copy_of(initial.data(), bytes);
          bool ran = false;
          ASSERT_EQ(bcast(*comm, buffer, bytes, root, true, &ran), Status::kOk);
          EXPECT_TRUE(ran);
          EXPECT_EQ(host_copy_of(buffer, bytes), payload) << "rank " << rank << " root " << root;
          EXPECT_TRUE(ferry::ok(device()->device_free(buffer)));
        });
      }
    }
  }
}

// Every one of nranks ranks bcasts `bytes` of random data from root on the
// engine and checks what it got; check(comm) runs on each rank's
// communicator before the call.
void bcast_random_bytes(int nranks, std::size_t bytes, int root, unsigned seed,
                        const std::function<void(Communicator&)>& check = {}) {
  std::vector<char> payload(bytes);
  std::mt19937 rng(seed);
  for (auto& b : payload) b = static_cast<char>(rng());
  run_ranks(nranks, [&](int rank, std::unique_ptr<Bootstrap> bootstrap) {
    std::unique_ptr<Communicator> comm;
    ASSERT_EQ(Communicator::create(std::move(bootstrap), &comm), Status::kOk);
    if (check) check(*comm);
    std::vector<char> initial = rank == root ? payload : std::vector<char>(bytes, 0x5a);
    void* buffer = device_copy_of(initial.data(), bytes);
    bool ran = false;
    ASSERT_EQ(bcast(*comm, buffer, bytes, root, true, &ran), Status::kOk);
    ASSERT_TRUE(ran);
    EXPECT_EQ(host_copy_of(buffer, bytes), payload) << "rank " << rank;
    EXPECT_TRUE(ferry::ok(device()->device_free(buffer)));
  });
}

TEST(EngineBcast, PastSixteenRanks) {
  for (std::size_t bytes : {std::size_t{5}, std::size_t{100001}, (std::size_t{1} << 20) + 3})
    for (int root : {0, 19}) bcast_random_bytes(20, bytes, root, static_cast<unsigned>(bytes + root));
}

// Under FERRY_TUNE forcing one bcast algorithm for every size (the
// engine_bcast.tune.* tests, with FERRY_STATS=1), that algorithm ran.
TEST(EngineBcast, TheForcedAlgorithmRuns) {
  std::vector<std::string> problems;
  const std::vector<TuneRule> rules = parse_tune(params().tune, &problems);
  if (rules.size() != 1 || rules[0].collective != TunedCollective::kBcast || rules[0].min_bytes != 0 ||
      !params().stats)
    GTEST_SKIP() << "needs FERRY_TUNE=bcast:0-:<algorithm> and FERRY_STATS=1";
  const BcastAlgorithm forced = rules[0].bcast;
  const std::uint64_t before = bcast_choice_count(forced);
  // Past one LL block's share, within LL's slots at 3 ranks.
  bcast_random_bytes(3, 100001, 1, 7);
  EXPECT_GE(bcast_choice_count(forced), before + 3) << bcast_algorithm_info(forced).name << " did not run";
}

// With every rank on one GPU (here the ranks share this process's emulated
// device), the engine's own choice for a bcast of 16-256 KiB is LL; above,
// the pull.
TEST(EngineBcast, EveryRankOnOneGpuTakesLlUpTo256KiB) {
  if (!params().stats || !params().tune.empty() || !params().worker || params().gpu_leader == "on")
    GTEST_SKIP() << "needs FERRY_STATS=1, no FERRY_TUNE, the worker, and no forced GPU leader";
  // Communicators take their ranks' device from the active backend.
  if (gpu::active_backend() != device()) GTEST_SKIP() << "needs FERRY_DEVICE=emulated where a GPU is present";
  for (std::size_t bytes : {std::size_t{100001}, std::size_t{256} << 10, (std::size_t{256} << 10) + 4}) {
    const bool ll = bytes <= (std::size_t{256} << 10);
    const std::uint64_t before = bcast_choice_count(ll ? BcastAlgorithm::kLl : BcastAlgorithm::kPull);
    bcast_random_bytes(2, bytes, 0, 11, [](Communicator& comm) { EXPECT_TRUE(comm.on_one_gpu()); });
    EXPECT_EQ(bcast_choice_count(ll ? BcastAlgorithm::kLl : BcastAlgorithm::kPull), before + 2)
        << bytes << " bytes: " << (ll ? "LL" : "the pull") << " did not run";
  }
}

// A bcast on a communicator of one rank moves nothing and runs no algorithm.
TEST(EngineBcast, OneRankMovesNothing) {
  if (!params().stats) GTEST_SKIP() << "needs FERRY_STATS=1";
  std::uint64_t before = 0;
  for (int a = 0; a < static_cast<int>(BcastAlgorithm::kCount); ++a)
    before += bcast_choice_count(static_cast<BcastAlgorithm>(a));
  for (std::size_t bytes : {std::size_t{1}, std::size_t{4099}, std::size_t{1} << 20})
    bcast_random_bytes(1, bytes, 0, 13);
  std::uint64_t after = 0;
  for (int a = 0; a < static_cast<int>(BcastAlgorithm::kCount); ++a)
    after += bcast_choice_count(static_cast<BcastAlgorithm>(a));
  EXPECT_EQ(after, before) << "a one-rank bcast ran an algorithm";
}

// Every rank of nranks exchanges uneven blocks, a byte apart, with every
// other; the gaps stay as they were.
void exchange_uneven_blocks(int nranks) {
  {
    run_ranks(nranks, [&](int rank, std::unique_ptr<Bootstrap> bootstrap) {
      std::unique_ptr<Communicator> comm;
      ASSERT_EQ(Communicator::create(std::move(bootstrap), &comm), Status::kOk);
      // Rank s sends (s + d + 1) * 3 bytes to rank d, blocks one byte apart.
      auto block_bytes = [](int s, int d) { return static_cast<std::size_t>((s + d + 1) * 3); };
      std::vector<std::size_t> send_bytes(nranks), send_offsets(nranks), recv_bytes(nranks), recv_offsets(nranks);
      std::size_t send_total = 0, recv_total = 0;
      for (int p = 0; p < nranks; ++p) {
        send_offsets[p] = send_total;
        send_bytes[p] = block_bytes(rank, p);
        send_total += send_bytes[p] + 1;
        recv_offsets[p] = recv_total;
        recv_bytes[p] = block_bytes(p, rank);
        recv_total += recv_bytes[p] + 1;
      }
      std::vector<char> send_host(send_total, 0);
      for (int p = 0; p < nranks; ++p)
        for (std::size_t k = 0; k < block_bytes(rank, p); ++k)
          send_host[send_offsets[p] + k] = static_cast<char>(rank * 31 + p * 7 + k);
      std::vector<char> recv_host(recv_total, 'g');
      void* send = device_copy_of(send_host.data(), send_total);
      void* recv = device_copy_of(recv_host.data(), recv_total);
      bool ran = false;
      ASSERT_EQ(alltoallv(*comm, send, send_bytes.data(), send_offsets.data(), recv, recv_bytes.data(),
                          recv_offsets.data(), true, &ran),
                Status::kOk);
      EXPECT_TRUE(ran);
      const std::vector<char> got = host_copy_of(recv, recv_total);
      for (int p = 0; p < nranks; ++p) {
        for (std::size_t k = 0; k < recv_bytes[p]; ++k)
          ASSERT_EQ(got[recv_offsets[p] + k], static_cast<char>(p * 31 + rank * 7 + k)) << "from " << p;
        ASSERT_EQ(got[recv_offsets[p] + recv_bytes[p]], 'g') << "gap after the block from " << p << " was written";
      }
      EXPECT_TRUE(ferry::ok(device()->device_free(send)));
      EXPECT_TRUE(ferry::ok(device()->device_free(recv)));
    });
  }
}

TEST(EngineAlltoallv, UnevenBlocksWithGaps) {
  for (int nranks : {1, 2, 3, 4, 6}) exchange_uneven_blocks(nranks);
}

TEST(EngineAlltoallv, PastSixteenRanks) {
  for (int nranks : {17, 20}) exchange_uneven_blocks(nranks);
}

}  // namespace
}  // namespace ferry

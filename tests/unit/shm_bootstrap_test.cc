// The shared-memory bootstrap between real processes (forked, joined over
// the TCP bootstrap on loopback), and its timeout.
#include "engine/transport/shm_bootstrap.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "engine/common/params.h"
#include "tests/unit/process_ranks.h"
#include "tests/unit/thread_bootstrap.h"

namespace ferry {
namespace {

// The runner owns its bootstrap; ShmBootstrap::wrap wants to own the one it wraps.
class Borrowed final : public Bootstrap {
 public:
  explicit Borrowed(Bootstrap& inner) : inner_(inner) {}
  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  Status allgather(const void* mine, void* all, std::size_t bytes) override {
    return inner_.allgather(mine, all, bytes);
  }
  Status barrier() override { return inner_.barrier(); }

 private:
  Bootstrap& inner_;
};

unsigned char pattern(int rank, int round, std::size_t i) {
  return static_cast<unsigned char>(rank * 131 + round * 17 + i * 7);
}

TEST(ShmBootstrap, AllgathersOfEverySizeBetweenProcesses) {
  constexpr int kRanks = 4;
  constexpr int kRounds = 300;
  const std::vector<std::size_t> sizes = {0, 1, 8, 217, ShmBootstrap::kSlotPayload, ShmBootstrap::kSlotPayload + 1};
  const auto results = testing::run_rank_processes(kRanks, [&](int rank, Bootstrap& tcp) -> std::string {
    std::unique_ptr<Bootstrap> bootstrap = std::make_unique<Borrowed>(tcp);
    if (ShmBootstrap::wrap(&bootstrap) != Status::kOk) return "wrap failed";
    if (!dynamic_cast<ShmBootstrap*>(bootstrap.get())) return "not wrapped";
    for (int round = 0; round < kRounds; ++round) {
      const std::size_t bytes = sizes[round % sizes.size()];
      std::vector<unsigned char> mine(bytes), all(bytes * kRanks, 0);
      for (std::size_t i = 0; i < bytes; ++i) mine[i] = pattern(rank, round, i);
      if (bootstrap->allgather(mine.data(), all.data(), bytes) != Status::kOk) return "allgather failed";
      for (int r = 0; r < kRanks; ++r)
        for (std::size_t i = 0; i < bytes; ++i)
          if (all[r * bytes + i] != pattern(r, round, i))
            return "round " + std::to_string(round) + ": wrong byte " + std::to_string(i) + " from rank " +
                   std::to_string(r);
      if (round % 7 == 0 && bootstrap->barrier() != Status::kOk) return "barrier failed";
    }
    return "";
  });
  for (int r = 0; r < kRanks; ++r) EXPECT_EQ(results[r], "") << "rank " << r;
}

// Run with FERRY_HANDSHAKE_TIMEOUT=1 (its own ctest entry).
TEST(ShmBootstrapTimeout, MissingRankEndsInTimeout) {
  if (params().handshake_timeout < 1 || params().handshake_timeout > 5)
    GTEST_SKIP() << "needs FERRY_HANDSHAKE_TIMEOUT between 1 and 5";
  std::vector<Status> statuses(3, Status::kOk);
  std::vector<double> waited(3, 0);
  testing::run_ranks(3, [&](int rank, std::unique_ptr<Bootstrap> bootstrap) {
    ASSERT_EQ(ShmBootstrap::wrap(&bootstrap), Status::kOk);
    if (rank == 2) return;  // never joins the exchange
    const auto start = std::chrono::steady_clock::now();
    int mine = rank, all[3];
    statuses[rank] = bootstrap->allgather(&mine, all, sizeof(mine));
    waited[rank] = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(statuses[r], Status::kTimeout) << "rank " << r;
    EXPECT_GE(waited[r], 0.9 * params().handshake_timeout) << "rank " << r;
  }
}

}  // namespace
}  // namespace ferry

// The Simple protocol's compiled steps, simulated for 1 to 17 ranks in one
// process with FIFOs of the real depth: every rank's output matches a host
// reference, nothing deadlocks, and a ring moves each slice once per hop.
#include "engine/collectives/simple_protocol.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <deque>
#include <map>
#include <random>
#include <tuple>
#include <vector>

namespace ferry {
namespace {

struct Fifo {
  std::deque<std::vector<double>> pieces;
};

// Runs every rank's plan, one step at a time wherever a step can go (its
// piece has arrived, its receivers have a free slot), channel by channel as
// the regions are dealt. Fails on a deadlock.
::testing::AssertionResult simulate(const std::vector<SimplePlan>& plans, int channels, bool in_place, std::vector<std::vector<double>>& inputs,
                                    std::vector<std::vector<double>>& outputs) {
  const int n = static_cast<int>(plans.size());
  std::map<std::tuple<int, int, int>, Fifo> fifos;  // (channel, sender, receiver)
  struct Cursor {
    std::uint64_t region;
    std::uint32_t step;
  };
  std::vector<std::vector<Cursor>> cursors(n, std::vector<Cursor>(channels));
  for (auto& rank : cursors)
    for (int c = 0; c < channels; ++c) rank[c] = {static_cast<std::uint64_t>(c), 0};
  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < n; ++r) {
      const SimplePlan& plan = plans[r];
      std::vector<double>& in = in_place ? outputs[r] : inputs[r];
      std::vector<double>& out = outputs[r];
      for (int c = 0; c < channels; ++c) {
        Cursor& at = cursors[r][c];
        if (at.region >= plan.regions) continue;
        const bool last = at.region + 1 == plan.regions;
        const std::uint32_t nsteps = last ? plan.last_steps : plan.full_steps;
        if (at.step == nsteps) {
          at = {at.region + static_cast<std::uint64_t>(channels), 0};
          progress = true;
          continue;
        }
        const SimpleStep& step = plan.steps[(last ? plan.full_steps : 0) + at.step];
        Fifo* incoming = step.recv_peer >= 0 ? &fifos[{c, step.recv_peer, r}] : nullptr;
        if (incoming && incoming->pieces.empty()) continue;
        bool room = true;
        for (int d = 0; d < step.nsends; ++d)
          room = room && fifos[{c, r, step.send_peers[d]}].pieces.size() < kSimpleSlots;
        if (!room) continue;
        const std::size_t base = at.region * plan.region_elements + step.begin;
        std::vector<double> value(step.count);
        const std::vector<double>& local = step.local_from_output ? out : in;
        for (std::size_t i = 0; i < step.count; ++i) {
          if (!incoming) {
            value[i] = local[base + i];
          } else if (step.reduce) {
            value[i] = local[base + i] + incoming->pieces.front()[i];
          } else {
            value[i] = incoming->pieces.front()[i];
          }
        }
        if (incoming) incoming->pieces.pop_front();
        if (step.store_local)
          for (std::size_t i = 0; i < step.count; ++i) out[base + i] = value[i];
        for (int d = 0; d < step.nsends; ++d) fifos[{c, r, step.send_peers[d]}].pieces.push_back(value);
        ++at.step;
        progress = true;
      }
    }
  }
  for (int r = 0; r < n; ++r)
    for (int c = 0; c < channels; ++c)
      if (cursors[r][c].region < plans[r].regions)
        return ::testing::AssertionFailure() << "rank " << r << " channel " << c << " stuck at region "
                                             << cursors[r][c].region << " step " << cursors[r][c].step;
  for (auto& [key, fifo] : fifos)
    if (!fifo.pieces.empty()) return ::testing::AssertionFailure() << "a piece was never received";
  return ::testing::AssertionSuccess();
}

void check_allreduce(AllreduceAlgorithm algorithm, int n, std::size_t count, int channels, bool in_place) {
  constexpr std::size_t kElement = 8;  // doubles: sums of small integers are exact
  std::vector<SimplePlan> plans(n);
  for (int r = 0; r < n; ++r)
    ASSERT_EQ(plan_simple_allreduce(algorithm, r, n, count, kElement, &plans[r]), Status::kOk);
  std::mt19937 rng(static_cast<unsigned>(n * 1000 + count));
  std::uniform_int_distribution<int> small(-100, 100);
  std::vector<std::vector<double>> inputs(n, std::vector<double>(count)), outputs(n, std::vector<double>(count));
  std::vector<double> expected(count, 0.0);
  for (int r = 0; r < n; ++r) {
    for (std::size_t i = 0; i < count; ++i) {
      inputs[r][i] = small(rng);
      expected[i] += inputs[r][i];
      // Out of place, the output starts as garbage; in place, as the input.
      outputs[r][i] = in_place ? inputs[r][i] : -12345.0;
    }
  }
  ASSERT_TRUE(simulate(plans, channels, in_place, inputs, outputs))
      << algorithm_info(algorithm).name << " n " << n << " count " << count;
  if (n == 1 && !in_place) outputs[0] = inputs[0];  // the caller's copy (collectives.cc)
  for (int r = 0; r < n; ++r)
    for (std::size_t i = 0; i < count; ++i)
      ASSERT_EQ(outputs[r][i], expected[i]) << algorithm_info(algorithm).name << " n " << n << " count " << count
                                            << " rank " << r << " element " << i;
}

TEST(SimpleProtocol, RingAndTreeMatchTheReferenceForOneTo17Ranks) {
  const std::size_t slot = kSimpleSlotBytes / 8;
  for (AllreduceAlgorithm algorithm : {AllreduceAlgorithm::kRing, AllreduceAlgorithm::kTree}) {
    for (int n = 1; n <= 17; ++n) {
      for (std::size_t count : {std::size_t{1}, std::size_t{13}, 2 * slot + 3, 5 * slot * 2 + 7}) {
        for (bool in_place : {false, true}) check_allreduce(algorithm, n, count, 3, in_place);
      }
    }
  }
}

TEST(SimpleProtocol, OneChannelAndManyChannels) {
  const std::size_t slot = kSimpleSlotBytes / 8;
  for (int channels : {1, 2, 7}) {
    check_allreduce(AllreduceAlgorithm::kRing, 4, 9 * 4 * slot + 5, channels, false);
    check_allreduce(AllreduceAlgorithm::kTree, 6, 9 * 2 * slot + 5, channels, true);
  }
}

// A ring region is one send of the rank's own slice, then 2(n-1) receives,
// each but the last fused with the send of the value it produced: every
// slice is read and written once per hop. The rank stores only what it
// keeps: its reduced slice and the n-1 slices gathered.
TEST(SimpleProtocol, RingFusesEachReceiveWithTheSendOfItsValue) {
  for (int n = 2; n <= 9; ++n) {
    SimplePlan plan;
    ASSERT_EQ(plan_simple_allreduce(AllreduceAlgorithm::kRing, 0, n, 4 * n * (kSimpleSlotBytes / 4), 4, &plan),
              Status::kOk);
    EXPECT_EQ(plan.full_steps, static_cast<std::uint32_t>(2 * n - 1)) << n;
    int stores = 0, sends = 0;
    for (std::uint32_t s = 0; s < plan.full_steps; ++s) {
      stores += plan.steps[s].store_local;
      sends += plan.steps[s].nsends;
      EXPECT_EQ(plan.steps[s].count, kSimpleSlotBytes / 4);
    }
    EXPECT_EQ(stores, n) << n;
    EXPECT_EQ(sends, 2 * (n - 1)) << n;
  }
}

// A receive of a range that an earlier step stored only in part would read
// half old, half new data: compiling refuses it.
TEST(SimpleProtocol, CompileRefusesAPartlyWrittenRange) {
  Schedule schedule = {{ScheduleOp::Kind::kRecvCopy, 1, {0, 10}}, {ScheduleOp::Kind::kSend, 1, {5, 15}}};
  std::vector<SimpleStep> steps;
  EXPECT_EQ(compile_simple_steps(schedule, &steps), Status::kInternal);
}

// Every sender's FIFO is in the receiver's list, and every rank that
// receives in a ring or tree step is listed.
TEST(SimpleProtocol, SendersCoverEveryReceive) {
  for (int n = 1; n <= 16; ++n) {
    for (int r = 0; r < n; ++r) {
      const std::vector<int> senders = simple_senders(r, n);
      for (AllreduceAlgorithm algorithm : {AllreduceAlgorithm::kRing, AllreduceAlgorithm::kTree}) {
        SimplePlan plan;
        ASSERT_EQ(plan_simple_allreduce(algorithm, r, n, 100000, 4, &plan), Status::kOk);
        for (const SimpleStep& step : plan.steps)
          if (step.recv_peer >= 0)
            EXPECT_NE(std::find(senders.begin(), senders.end(), step.recv_peer), senders.end()) << n << " " << r;
      }
    }
  }
}

}  // namespace
}  // namespace ferry

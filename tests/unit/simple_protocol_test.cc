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

struct Piece {
  std::uint64_t region;
  std::uint64_t begin;
  std::vector<double> data;
};
struct Fifo {
  std::deque<Piece> pieces;
};

// Runs every rank's plan, one step at a time wherever a step can go (its
// piece has arrived, its receivers have a free slot), each channel in
// simple_step_order's order with `group` regions in flight. Fails on a
// deadlock, and when a piece is received by another step than the one it
// was sent for.
::testing::AssertionResult simulate(const std::vector<SimplePlan>& plans, int channels, int group, bool in_place,
                                    std::vector<std::vector<double>>& inputs,
                                    std::vector<std::vector<double>>& outputs) {
  const int n = static_cast<int>(plans.size());
  std::map<std::tuple<int, int, int>, Fifo> fifos;  // (channel, sender, receiver)
  std::vector<std::vector<std::vector<SimpleStepRef>>> orders(n);
  std::vector<std::vector<std::size_t>> cursors(n, std::vector<std::size_t>(channels, 0));
  for (int r = 0; r < n; ++r)
    for (int c = 0; c < channels; ++c)
      orders[r].push_back(simple_step_order(plans[r].regions, plans[r].full_steps, plans[r].last_steps, c, channels,
                                            group));
  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < n; ++r) {
      const SimplePlan& plan = plans[r];
      std::vector<double>& in = in_place ? outputs[r] : inputs[r];
      std::vector<double>& out = outputs[r];
      for (int c = 0; c < channels; ++c) {
        if (cursors[r][c] == orders[r][c].size()) continue;
        const SimpleStepRef ref = orders[r][c][cursors[r][c]];
        const bool last = ref.region + 1 == plan.regions;
        const SimpleStep& step = plan.steps[(last ? plan.full_steps : 0) + ref.step];
        Fifo* incoming = step.recv_peer >= 0 ? &fifos[{c, step.recv_peer, r}] : nullptr;
        if (incoming && incoming->pieces.empty()) continue;
        bool room = true;
        for (int d = 0; d < step.nsends; ++d)
          room = room && fifos[{c, r, step.send_peers[d]}].pieces.size() < kSimpleSlots;
        if (!room) continue;
        if (incoming) {
          const Piece& piece = incoming->pieces.front();
          if (piece.region != ref.region || piece.begin != step.begin || piece.data.size() != step.count)
            return ::testing::AssertionFailure() << "rank " << r << " channel " << c << " region " << ref.region
                                                 << " step " << ref.step << " received the piece of region "
                                                 << piece.region << " at " << piece.begin;
        }
        const std::size_t base = ref.region * plan.region_elements + step.begin;
        std::vector<double> value(step.count);
        const std::vector<double>& local = step.local_from_output ? out : in;
        for (std::size_t i = 0; i < step.count; ++i) {
          if (!incoming) {
            value[i] = local[base + i];
          } else if (step.reduce) {
            value[i] = local[base + i] + incoming->pieces.front().data[i];
          } else {
            value[i] = incoming->pieces.front().data[i];
          }
        }
        if (incoming) incoming->pieces.pop_front();
        if (step.store_local)
          for (std::size_t i = 0; i < step.count; ++i) out[base + i] = value[i];
        for (int d = 0; d < step.nsends; ++d)
          fifos[{c, r, step.send_peers[d]}].pieces.push_back({ref.region, step.begin, value});
        ++cursors[r][c];
        progress = true;
      }
    }
  }
  for (int r = 0; r < n; ++r)
    for (int c = 0; c < channels; ++c)
      if (cursors[r][c] < orders[r][c].size())
        return ::testing::AssertionFailure() << "rank " << r << " channel " << c << " stuck at step "
                                             << cursors[r][c] << " of " << orders[r][c].size();
  for (auto& [key, fifo] : fifos)
    if (!fifo.pieces.empty()) return ::testing::AssertionFailure() << "a piece was never received";
  return ::testing::AssertionSuccess();
}

SimpleCollective collective_of(AllreduceAlgorithm algorithm) {
  return algorithm == AllreduceAlgorithm::kRing ? SimpleCollective::kRingAllreduce : SimpleCollective::kTreeAllreduce;
}

void check_allreduce(AllreduceAlgorithm algorithm, int n, std::size_t count, int channels, int group,
                     bool in_place) {
  constexpr std::size_t kElement = 8;  // doubles: sums of small integers are exact
  std::vector<SimplePlan> plans(n);
  for (int r = 0; r < n; ++r)
    ASSERT_EQ(plan_simple(collective_of(algorithm), r, n, 0, count, kElement, channels, &plans[r]), Status::kOk);
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
  ASSERT_TRUE(simulate(plans, channels, group, in_place, inputs, outputs))
      << algorithm_info(algorithm).name << " n " << n << " count " << count << " group " << group;
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
      for (std::size_t count : {std::size_t{1}, std::size_t{13}, 2 * slot + 3})
        for (bool in_place : {false, true}) check_allreduce(algorithm, n, count, 3, 1, in_place);
    }
  }
}

// Bcast along the chain: every rank ends with the root's data, whoever the
// root, however many regions.
TEST(SimpleProtocol, ChainBcastDeliversTheRootsDataForOneTo17Ranks) {
  const std::size_t slot = kSimpleSlotBytes / 8;
  for (int n = 1; n <= 17; ++n) {
    for (std::size_t count : {std::size_t{3}, 5 * slot + 1}) {
      for (int root : {0, n / 2, n - 1}) {
        std::vector<SimplePlan> plans(n);
        for (int r = 0; r < n; ++r)
          ASSERT_EQ(plan_simple(SimpleCollective::kChainBcast, r, n, root, count, 8, 3, &plans[r]), Status::kOk);
        std::vector<std::vector<double>> inputs(n), buffers(n, std::vector<double>(count, -1.0));
        for (std::size_t i = 0; i < count; ++i) buffers[root][i] = static_cast<double>(i % 1000);
        ASSERT_TRUE(simulate(plans, 3, kSimpleRegionsInFlight, /*in_place=*/true, inputs, buffers))
            << "n " << n << " root " << root;
        for (int r = 0; r < n; ++r) ASSERT_EQ(buffers[r], buffers[root]) << "n " << n << " root " << root << " rank " << r;
      }
    }
  }
}

// Several regions per channel, each group of regions in flight, and a last
// region whose slices are empty on some ranks.
TEST(SimpleProtocol, RegionsInFlightKeepEveryFifoInOrder) {
  const std::size_t slot = kSimpleSlotBytes / 8;
  for (AllreduceAlgorithm algorithm : {AllreduceAlgorithm::kRing, AllreduceAlgorithm::kTree}) {
    for (int n : {2, 3, 4, 5, 8}) {
      const std::size_t region = (algorithm == AllreduceAlgorithm::kRing ? n : 2) * slot;
      for (std::size_t count : {7 * region + 5, 8 * region})
        for (int group = 1; group < kSimpleSlots; ++group)
          check_allreduce(algorithm, n, count, 3, group, (count + group) % 2 == 0);
    }
  }
}

TEST(SimpleProtocol, OneChannelAndManyChannels) {
  const std::size_t slot = kSimpleSlotBytes / 8;
  for (int channels : {1, 2, 7}) {
    for (int group = 1; group < kSimpleSlots; ++group) {
      check_allreduce(AllreduceAlgorithm::kRing, 4, 9 * 4 * slot + 5, channels, group, false);
      check_allreduce(AllreduceAlgorithm::kTree, 6, 9 * 2 * slot + 5, channels, group, true);
    }
  }
}

// A ring region is one send of the rank's own slice, then 2(n-1) receives,
// each but the last fused with the send of the value it produced: every
// slice is read and written once per hop. The rank stores only what it
// keeps: its reduced slice and the n-1 slices gathered.
TEST(SimpleProtocol, RingFusesEachReceiveWithTheSendOfItsValue) {
  for (int n = 2; n <= 9; ++n) {
    SimplePlan plan;
    ASSERT_EQ(plan_simple(SimpleCollective::kRingAllreduce, 0, n, 0, 4 * n * (kSimpleSlotBytes / 4), 4, 1, &plan),
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

// Pieces shrink so that every channel has regions to work on, down to the
// floor; large calls use whole slots.
TEST(SimpleProtocol, PiecesSpreadACallOverTheChannels) {
  EXPECT_EQ(simple_piece_bytes(std::size_t{1} << 30, 2, 64), kSimpleSlotBytes);
  EXPECT_EQ(simple_piece_bytes(std::size_t{1} << 20, 2, 8), std::size_t{32} << 10);
  EXPECT_EQ(simple_piece_bytes(std::size_t{1} << 20, 2, 64), kSimpleMinPieceBytes);
  EXPECT_EQ(simple_piece_bytes(8, 4, 16), kSimpleMinPieceBytes);
  EXPECT_EQ(simple_piece_bytes((std::size_t{1} << 20) + 16, 2, 8) % 16, 0u);
  SimplePlan plan;
  ASSERT_EQ(plan_simple(SimpleCollective::kRingAllreduce, 0, 2, 0, (std::size_t{1} << 20) / 4, 4, 8, &plan),
            Status::kOk);
  EXPECT_EQ(plan.regions, 16u);  // 8 channels, 2 regions in flight each
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
        ASSERT_EQ(plan_simple(collective_of(algorithm), r, n, 0, 100000, 4, 16, &plan), Status::kOk);
        for (const SimpleStep& step : plan.steps)
          if (step.recv_peer >= 0)
            EXPECT_NE(std::find(senders.begin(), senders.end(), step.recv_peer), senders.end()) << n << " " << r;
      }
    }
  }
}

}  // namespace
}  // namespace ferry

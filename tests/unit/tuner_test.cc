#include "engine/collectives/tuner.h"

#include "engine/collectives/worker.h"
#include "engine/common/params.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

namespace ferry {
namespace {

constexpr std::size_t KiB = 1 << 10, MiB = 1 << 20, GiB = std::size_t{1} << 30;
constexpr auto kOne = AllreduceAlgorithm::kOneShot;
constexpr auto kTwo = AllreduceAlgorithm::kTwoShot;
constexpr auto kLl = AllreduceAlgorithm::kOneShotLl;
constexpr auto kRing = AllreduceAlgorithm::kRing;
constexpr auto kTree = AllreduceAlgorithm::kTree;
constexpr auto kCePush = AllreduceAlgorithm::kCopyPush;

// The choices without FERRY_TUNE. LL on the engine worker (no launch, in
// place too) while its traffic, 2 (n-1) bytes, and its blocks' rounds cost
// less than a launch: at two ranks up to its 512 KiB slots, at 4 and 8
// ranks within one block's 8 KiB. Two ranks as measured on 2x H200
// (bench/RESULTS.md): one-shot up to ~100 MiB (two-shot in place), then the
// copy engines' push (cepush, in place too), whose copies move 367 GB/s
// against SM loads' 335 once they are large enough to hide ~5 us each; the
// pulling copy-engine two-shot never. More ranks: one-shot only while (n-1) * bytes costs less than
// two-shot's second flag hop, two-shot above. Past 16 ranks, on one node,
// the same algorithms by the same model: LL for small calls, two-shot for
// large.
TEST(Tuner, DefaultChoicesForATableOfSizesAndRankCounts) {
  struct Row {
    int nranks;
    std::size_t bytes;
    bool in_place;
    AllreduceAlgorithm expected;
  };
  const Row table[] = {
      {2, 8, false, kLl},         {2, 4 * KiB, false, kLl},    {2, 16 * KiB, false, kLl},
      {2, 16 * KiB + 1, false, kLl}, {2, 128 * KiB, false, kLl}, {2, 256 * KiB, false, kLl},
      {2, 512 * KiB, false, kLl}, {2, 512 * KiB + 8, false, kOne},
      {2, 2 * MiB, false, kOne},  {2, 32 * MiB, false, kOne},  {2, 64 * MiB, false, kOne},
      {2, 512 * MiB, false, kCePush}, {2, GiB, false, kCePush}, {2, 8, true, kLl},
      {2, 2 * MiB, true, kTwo},   {2, GiB, true, kCePush},     {3, 8, false, kLl},          {3, 8, true, kLl},
      {3, GiB, false, kTwo},
      {4, 8, false, kLl},         {4, 16 * KiB, false, kOne},  {4, MiB, false, kTwo},
      {4, 512 * MiB, false, kTwo}, {8, 8, false, kLl},         {8, 4 * KiB, false, kLl},
      {8, 16 * KiB, false, kOne}, {8, 256 * KiB, false, kTwo}, {8, 512 * MiB, true, kTwo},
      {16, 8, false, kLl},        {16, MiB, false, kTwo},      {17, 8, false, kLl},
      {17, MiB, false, kTwo},     {64, GiB, false, kTwo},
  };
  const std::vector<TuneRule> none;
  for (const Row& row : table)
    EXPECT_EQ(choose_allreduce(row.nranks, row.bytes, row.in_place, none), row.expected)
        << row.nranks << " ranks, " << row.bytes << " bytes" << (row.in_place ? " in place" : "");
}

// The model only ever hands the runtime an algorithm with a kernel that may
// run the call, on every machine and at every scale.
TEST(Tuner, ModelNeverPicksAModelOnlyOrInapplicableAlgorithm) {
  for (const MachineModel& machine : machine_models()) {
    for (int n = 1; n <= 4096; n *= 2) {
      for (std::size_t bytes = 8; bytes <= 4 * GiB; bytes *= 8) {
        for (bool in_place : {false, true}) {
          const AllreduceAlgorithm a = model_allreduce(n, bytes, in_place, machine);
          EXPECT_TRUE(algorithm_info(a).implemented) << machine.name << " " << n << " " << bytes;
          if (in_place) EXPECT_TRUE(algorithm_info(a).in_place_safe);
        }
      }
    }
  }
}

// LL runs only as far as the LL slots and FERRY_WORKER_MAX_BYTES reach (at
// 4 ranks, 256 KiB): a rule asking for it beyond leaves the call to the
// model; within, it may be forced like any other.
TEST(Tuner, LlIsChosenOnlyWithinItsSizeRange) {
  std::vector<std::string> problems;
  const auto rules = parse_tune("allreduce:0-:ll", &problems);
  EXPECT_TRUE(problems.empty());
  ASSERT_EQ(rules.size(), 1u);
  EXPECT_EQ(choose_allreduce(4, 256 * KiB, false, rules), kLl);
  EXPECT_EQ(choose_allreduce(4, 256 * KiB, true, rules), kLl);
  EXPECT_EQ(choose_allreduce(4, 256 * KiB + 8, false, rules), choose_allreduce(4, 256 * KiB + 8, false, {}));
  const auto worker_max = static_cast<std::size_t>(params().worker_max_bytes);
  for (const MachineModel& machine : machine_models()) {
    for (int n = 1; n <= 4096; n *= 2) {
      const std::size_t largest = std::min(ll_max_bytes(n), worker_max);
      EXPECT_LT(predict_allreduce_us(kLl, largest + 1, n, machine), 0) << n << " ranks on " << machine.name;
      if (n <= 16 && machine.intra == LinkKind::kNvLink && machine.gpus_per_node == 0)
        EXPECT_GT(predict_allreduce_us(kLl, largest, n, machine), 0) << n << " ranks on " << machine.name;
    }
  }
  const auto one_shot = parse_tune("allreduce:0-:oneshot", &problems);
  EXPECT_EQ(choose_allreduce(2, 8, false, one_shot), kOne);
}

TEST(Tuner, EveryAlgorithmCanBeForced) {
  std::vector<std::string> problems;
  const auto rules = parse_tune("allreduce:0-1M:ring,1M-:tree", &problems);
  EXPECT_TRUE(problems.empty());
  ASSERT_EQ(rules.size(), 2u);
  EXPECT_EQ(choose_allreduce(4, 8, true, rules), kRing);
  EXPECT_EQ(choose_allreduce(4, 2 * MiB, false, rules), kTree);
  parse_tune("allreduce:0-:bogus", &problems);
  EXPECT_EQ(problems.size(), 1u);
}

// The default machine's constants reproduce Ferry's measured one-shot times
// on 2x H200 (bench/RESULTS.md) within 10 %.
TEST(TunerModel, MatchesMeasuredOneShotOnTwoH200) {
  const MachineModel& nvlink = default_machine_model();
  const struct {
    std::size_t bytes;
    double measured_us;
  } measured[] = {{8, 13.9}, {512 * KiB, 15.5}, {2 * MiB, 21.5}, {32 * MiB, 115.9}, {512 * MiB, 1617.8}};
  for (const auto& m : measured)
    EXPECT_NEAR(predict_allreduce_us(kOne, m.bytes, 2, nvlink), m.measured_us, 0.1 * m.measured_us) << m.bytes;
}

// The same for LL on worker blocks shared by size, where 16 blocks (the
// measured worker) and the default take one round of chunks alike.
TEST(TunerModel, MatchesMeasuredLlOnTwoH200) {
  const MachineModel& nvlink = default_machine_model();
  const struct {
    std::size_t bytes;
    double measured_us;
  } measured[] = {{32, 8.3}, {2 * KiB, 8.2}, {32 * KiB, 10.8}, {128 * KiB, 11.9}};
  for (const auto& m : measured)
    EXPECT_NEAR(predict_allreduce_us(kLl, m.bytes, 2, nvlink), m.measured_us, 0.1 * m.measured_us) << m.bytes;
}

double model_us(AllreduceAlgorithm a, std::size_t bytes, int n, const MachineModel& machine) {
  return predict_allreduce_us(a, bytes, n, machine);
}

// At 8 bytes each doubling of the ranks adds one level to the tree (log n):
// the same cost per doubling, one value within a node and one across nodes;
// the ring's cost above the launch floor doubles (n).
TEST(TunerModel, SmallMessageLatencyTreeLogNRingLinear) {
  for (const MachineModel& machine : machine_models()) {
    const double floor = machine.launch_us;
    std::vector<double> steps;
    for (int n = 2; n < 4096; n *= 2) {
      const double step =
          model_us(AllreduceAlgorithm::kTree, 8, 2 * n, machine) - model_us(AllreduceAlgorithm::kTree, 8, n, machine);
      EXPECT_GT(step, 0) << machine.name << " " << n;
      if (std::none_of(steps.begin(), steps.end(), [&](double s) { return std::abs(s - step) < 1e-3; }))
        steps.push_back(step);
    }
    EXPECT_LE(steps.size(), 2u) << machine.name;
    for (int n = 64; n < 4096; n *= 2) {
      const double ratio = (model_us(AllreduceAlgorithm::kRing, 8, 2 * n, machine) - floor) /
                           (model_us(AllreduceAlgorithm::kRing, 8, n, machine) - floor);
      EXPECT_GT(ratio, 1.8) << machine.name << " " << n;
      EXPECT_LT(ratio, 2.2) << machine.name << " " << n;
    }
  }
}

// Large messages: the ring's bus bandwidth approaches, and never exceeds, the
// slowest link's bandwidth.
TEST(TunerModel, RingBusBandwidthApproachesTheLinkAtLargeSizes) {
  for (const MachineModel& machine : machine_models()) {
    for (int n : {2, 8, 64}) {
      const double link = n > machine.gpus_per_node && machine.gpus_per_node > 0
                              ? std::min(link_cost(machine.intra).bandwidth_gbps,
                                         link_cost(machine.inter).bandwidth_gbps)
                              : link_cost(machine.intra).bandwidth_gbps;
      const double busbw =
          allreduce_busbw_gbps(4 * GiB, n, model_us(AllreduceAlgorithm::kRing, 4 * GiB, n, machine));
      EXPECT_GT(busbw, 0.95 * link) << machine.name << " " << n;
      EXPECT_LE(busbw, link) << machine.name << " " << n;
      const double smaller =
          allreduce_busbw_gbps(MiB, n, model_us(AllreduceAlgorithm::kRing, MiB, n, machine));
      EXPECT_LT(smaller, busbw) << machine.name << " " << n;
    }
  }
}

// Tree wins small messages, ring wins large ones: a crossover exists.
TEST(TunerModel, TreeRingCrossoverExists) {
  for (const MachineModel& machine : machine_models()) {
    for (int n : {4, 8, 16, 64}) {
      EXPECT_LT(model_us(AllreduceAlgorithm::kTree, 8, n, machine), model_us(AllreduceAlgorithm::kRing, 8, n, machine))
          << machine.name << " " << n;
      EXPECT_LT(model_us(AllreduceAlgorithm::kRing, 4 * GiB, n, machine),
                model_us(AllreduceAlgorithm::kTree, 4 * GiB, n, machine))
          << machine.name << " " << n;
    }
  }
}

TEST(TunerModel, ByNodeAcrossNodesOnlyAndWinsAtLargeSizes) {
  const MachineModel* multinode = find_machine_model("multinode");
  ASSERT_NE(multinode, nullptr);
  // One node (or no nodes in the machine): nothing to go by.
  EXPECT_LT(predict_hierarchical_allreduce_us(GiB, 8, *multinode), 0);
  EXPECT_LT(predict_hierarchical_allreduce_us(GiB, 64, default_machine_model()), 0);
  for (int n : {16, 64, 1024}) {
    const double hier = predict_hierarchical_allreduce_us(GiB, n, *multinode);
    ASSERT_GT(hier, 0) << n;
    // Only a shard of the buffer crosses each NIC: far sooner than a flat
    // ring or tree over the network's links.
    EXPECT_LT(hier, model_us(AllreduceAlgorithm::kRing, GiB, n, *multinode)) << n;
    EXPECT_LT(hier, model_us(AllreduceAlgorithm::kTree, GiB, n, *multinode)) << n;
    // More nodes cost more (a ring across them).
    EXPECT_LT(hier, predict_hierarchical_allreduce_us(GiB, 2 * n, *multinode)) << n;
  }
  // The runtime stages small calls across nodes (FERRY_NET_MIN_BYTES).
  EXPECT_EQ(across_nodes_choice(8, 16, *multinode), "staged");
  EXPECT_EQ(across_nodes_choice(GiB, 16, *multinode), "hier+ring");
  EXPECT_EQ(across_nodes_choice(8 * MiB, 4096, *multinode), "hier+tree");
}

// Across machines: between two machines a ring's (chain's) steps are as
// few as a tree's and it moves less, so ring and chain; across many, the
// tree's log2 steps win; across three, the tree for latency-bound shards
// and the ring once the tree's extra traffic and reduce per piece cost
// more than the ring's extra steps.
TEST(TunerModel, AcrossMachinesRingOrTreeBySizeAndMachines) {
  const MachineModel& multinode = *find_machine_model("multinode");
  for (std::size_t shard : {std::size_t{8}, 64 * KiB, 16 * MiB, GiB}) {
    EXPECT_EQ(model_allreduce_across(shard, 2, multinode), AcrossAlgorithm::kRing) << shard;
    EXPECT_EQ(model_bcast_across(shard, 2, multinode), AcrossAlgorithm::kChain) << shard;
    EXPECT_EQ(model_allreduce_across(shard, 512, multinode), AcrossAlgorithm::kTree) << shard;
  }
  EXPECT_EQ(model_allreduce_across(64 * KiB, 3, multinode), AcrossAlgorithm::kTree);
  EXPECT_EQ(model_allreduce_across(256 * MiB, 3, multinode), AcrossAlgorithm::kRing);
  EXPECT_EQ(model_bcast_across(MiB, 512, multinode), AcrossAlgorithm::kTree);
  EXPECT_EQ(model_bcast_across(GiB, 3, multinode), AcrossAlgorithm::kChain);
  // Each algorithm prices only the collective it runs.
  EXPECT_LT(predict_across_allreduce_us(AcrossAlgorithm::kChain, MiB, 4, multinode), 0);
  EXPECT_LT(predict_across_bcast_us(AcrossAlgorithm::kRing, MiB, 4, multinode), 0);
  for (int a = 0; a < static_cast<int>(AcrossAlgorithm::kCount); ++a) {
    const AcrossAlgorithmInfo& info = across_algorithm_info(static_cast<AcrossAlgorithm>(a));
    EXPECT_EQ(static_cast<int>(info.id), a);
    EXPECT_NE(std::string(info.description), "");
    EXPECT_TRUE(info.allreduce || info.bcast) << info.name;
  }
}

// The network as measured moves the choice: across three machines a hop
// that costs far more than the assumed 5 us makes the tree's two steps
// beat the ring's four at sizes where the ring wins on the assumed network;
// a fast one keeps the ring. Between two machines nothing does.
TEST(TunerModel, AMeasuredNetworkMovesTheStepAcrossMachines) {
  const MachineModel& multinode = *find_machine_model("multinode");
  LinkCost slow = link_cost(LinkKind::kNet), fast = slow;
  slow.hop_us = 5000;
  fast.hop_us = 0.5;
  fast.bandwidth_gbps = 400;
  ASSERT_EQ(model_allreduce_across(256 * MiB, 3, multinode), AcrossAlgorithm::kRing);
  EXPECT_EQ(model_allreduce_across(256 * MiB, 3, multinode, slow), AcrossAlgorithm::kTree);
  EXPECT_EQ(model_allreduce_across(256 * MiB, 3, multinode, fast), AcrossAlgorithm::kRing);
  EXPECT_EQ(choose_allreduce_across({}, 512 * MiB, 256 * MiB, 3, slow), AcrossAlgorithm::kTree);
  EXPECT_EQ(model_allreduce_across(64 * KiB, 2, multinode, slow), AcrossAlgorithm::kRing);
  ASSERT_EQ(model_bcast_across(GiB, 3, multinode), AcrossAlgorithm::kChain);
  slow.hop_us = 1e8;
  EXPECT_EQ(choose_bcast_across({}, GiB, 5, slow), AcrossAlgorithm::kTree);
  EXPECT_EQ(model_bcast_across(GiB, 2, multinode, slow), AcrossAlgorithm::kChain);
}

// FERRY_TUNE's -across rules choose the step across machines by the whole
// call's bytes; each names only its collective's algorithms.
TEST(Tuner, AcrossRulesOverrideTheModel) {
  std::vector<std::string> problems;
  const auto rules = parse_tune("allreduce-across:0-1M:ring,1M-:tree,bcast-across:0-:tree", &problems);
  EXPECT_TRUE(problems.empty());
  ASSERT_EQ(rules.size(), 3u);
  EXPECT_EQ(rules[1].collective, TunedCollective::kAllreduceAcross);
  EXPECT_EQ(choose_allreduce_across(rules, 8, 8, 512, link_cost(LinkKind::kNet)), AcrossAlgorithm::kRing);
  EXPECT_EQ(choose_allreduce_across(rules, 4 * MiB, 2 * MiB, 2, link_cost(LinkKind::kNet)), AcrossAlgorithm::kTree);
  EXPECT_EQ(choose_bcast_across(rules, GiB, 2, link_cost(LinkKind::kNet)), AcrossAlgorithm::kTree);
  EXPECT_EQ(choose_allreduce_across({}, 4 * MiB, 2 * MiB, 2, link_cost(LinkKind::kNet)), AcrossAlgorithm::kRing);
  // They leave the calls within a machine alone.
  EXPECT_EQ(tuned_bcast(rules, 8), BcastAlgorithm::kCount);
  EXPECT_EQ(choose_allreduce(4, 8, false, rules), choose_allreduce(4, 8, false, {}));
  parse_tune("allreduce-across:0-:chain,bcast-across:0-:ring,allreduce-across:0-:oneshot", &problems);
  ASSERT_EQ(problems.size(), 3u);
  EXPECT_NE(problems[0].find("allreduce-across: ring, tree"), std::string::npos) << problems[0];
}

TEST(TunerModel, DirectAlgorithmsOnlyWhereEveryPeerIsMapped) {
  const MachineModel* multinode = find_machine_model("multinode");
  ASSERT_NE(multinode, nullptr);
  EXPECT_TRUE(algorithm_applies(kOne, 8, *multinode));
  EXPECT_FALSE(algorithm_applies(kOne, 16, *multinode));
  EXPECT_TRUE(algorithm_applies(AllreduceAlgorithm::kTree, 4096, *multinode));
  EXPECT_TRUE(algorithm_applies(kTwo, 16, default_machine_model()));
  // Tables carry the pointers past 16 ranks: any number on one node.
  EXPECT_TRUE(algorithm_applies(kTwo, 17, default_machine_model()));
  EXPECT_GE(predict_allreduce_us(kTwo, 8, 17, default_machine_model()), 0);
  EXPECT_EQ(find_machine_model("abacus"), nullptr);
}

TEST(Tuner, RulesOverrideBySizeRange) {
  std::vector<std::string> problems;
  const auto rules = parse_tune("allreduce:0-64K:twoshot,64K-1G:copyengine", &problems);
  EXPECT_EQ(parse_tune("allreduce:0-64K:twoshot,allreduce:64K-1G:copyengine", &problems).size(), 2u);
  ASSERT_TRUE(problems.empty());
  ASSERT_EQ(rules.size(), 2u);
  EXPECT_EQ(rules[1].min_bytes, 64u << 10);
  EXPECT_EQ(rules[1].max_bytes, std::size_t{1} << 30);
  EXPECT_EQ(choose_allreduce(2, 8, false, rules), AllreduceAlgorithm::kTwoShot);
  EXPECT_EQ(choose_allreduce(2, 64 << 10, false, rules), AllreduceAlgorithm::kCopyEngine);
  // Past the last rule the default applies again.
  EXPECT_EQ(choose_allreduce(2, std::size_t{2} << 30, false, rules), kCePush);
}

TEST(Tuner, OneShotIsNeverChosenInPlace) {
  std::vector<std::string> problems;
  const auto rules = parse_tune("allreduce:0-:oneshot", &problems);
  ASSERT_EQ(rules.size(), 1u);
  EXPECT_EQ(choose_allreduce(2, 8, false, rules), AllreduceAlgorithm::kOneShot);
  // In place the model decides: LL at 8 bytes, two-shot beyond LL's range.
  EXPECT_EQ(choose_allreduce(2, 8, true, rules), kLl);
  EXPECT_EQ(choose_allreduce(2, MiB, true, rules), AllreduceAlgorithm::kTwoShot);
}

TEST(Tuner, MalformedEntriesAreReportedAndSkipped) {
  std::vector<std::string> problems;
  const auto rules =
      parse_tune("allreduce:0-64K:fastest,bcast:0-:ring,allreduce:1M-2K:twoshot,allreduce:x-:oneshot,"
                 "allreduce:1M-:twoshot",
                 &problems);
  EXPECT_EQ(problems.size(), 4u);
  ASSERT_EQ(rules.size(), 1u);
  EXPECT_EQ(rules[0].algorithm, AllreduceAlgorithm::kTwoShot);
}

TEST(Tuner, EveryAlgorithmDescribesItself) {
  for (int a = 0; a < static_cast<int>(AllreduceAlgorithm::kCount); ++a) {
    const AlgorithmInfo& info = algorithm_info(static_cast<AllreduceAlgorithm>(a));
    EXPECT_EQ(static_cast<int>(info.id), a);
    EXPECT_NE(std::string(info.name), "");
    EXPECT_NE(std::string(info.description), "");
  }
}

// A bcast rule names the bcast's own algorithms, may follow or precede
// allreduce rules, and leaves allreduce calls alone; sizes no rule covers
// are the engine's choice (kCount).
TEST(Tuner, BcastRulesNameBcastAlgorithms) {
  std::vector<std::string> problems;
  const auto rules = parse_tune("allreduce:0-1M:ring,bcast:0-32K:ll,32K-:chain", &problems);
  EXPECT_TRUE(problems.empty());
  ASSERT_EQ(rules.size(), 3u);
  EXPECT_EQ(rules[1].collective, TunedCollective::kBcast);
  EXPECT_EQ(tuned_bcast(rules, 8), BcastAlgorithm::kLl);
  EXPECT_EQ(tuned_bcast(rules, 32 * KiB - 1), BcastAlgorithm::kLl);
  EXPECT_EQ(tuned_bcast(rules, 32 * KiB), BcastAlgorithm::kChain);
  EXPECT_EQ(choose_allreduce(4, 8, false, rules), kRing);
  EXPECT_EQ(choose_allreduce(4, 2 * MiB, false, rules), choose_allreduce(4, 2 * MiB, false, {}));
  const auto pull = parse_tune("bcast:1K-2K:pull", &problems);
  ASSERT_EQ(pull.size(), 1u);
  EXPECT_EQ(tuned_bcast(pull, 1536), BcastAlgorithm::kPull);
  EXPECT_EQ(tuned_bcast(pull, 8), BcastAlgorithm::kCount);
  EXPECT_EQ(choose_allreduce(2, 1536, false, pull), choose_allreduce(2, 1536, false, {}));
  // Allreduce names are not bcast names, nor the other way round.
  parse_tune("bcast:0-:oneshot,allreduce:0-:pull", &problems);
  EXPECT_EQ(problems.size(), 2u);
}

TEST(Tuner, EveryBcastAlgorithmDescribesItself) {
  for (int a = 0; a < static_cast<int>(BcastAlgorithm::kCount); ++a) {
    const BcastAlgorithmInfo& info = bcast_algorithm_info(static_cast<BcastAlgorithm>(a));
    EXPECT_EQ(static_cast<int>(info.id), a);
    EXPECT_NE(std::string(info.name), "");
    EXPECT_NE(std::string(info.description), "");
  }
}

}  // namespace
}  // namespace ferry

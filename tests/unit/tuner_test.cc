#include "engine/collectives/tuner.h"

#include <gtest/gtest.h>

namespace ferry {
namespace {

TEST(Tuner, DefaultsByRankCountSizeAndInPlace) {
  const std::vector<TuneRule> none;
  EXPECT_EQ(choose_allreduce(2, 8, false, none), AllreduceAlgorithm::kOneShot);
  EXPECT_EQ(choose_allreduce(2, 8, true, none), AllreduceAlgorithm::kTwoShot);
  EXPECT_EQ(choose_allreduce(4, 1 << 20, false, none), AllreduceAlgorithm::kTwoShot);
  EXPECT_EQ(choose_allreduce(2, std::size_t{512} << 20, false, none), AllreduceAlgorithm::kOneShot);
  EXPECT_EQ(choose_allreduce(8, std::size_t{512} << 20, true, none), AllreduceAlgorithm::kTwoShot);
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
  EXPECT_EQ(choose_allreduce(2, std::size_t{2} << 30, false, rules), AllreduceAlgorithm::kOneShot);
}

TEST(Tuner, OneShotIsNeverChosenInPlace) {
  std::vector<std::string> problems;
  const auto rules = parse_tune("allreduce:0-:oneshot", &problems);
  ASSERT_EQ(rules.size(), 1u);
  EXPECT_EQ(choose_allreduce(2, 8, false, rules), AllreduceAlgorithm::kOneShot);
  EXPECT_EQ(choose_allreduce(2, 8, true, rules), AllreduceAlgorithm::kTwoShot);
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

}  // namespace
}  // namespace ferry

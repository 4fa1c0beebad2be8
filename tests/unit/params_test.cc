#include "engine/common/params.h"

#include <gtest/gtest.h>

namespace ferry {
namespace {

TEST(Params, DefaultsWhenUnset) {
  std::vector<std::string> problems;
  const Params p = parse_params({}, &problems);
  EXPECT_EQ(p.device, "auto");
  EXPECT_EQ(p.route, "auto");
  EXPECT_FALSE(p.stats);
  EXPECT_EQ(p.staging_pool_max_bytes, 1LL << 30);
  EXPECT_TRUE(problems.empty());
}

TEST(Params, ParsesEachType) {
  std::vector<std::string> problems;
  const Params p = parse_params({"FERRY_ROUTE=staged", "FERRY_STATS=yes", "FERRY_STAGING_POOL_MAX_BYTES=64M"},
                                &problems);
  EXPECT_EQ(p.route, "staged");
  EXPECT_TRUE(p.stats);
  EXPECT_EQ(p.staging_pool_max_bytes, 64LL << 20);
  EXPECT_TRUE(problems.empty());
}

TEST(Params, MalformedValueKeepsDefaultAndIsReported) {
  std::vector<std::string> problems;
  const Params p = parse_params({"FERRY_STATS=maybe", "FERRY_EMULATED_MAX_BYTES=12Q"}, &problems);
  EXPECT_FALSE(p.stats);
  EXPECT_EQ(p.emulated_max_bytes, 16LL << 30);
  ASSERT_EQ(problems.size(), 2u);
  EXPECT_NE(problems[0].find("FERRY_STATS=maybe"), std::string::npos);
}

TEST(Params, IntegerBeyondSixtyFourBitsIsMalformed) {
  // A K/M/G multiple that overflows, and a number strtoll cannot hold, were
  // taken as wrapped or clamped values.
  std::vector<std::string> problems;
  const Params p = parse_params({"FERRY_EMULATED_MAX_BYTES=9007199254740993G",
                                 "FERRY_STAGING_POOL_MAX_BYTES=99999999999999999999"},
                                &problems);
  EXPECT_EQ(p.emulated_max_bytes, 16LL << 30);
  EXPECT_EQ(p.staging_pool_max_bytes, 1LL << 30);
  ASSERT_EQ(problems.size(), 2u);
  // A negative multiple is a number; its range rejects it here.
  problems.clear();
  const Params q = parse_params({"FERRY_HANDSHAKE_TIMEOUT=-1K"}, &problems);
  EXPECT_EQ(q.handshake_timeout, 600);
  ASSERT_EQ(problems.size(), 1u);
}

TEST(Params, ValueOutsideItsWordsKeepsDefaultAndIsReported) {
  std::vector<std::string> problems;
  const Params p = parse_params({"FERRY_ROUTE=bogus", "FERRY_DEVICE=gpu", "FERRY_NBC=Staged"}, &problems);
  EXPECT_EQ(p.route, "auto");
  EXPECT_EQ(p.device, "auto");
  EXPECT_EQ(p.nbc, "staged");  // matched without regard to case
  ASSERT_EQ(problems.size(), 2u);
  EXPECT_NE(problems[0].find("FERRY_DEVICE=gpu is not one of auto, cuda, hip, emulated"), std::string::npos);
  EXPECT_NE(problems[1].find("FERRY_ROUTE=bogus is not one of auto, staged, pmpi"), std::string::npos);
}

TEST(Params, WordsMatchWithoutRegardToCase) {
  std::vector<std::string> problems;
  const Params p = parse_params({"FERRY_ROUTE=AUTO", "FERRY_DEBUG=trace"}, &problems);
  EXPECT_EQ(p.route, "auto");
  EXPECT_EQ(p.debug, "TRACE");
  EXPECT_TRUE(problems.empty());
}

TEST(Params, IntegerOutsideItsRangeKeepsDefaultAndIsReported) {
  std::vector<std::string> problems;
  const Params p =
      parse_params({"FERRY_HANDSHAKE_TIMEOUT=-5", "FERRY_CHANNELS=65", "FERRY_WORKER_BLOCKS=64"}, &problems);
  EXPECT_EQ(p.handshake_timeout, 600);
  EXPECT_EQ(p.channels, 64);
  EXPECT_EQ(p.worker_blocks, 64);
  ASSERT_EQ(problems.size(), 2u);
  EXPECT_NE(problems[0].find("FERRY_CHANNELS=65 is outside 1 to 64"), std::string::npos);
  EXPECT_NE(problems[1].find("FERRY_HANDSHAKE_TIMEOUT=-5 is outside 0 or more"), std::string::npos);
}

TEST(Params, UnknownNamesApartFromValues) {
  std::vector<std::string> problems, unknown;
  parse_params({"FERRY_ROUT=staged", "FERRY_HANDSHAKE_TIMEOUT=abc"}, &problems, &unknown);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_NE(problems[0].find("FERRY_HANDSHAKE_TIMEOUT=abc"), std::string::npos);
  ASSERT_EQ(unknown.size(), 1u);
  EXPECT_NE(unknown[0].find("FERRY_ROUT"), std::string::npos);
}

TEST(Params, UnknownFerryVariableIsReported) {
  std::vector<std::string> problems;
  parse_params({"FERRY_ROUT=staged"}, &problems);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_NE(problems[0].find("FERRY_ROUT"), std::string::npos);
}

TEST(Params, DescribeListsEveryParameterOnce) {
  const auto all = describe_params();
  ASSERT_FALSE(all.empty());
  for (size_t i = 0; i < all.size(); ++i) {
    EXPECT_EQ(all[i].env_name.rfind("FERRY_", 0), 0u);
    EXPECT_NE(std::string(all[i].description), "");
    for (size_t j = i + 1; j < all.size(); ++j) EXPECT_NE(all[i].env_name, all[j].env_name);
  }
}

}  // namespace
}  // namespace ferry

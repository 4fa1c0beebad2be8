// What ranks passed to a collective, compared: every difference named by the
// argument it is in, and alltoallv's counts checked between every pair.
#include "engine/collectives/agreement.h"

#include <gtest/gtest.h>

#include <vector>

namespace ferry {
namespace {

TEST(Agreement, EqualCallsAgree) {
  const std::vector<CallSignature> all(4, reduction_signature(1001, DataType::kFloat32, ReduceOp::kSum));
  EXPECT_EQ(compare_signatures(all, "allreduce"), Status::kOk);
}

TEST(Agreement, EachDifferenceIsNamed) {
  std::vector<CallSignature> all(3, reduction_signature(100, DataType::kInt32, ReduceOp::kSum));
  all[2].count = 50;
  EXPECT_EQ(compare_signatures(all, "allreduce"), Status::kCountMismatch);
  all[2] = reduction_signature(100, DataType::kInt64, ReduceOp::kSum);
  EXPECT_EQ(compare_signatures(all, "allreduce"), Status::kTypeMismatch);
  all[2] = reduction_signature(100, DataType::kInt32, ReduceOp::kMax);
  EXPECT_EQ(compare_signatures(all, "allreduce"), Status::kOpMismatch);
  std::vector<CallSignature> bcast{rooted_signature(64, 0), rooted_signature(64, 1)};
  EXPECT_EQ(compare_signatures(bcast, "bcast"), Status::kRootMismatch);
}

// Rank r sends (r + p) % 5 + 1 bytes to rank p; each rank receives what is
// sent to it.
std::vector<CallSignature> exchange(int ranks, int wrong_sender, int wrong_receiver) {
  std::vector<CallSignature> all;
  for (int r = 0; r < ranks; ++r) {
    std::vector<std::size_t> send(ranks), recv(ranks);
    for (int p = 0; p < ranks; ++p) {
      send[p] = (r + p) % 5 + 1;
      recv[p] = (p + r) % 5 + 1;
    }
    if (r == wrong_sender) send[wrong_receiver] += 1;
    all.push_back(exchange_signature(r, ranks, send.data(), recv.data()));
  }
  return all;
}

TEST(Agreement, AlltoallvCountsAgreeBetweenEveryPair) {
  EXPECT_EQ(compare_signatures(exchange(6, -1, -1), "alltoallv"), Status::kOk);
  for (int sender = 0; sender < 6; ++sender)
    for (int receiver = 0; receiver < 6; ++receiver)
      EXPECT_EQ(compare_signatures(exchange(6, sender, receiver), "alltoallv"), Status::kCountMismatch)
          << sender << " -> " << receiver;
}

// Two pairs' differences that cancel in a plain sum of counts are still
// found: each block's hash names its sender and receiver.
TEST(Agreement, SwappedCountsBetweenPairsAreFound) {
  const int ranks = 3;
  std::vector<CallSignature> all;
  for (int r = 0; r < ranks; ++r) {
    std::vector<std::size_t> send(ranks, 4), recv(ranks, 4);
    if (r == 0) {
      send[1] = 5;
      send[2] = 3;
    }
    all.push_back(exchange_signature(r, ranks, send.data(), recv.data()));
  }
  EXPECT_EQ(compare_signatures(all, "alltoallv"), Status::kCountMismatch);
}

}  // namespace
}  // namespace ferry

#include "engine/collectives/schedule.h"

#include <gtest/gtest.h>

#include <vector>

namespace ferry {
namespace {

// Every element belongs to exactly one rank's slice, slices are in rank
// order, and each starts aligned unless the data ran out.
TEST(DirectSlice, TilesTheBufferForEveryRankCount) {
  for (int nranks = 1; nranks <= 17; ++nranks) {
    for (std::size_t count : {0, 1, 2, 3, 7, 16, 17, 1000, 1023, 4096, 100003}) {
      for (std::size_t align : {1, 2, 4, 16}) {
        std::vector<int> owner(count, -1);
        std::size_t expected_begin = 0;
        for (int r = 0; r < nranks; ++r) {
          const ElementRange s = direct_slice(r, nranks, count, align);
          ASSERT_EQ(s.begin, expected_begin) << "nranks " << nranks << " count " << count << " rank " << r;
          ASSERT_LE(s.begin, s.end);
          if (s.begin < count) ASSERT_EQ(s.begin % align, 0u);
          for (std::size_t i = s.begin; i < s.end; ++i) owner[i] = r;
          expected_begin = s.end;
        }
        ASSERT_EQ(expected_begin, count);
        for (std::size_t i = 0; i < count; ++i) ASSERT_GE(owner[i], 0);
      }
    }
  }
}

TEST(DirectSlice, BalancesWork) {
  for (int nranks = 1; nranks <= 17; ++nranks) {
    std::size_t smallest = ~std::size_t{0}, largest = 0;
    for (int r = 0; r < nranks; ++r) {
      const std::size_t size = direct_slice(r, nranks, 1 << 20, 4).size();
      smallest = std::min(smallest, size);
      largest = std::max(largest, size);
    }
    EXPECT_LE(largest - smallest, 4u) << nranks;
  }
}

}  // namespace
}  // namespace ferry

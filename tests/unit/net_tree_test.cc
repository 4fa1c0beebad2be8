// The double binary tree the allreduce and bcast across machines run on
// (algorithms/net.cc): each tree spans every position, with at most two
// children and a depth of log2, and tree 1's inner positions are tree 0's
// leaves.
#include <gtest/gtest.h>

#include <vector>

#include "engine/collectives/algorithms/algorithms.h"

namespace ferry::coll {
namespace {

int levels(int n) {
  int l = 0;
  while ((1 << l) < n + 1) ++l;
  return l;
}

TEST(NetTree, EachTreeSpansEveryPositionWithConsistentLinks) {
  for (int n = 2; n <= 130; ++n) {
    for (int tree = 0; tree < 2; ++tree) {
      std::vector<TreeLinks> links(n);
      for (int p = 0; p < n; ++p) links[p] = tree_links(p, n, tree);
      int roots = 0;
      std::vector<int> parents_seen(n, 0);
      for (int p = 0; p < n; ++p) {
        if (links[p].parent < 0) ++roots;
        for (int child : links[p].children) {
          if (child < 0) continue;
          ASSERT_LT(child, n);
          ASSERT_EQ(links[child].parent, p) << "n " << n << " tree " << tree << " position " << p;
          ++parents_seen[child];
        }
      }
      ASSERT_EQ(roots, 1) << "n " << n << " tree " << tree;
      // Every position reaches the root within the depth, and is some
      // parent's child exactly once unless it is the root.
      for (int p = 0; p < n; ++p) {
        int steps = 0;
        for (int at = p; links[at].parent >= 0; at = links[at].parent) ASSERT_LT(++steps, levels(n)) << "n " << n;
        ASSERT_EQ(parents_seen[p], links[p].parent < 0 ? 0 : 1) << "n " << n << " position " << p;
      }
    }
  }
}

TEST(NetTree, TreeOnesInnerPositionsAreTreeZerosLeaves) {
  for (int n = 3; n <= 130; ++n) {
    int inner_in_both = 0;
    for (int p = 0; p < n; ++p) {
      const TreeLinks zero = tree_links(p, n, 0), one = tree_links(p, n, 1);
      const bool inner_zero = zero.children[0] >= 0, inner_one = one.children[0] >= 0;
      EXPECT_EQ(inner_zero, p % 2 == 1) << "n " << n << " position " << p;
      if (inner_zero && inner_one) ++inner_in_both;
    }
    EXPECT_EQ(inner_in_both, 0) << "n " << n;
  }
}

TEST(NetTree, OutOfRangeHasNoLinks) {
  for (int p : {-1, 5}) {
    const TreeLinks links = tree_links(p, 5, 0);
    EXPECT_EQ(links.parent, -1);
    EXPECT_EQ(links.children[0], -1);
    EXPECT_EQ(links.children[1], -1);
  }
  const TreeLinks alone = tree_links(0, 1, 0);
  EXPECT_EQ(alone.parent, -1);
  EXPECT_EQ(alone.children[0], -1);
}

}  // namespace
}  // namespace ferry::coll

#include "engine/collectives/schedule.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <deque>
#include <map>
#include <random>
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

TEST(CopyPushChunks, TileTheBufferWithinASlotAndShrinkAtTheEnd) {
  constexpr std::size_t kMiB = std::size_t{1} << 20;
  // 512 MiB of floats in 64 MiB slots: whole slots, then halves down to 4 MiB.
  std::vector<std::size_t> chunks = copy_push_chunks(128 * kMiB, 4, 64 * kMiB);
  std::vector<std::size_t> expected(7, 16 * kMiB);
  for (std::size_t mib : {32, 16, 8, 4, 4}) expected.push_back(mib * kMiB / 4);
  EXPECT_EQ(chunks, expected);
  for (std::size_t element : {1, 2, 4, 8, 16}) {
    for (std::size_t slot : {4096, 65536, 1 << 20}) {
      for (std::size_t count : {1, 3, 4, 17, 4097, 65535, 1000003}) {
        chunks = copy_push_chunks(count, element, slot);
        std::size_t total = 0;
        for (std::size_t i = 0; i < chunks.size(); ++i) {
          ASSERT_GT(chunks[i], 0u);
          EXPECT_LE(chunks[i] * element, std::max(slot, element)) << count << " " << element << " " << slot;
          if (i + 1 < chunks.size()) EXPECT_EQ(chunks[i] * element % 16, 0u) << count << " " << element;
          if (i > 0) EXPECT_LE(chunks[i], chunks[i - 1]) << "chunks only shrink";
          total += chunks[i];
        }
        EXPECT_EQ(total, count) << count << " " << element << " " << slot;
      }
    }
  }
}

// Runs every rank's schedule in one process: sends are buffered per
// (sender, receiver) pair in order; a receive waits for its peer's next send.
// Fails on a range mismatch or a deadlock, and leaves each rank's buffer.
struct Message {
  ElementRange range;
  std::vector<double> values;
};

::testing::AssertionResult simulate(const std::vector<Schedule>& schedules, std::vector<std::vector<double>>& buffers) {
  const int n = static_cast<int>(schedules.size());
  std::map<std::pair<int, int>, std::deque<Message>> in_flight;
  std::vector<std::size_t> next(n, 0);
  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < n; ++r) {
      while (next[r] < schedules[r].size()) {
        const ScheduleOp& op = schedules[r][next[r]];
        if (op.peer < 0 || op.peer >= n || op.peer == r)
          return ::testing::AssertionFailure() << "rank " << r << " op " << next[r] << " names peer " << op.peer;
        if (op.range.end > buffers[r].size() || op.range.begin >= op.range.end)
          return ::testing::AssertionFailure() << "rank " << r << " op " << next[r] << " has a bad range";
        if (op.kind == ScheduleOp::Kind::kSend) {
          in_flight[{r, op.peer}].push_back(
              {op.range, {buffers[r].begin() + op.range.begin, buffers[r].begin() + op.range.end}});
        } else {
          std::deque<Message>& queue = in_flight[{op.peer, r}];
          if (queue.empty()) break;
          const Message message = queue.front();
          queue.pop_front();
          if (message.range.begin != op.range.begin || message.range.end != op.range.end)
            return ::testing::AssertionFailure() << "rank " << r << " expects [" << op.range.begin << ", "
                                                 << op.range.end << ") from " << op.peer << ", gets ["
                                                 << message.range.begin << ", " << message.range.end << ")";
          for (std::size_t i = 0; i < op.range.size(); ++i) {
            double& x = buffers[r][op.range.begin + i];
            x = op.kind == ScheduleOp::Kind::kRecvReduce ? x + message.values[i] : message.values[i];
          }
        }
        ++next[r];
        progress = true;
      }
    }
  }
  for (int r = 0; r < n; ++r)
    if (next[r] < schedules[r].size())
      return ::testing::AssertionFailure() << "deadlock: rank " << r << " stuck at op " << next[r];
  for (const auto& pair : in_flight)
    if (!pair.second.empty())
      return ::testing::AssertionFailure() << "rank " << pair.first.first << " sent to " << pair.first.second
                                           << " what was never received";
  return ::testing::AssertionSuccess();
}

// Random integers (never zero) keep the sums exact in any order.
std::vector<std::vector<double>> random_inputs(int n, std::size_t count, std::mt19937& rng) {
  std::uniform_int_distribution<int> value(1, 1000);
  std::vector<std::vector<double>> inputs(n, std::vector<double>(count));
  for (auto& input : inputs)
    for (double& x : input) x = value(rng) * (value(rng) % 2 ? 1 : -1);
  return inputs;
}

std::vector<double> reference_sum(const std::vector<std::vector<double>>& inputs) {
  std::vector<double> sum(inputs[0].size(), 0);
  for (const auto& input : inputs)
    for (std::size_t i = 0; i < sum.size(); ++i) sum[i] += input[i];
  return sum;
}

// Ring orders: rank order, reversed, and shuffled (what a topology search
// may return); the schedule must not assume any of them.
std::vector<Ring> ring_orders(int n, std::mt19937& rng) {
  Ring identity(n);
  for (int r = 0; r < n; ++r) identity[r] = r;
  Ring reversed(identity.rbegin(), identity.rend());
  Ring shuffled = identity;
  std::shuffle(shuffled.begin(), shuffled.end(), rng);
  return {identity, reversed, shuffled};
}

const std::size_t kCounts[] = {1, 3, 7, 17, 33, 1001, 4099};

TEST(RingSchedule, AllreduceMatchesHostReferenceForOneTo17Ranks) {
  std::mt19937 rng(12345);
  for (int n = 1; n <= 17; ++n) {
    for (const Ring& ring : ring_orders(n, rng)) {
      for (std::size_t count : kCounts) {
        for (std::size_t align : {1, 4}) {
          std::vector<std::vector<double>> buffers = random_inputs(n, count, rng);
          const std::vector<double> expected = reference_sum(buffers);
          std::vector<Schedule> schedules;
          for (int r = 0; r < n; ++r) schedules.push_back(ring_allreduce(ring, r, count, align));
          ASSERT_TRUE(simulate(schedules, buffers)) << "n " << n << " count " << count;
          for (int r = 0; r < n; ++r) ASSERT_EQ(buffers[r], expected) << "n " << n << " count " << count << " rank " << r;
        }
      }
    }
  }
}

TEST(RingSchedule, ReduceScatterLeavesEachRankItsSliceReduced) {
  std::mt19937 rng(7);
  for (int n = 1; n <= 17; ++n) {
    const Ring ring = ring_orders(n, rng)[2];
    for (std::size_t count : kCounts) {
      std::vector<std::vector<double>> buffers = random_inputs(n, count, rng);
      const std::vector<double> expected = reference_sum(buffers);
      std::vector<Schedule> schedules;
      for (int r = 0; r < n; ++r) schedules.push_back(ring_reduce_scatter(ring, r, count, 1));
      ASSERT_TRUE(simulate(schedules, buffers));
      std::vector<int> owners(count, 0);
      for (int r = 0; r < n; ++r) {
        const ElementRange owned = ring_owned_slice(ring, r, count, 1);
        for (std::size_t i = owned.begin; i < owned.end; ++i) {
          ASSERT_EQ(buffers[r][i], expected[i]) << "n " << n << " count " << count << " rank " << r;
          ++owners[i];
        }
      }
      for (int owners_of_element : owners) ASSERT_EQ(owners_of_element, 1);
    }
  }
}

// 2(n-1) steps, each a send and a receive of about 1/n of the buffer.
TEST(RingSchedule, MovesTwoNMinusOneSlicesPerRank) {
  for (int n = 2; n <= 17; ++n) {
    Ring ring(n);
    for (int r = 0; r < n; ++r) ring[r] = r;
    const std::size_t count = 1000 * n;
    const Schedule schedule = ring_allreduce(ring, 0, count, 1);
    std::size_t sends = 0, sent = 0;
    for (const ScheduleOp& op : schedule)
      if (op.kind == ScheduleOp::Kind::kSend) ++sends, sent += op.range.size();
    EXPECT_EQ(sends, 2u * (n - 1));
    EXPECT_EQ(sent, 2u * (n - 1) * 1000);
  }
}

TEST(TreeSchedule, AllreduceMatchesHostReferenceForOneTo17Ranks) {
  std::mt19937 rng(54321);
  for (int n = 1; n <= 17; ++n) {
    for (const Ring& order : ring_orders(n, rng)) {
      const std::array<BinaryTree, 2> trees = build_double_binary_tree(order);
      for (std::size_t count : kCounts) {
        for (std::size_t chunk : {std::size_t{1}, std::size_t{5}, std::size_t{64}, count}) {
          std::vector<std::vector<double>> buffers = random_inputs(n, count, rng);
          const std::vector<double> expected = reference_sum(buffers);
          std::vector<Schedule> schedules;
          for (int r = 0; r < n; ++r) schedules.push_back(tree_allreduce(trees, r, count, 4, chunk));
          ASSERT_TRUE(simulate(schedules, buffers)) << "n " << n << " count " << count << " chunk " << chunk;
          for (int r = 0; r < n; ++r)
            ASSERT_EQ(buffers[r], expected) << "n " << n << " count " << count << " chunk " << chunk << " rank " << r;
        }
      }
    }
  }
}

// Reduce alone leaves each tree's root its half reduced; broadcast alone
// copies each root's half everywhere.
TEST(TreeSchedule, ReduceThenBroadcastSeparately) {
  std::mt19937 rng(99);
  for (int n = 1; n <= 17; ++n) {
    const Ring order = ring_orders(n, rng)[2];
    const std::array<BinaryTree, 2> trees = build_double_binary_tree(order);
    const std::size_t count = 1001;
    std::vector<std::vector<double>> buffers = random_inputs(n, count, rng);
    const std::vector<double> expected = reference_sum(buffers);
    std::vector<Schedule> reduce, broadcast;
    for (int r = 0; r < n; ++r) {
      reduce.push_back(tree_reduce(trees, r, count, 1, 37));
      broadcast.push_back(tree_broadcast(trees, r, count, 1, 37));
    }
    ASSERT_TRUE(simulate(reduce, buffers));
    for (int t = 0; t < 2; ++t) {
      const ElementRange half = direct_slice(t, 2, count, 1);
      for (std::size_t i = half.begin; i < half.end; ++i)
        ASSERT_EQ(buffers[trees[t].root][i], expected[i]) << "n " << n << " tree " << t;
    }
    ASSERT_TRUE(simulate(broadcast, buffers));
    for (int r = 0; r < n; ++r) ASSERT_EQ(buffers[r], expected) << "n " << n << " rank " << r;
  }
}

}  // namespace
}  // namespace ferry

#include "engine/collectives/schedule.h"

#include <algorithm>

namespace ferry {

ElementRange direct_slice(int rank, int nranks, std::size_t count, std::size_t align) {
  const std::size_t units = (count + align - 1) / align;
  const std::size_t per_rank = units / nranks;
  const std::size_t extra = units % nranks;
  // The first `extra` ranks take one more unit.
  const std::size_t first_unit = rank * per_rank + std::min<std::size_t>(rank, extra);
  const std::size_t my_units = per_rank + (static_cast<std::size_t>(rank) < extra ? 1 : 0);
  const std::size_t begin = std::min(count, first_unit * align);
  const std::size_t end = std::min(count, (first_unit + my_units) * align);
  return {begin, end};
}

ElementRange direct_part(int part, int parts, std::size_t count, DataType type) {
  return direct_slice(part, parts, count, std::max<std::size_t>(1, 16 / data_type_size(type)));
}

std::size_t pipeline_chunk_elements(std::size_t slice_elements, std::size_t element_bytes,
                                    std::size_t max_chunk_bytes) {
  // At least four chunks keep the pull, reduce and push stages overlapped;
  // chunks of 1 MiB or more keep the per-chunk launch cost small; multiples
  // of 16 bytes keep the reduce kernel's vector loads aligned.
  constexpr std::size_t kMinChunkBytes = 1 << 20;
  std::size_t bytes = std::max(kMinChunkBytes, slice_elements * element_bytes / 4);
  bytes = std::min(bytes, max_chunk_bytes);
  std::size_t elements = std::max<std::size_t>(1, bytes / element_bytes);
  const std::size_t align = std::max<std::size_t>(1, 16 / element_bytes);
  elements = std::max(align, elements / align * align);
  return elements;
}

std::vector<std::size_t> copy_push_chunks(std::size_t count, std::size_t element_bytes, std::size_t slot_bytes) {
  std::vector<std::size_t> chunks;
  for_each_copy_push_chunk(count, element_bytes, slot_bytes, [&](std::size_t chunk) { chunks.push_back(chunk); });
  return chunks;
}

namespace {

void add(Schedule& schedule, ScheduleOp::Kind kind, int peer, ElementRange range) {
  if (range.size() > 0) schedule.push_back({kind, peer, range});
}

int position_in(const Ring& ring, int rank) {
  for (std::size_t p = 0; p < ring.size(); ++p)
    if (ring[p] == rank) return static_cast<int>(p);
  return -1;
}

int wrap(int index, int n) { return ((index % n) + n) % n; }

enum class TreePhase { kReduce, kBroadcast, kBoth };

// Chunk c of every tree in turn, so both trees' links work at once.
Schedule tree_schedule(const std::array<BinaryTree, 2>& trees, int rank, std::size_t count, std::size_t align,
                       std::size_t chunk_elements, TreePhase phase) {
  Schedule schedule;
  const std::size_t chunk = std::max<std::size_t>(1, chunk_elements);
  const ElementRange halves[2] = {direct_slice(0, 2, count, align), direct_slice(1, 2, count, align)};
  const std::size_t chunks = (std::max(halves[0].size(), halves[1].size()) + chunk - 1) / chunk;
  for (std::size_t c = 0; c < chunks; ++c) {
    for (int t = 0; t < 2; ++t) {
      const BinaryTree& tree = trees[t];
      const std::size_t begin = halves[t].begin + c * chunk;
      const ElementRange range{std::min(begin, halves[t].end), std::min(begin + chunk, halves[t].end)};
      if (phase != TreePhase::kBroadcast) {
        for (int child : tree.children[rank])
          if (child >= 0) add(schedule, ScheduleOp::Kind::kRecvReduce, child, range);
        if (tree.parent[rank] >= 0) add(schedule, ScheduleOp::Kind::kSend, tree.parent[rank], range);
      }
      if (phase != TreePhase::kReduce) {
        if (tree.parent[rank] >= 0) add(schedule, ScheduleOp::Kind::kRecvCopy, tree.parent[rank], range);
        for (int child : tree.children[rank])
          if (child >= 0) add(schedule, ScheduleOp::Kind::kSend, child, range);
      }
    }
  }
  return schedule;
}

// n - 1 steps around the ring: send slice (p + first - step) to the next
// rank, receive slice (p + first - step - 1) from the previous one, where p
// is this rank's position. Reduce-scatter starts at its own slice (first 0)
// and reduces what arrives; all-gather starts one further (the slice it
// finished reducing) and copies.
Schedule ring_steps(const Ring& ring, int rank, std::size_t count, std::size_t align, int first,
                    ScheduleOp::Kind receive) {
  Schedule schedule;
  const int n = static_cast<int>(ring.size());
  const int p = position_in(ring, rank);
  const int next = ring[wrap(p + 1, n)];
  const int prev = ring[wrap(p - 1, n)];
  for (int step = 0; step < n - 1; ++step) {
    add(schedule, ScheduleOp::Kind::kSend, next, direct_slice(wrap(p + first - step, n), n, count, align));
    add(schedule, receive, prev, direct_slice(wrap(p + first - step - 1, n), n, count, align));
  }
  return schedule;
}

}  // namespace

Schedule ring_reduce_scatter(const Ring& ring, int rank, std::size_t count, std::size_t align) {
  return ring_steps(ring, rank, count, align, 0, ScheduleOp::Kind::kRecvReduce);
}

Schedule ring_allgather(const Ring& ring, int rank, std::size_t count, std::size_t align) {
  return ring_steps(ring, rank, count, align, 1, ScheduleOp::Kind::kRecvCopy);
}

Schedule ring_allreduce(const Ring& ring, int rank, std::size_t count, std::size_t align) {
  Schedule schedule = ring_reduce_scatter(ring, rank, count, align);
  const Schedule gather = ring_allgather(ring, rank, count, align);
  schedule.insert(schedule.end(), gather.begin(), gather.end());
  return schedule;
}

ElementRange ring_owned_slice(const Ring& ring, int rank, std::size_t count, std::size_t align) {
  const int n = static_cast<int>(ring.size());
  return direct_slice(wrap(position_in(ring, rank) + 1, n), n, count, align);
}

Schedule tree_reduce(const std::array<BinaryTree, 2>& trees, int rank, std::size_t count, std::size_t align,
                     std::size_t chunk_elements) {
  return tree_schedule(trees, rank, count, align, chunk_elements, TreePhase::kReduce);
}

Schedule tree_broadcast(const std::array<BinaryTree, 2>& trees, int rank, std::size_t count, std::size_t align,
                        std::size_t chunk_elements) {
  return tree_schedule(trees, rank, count, align, chunk_elements, TreePhase::kBroadcast);
}

Schedule tree_allreduce(const std::array<BinaryTree, 2>& trees, int rank, std::size_t count, std::size_t align,
                        std::size_t chunk_elements) {
  return tree_schedule(trees, rank, count, align, chunk_elements, TreePhase::kBoth);
}

Schedule chain_broadcast(const Ring& ring, int root, int rank, std::size_t count) {
  Schedule schedule;
  const int n = static_cast<int>(ring.size());
  const int from_root = wrap(position_in(ring, rank) - position_in(ring, root), n);
  const ElementRange all{0, count};
  if (from_root > 0) add(schedule, ScheduleOp::Kind::kRecvCopy, ring[wrap(position_in(ring, rank) - 1, n)], all);
  if (from_root < n - 1) add(schedule, ScheduleOp::Kind::kSend, ring[wrap(position_in(ring, rank) + 1, n)], all);
  return schedule;
}

}  // namespace ferry

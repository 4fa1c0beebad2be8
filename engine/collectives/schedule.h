// Schedules: which rank moves which part of the data, as pure functions of
// (rank, nranks, count). Executors (kernels, host code) carry them out; unit
// tests check them by simulating every rank in one process.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <vector>

#include "engine/common/types.h"
#include "engine/topology/search.h"

namespace ferry {

struct ElementRange {
  std::size_t begin;
  std::size_t end;
  std::size_t size() const { return end - begin; }
};

// Direct reduce-scatter + all-gather over mapped peer memory: rank r reduces
// its slice from every rank's input and writes the result into every rank's
// output. Slices tile [0, count), are disjoint, and start on multiples of
// align elements (so vector loads stay aligned) except where count runs out.
ElementRange direct_slice(int rank, int nranks, std::size_t count, std::size_t align);
// direct_slice for elements of type, slices starting on 16-byte boundaries.
ElementRange direct_part(int part, int parts, std::size_t count, DataType type);

// The pipeline chunks of a slice: chunk c covers [begin + c * chunk, ...).
std::size_t pipeline_chunk_elements(std::size_t slice_elements, std::size_t element_bytes,
                                    std::size_t max_chunk_bytes);

// The chunks of the copy-engine push allreduce, as element counts in order:
// each fits a landing slot of slot_bytes. Every copy costs a fixed time on
// top of its bytes (bench/RESULTS.md) and only the last chunk's reduce runs
// after the copies, so chunks are whole slots while at least two slots
// remain, then halve down to a sixteenth of a slot. All but the last are
// multiples of 16 bytes.
std::vector<std::size_t> copy_push_chunks(std::size_t count, std::size_t element_bytes, std::size_t slot_bytes);

// The same chunks, each handed to take(elements) in order, without a list
// (the tuner costs them on every call).
template <typename Take>
void for_each_copy_push_chunk(std::size_t count, std::size_t element_bytes, std::size_t slot_bytes, Take take) {
  const std::size_t align = std::max<std::size_t>(1, 16 / element_bytes);
  const std::size_t slot = std::max(align, slot_bytes / element_bytes / align * align);
  const std::size_t smallest = std::max(align, slot / 16 / align * align);
  for (std::size_t left = count; left > 0;) {
    const std::size_t chunk =
        left <= smallest ? left : std::min(left, std::max(smallest, std::min(slot, left / 2 / align * align)));
    take(chunk);
    left -= chunk;
  }
}

// One operation of a rank's schedule; a rank runs its operations in order.
// kSend sends `range` of this rank's buffer to peer; a receive takes the
// peer's next send to this rank (sends between two ranks arrive in order,
// with the same range) and adds it into the local range (kRecvReduce) or
// copies it over it (kRecvCopy). Empty ranges are left out on both sides.
struct ScheduleOp {
  enum class Kind { kSend, kRecvReduce, kRecvCopy };
  Kind kind;
  int peer;
  ElementRange range;
};
using Schedule = std::vector<ScheduleOp>;

// Ring allreduce over the ranks in ring order (search_rings), the buffer cut
// into nranks slices by direct_slice. Reduce-scatter: at step s (0..n-2) the
// rank at position p sends slice p-s to the next rank and reduces slice
// p-s-1 received from the previous one; afterwards it holds slice p+1 reduced
// (ring_owned_slice). All-gather: at step s it sends slice p+1-s and copies
// in slice p-s. Both 2(n-1) steps, each moving 1/n of the buffer per link.
Schedule ring_reduce_scatter(const Ring& ring, int rank, std::size_t count, std::size_t align);
Schedule ring_allgather(const Ring& ring, int rank, std::size_t count, std::size_t align);
Schedule ring_allreduce(const Ring& ring, int rank, std::size_t count, std::size_t align);
ElementRange ring_owned_slice(const Ring& ring, int rank, std::size_t count, std::size_t align);

// Double binary tree (build_double_binary_tree): tree t carries half t of the
// buffer (direct_slice(t, 2, ...)), cut into pipeline chunks of at most
// chunk_elements, trees alternating chunk by chunk. Reduce: a rank adds each
// child's chunk into its own, then sends the sum to its parent, so tree t's
// root ends with half t reduced. Broadcast: a rank takes the chunk from its
// parent, then sends it to its children. Allreduce runs the reduce and then
// the broadcast of each chunk before the next chunk, so the two pipeline.
Schedule tree_reduce(const std::array<BinaryTree, 2>& trees, int rank, std::size_t count, std::size_t align,
                     std::size_t chunk_elements);
Schedule tree_broadcast(const std::array<BinaryTree, 2>& trees, int rank, std::size_t count, std::size_t align,
                        std::size_t chunk_elements);
Schedule tree_allreduce(const std::array<BinaryTree, 2>& trees, int rank, std::size_t count, std::size_t align,
                        std::size_t chunk_elements);

// Pipelined chain from the root along the ring order: the rank after the
// root in the ring takes the buffer from it, passes it on to the next, and
// so on; pipelining comes from running this per region (simple_protocol.h).
Schedule chain_broadcast(const Ring& ring, int root, int rank, std::size_t count);

}  // namespace ferry

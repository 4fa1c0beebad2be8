// Collectives across machines over the net transport (net_transport.h).
#include <algorithm>

#include "engine/collectives/algorithms/algorithms.h"
#include "engine/common/params.h"
#include "engine/core/executor.h"

namespace ferry::coll {
namespace {

// One tag per algorithm: calls on a communicator are ordered, and messages
// of one tag between two ranks match in posting order.
constexpr int kRingTag = 1;
constexpr int kChainTag = 2;
// 3: hierarchy.cc's alltoallv. A tag per tree, so that two ranks that are
// parent and child in one tree and child and parent in the other never
// match one tree's message with the other's receive.
constexpr int kTreeTags[2] = {4, 5};
constexpr int kTreeBcastTag = 6;

// Segment k of R over count elements, the first count % R one longer.
ElementRange segment(int k, int segments, std::size_t count) {
  const std::size_t base = count / segments, longer = count % segments;
  const std::size_t begin = k * base + std::min<std::size_t>(k, longer);
  return {begin, begin + base + (static_cast<std::size_t>(k) < longer ? 1 : 0)};
}

int position_of(const std::vector<int>& ranks, int rank) {
  return static_cast<int>(std::find(ranks.begin(), ranks.end(), rank) - ranks.begin());
}

}  // namespace

Status run_net_ring_allreduce(Communicator& comm, NetTransport& net, const std::vector<int>& ring,
                              const Placement& where, void* buffer, std::size_t count, DataType type, ReduceOp op) {
  const int n = static_cast<int>(ring.size());
  if (n < 2 || count == 0) return Status::kOk;
  const int me = position_of(ring, comm.rank());
  const int next = ring[(me + 1) % n], prev = ring[(me + n - 1) % n];
  const std::size_t element = data_type_size(type);
  const auto deadline = handshake_deadline();
  auto bytes_of = [&](const ElementRange& r) { return r.size() * element; };
  auto start_of = [&](const ElementRange& r) { return at(buffer, r.begin * element); };

  gpu::Stream stream = nullptr;
  void* incoming = nullptr;
  FERRY_CHECK(where.backend->set_device(where.device));
  FERRY_CHECK(comm.resources().stream_for(where.backend, where.device, &stream));
  FERRY_CHECK(comm.resources().scratch_for(where.backend, where.device,
                                           std::max<std::size_t>(bytes_of(segment(0, n, count)), 1), &incoming));
  // Reduce-scatter: after step s this rank holds segment (me - s - 1)
  // reduced over s + 2 ranks; after n - 1 steps, segment me + 1 over all.
  for (int s = 0; s < n - 1; ++s) {
    const ElementRange out = segment((me - s + n) % n, n, count);
    const ElementRange in = segment((me - s - 1 + 2 * n) % n, n, count);
    Completion sent, received;
    FERRY_CHECK(net.post_send(next, start_of(out), bytes_of(out), kRingTag, &sent));
    FERRY_CHECK(net.post_recv(prev, incoming, bytes_of(in), kRingTag, &received));
    FERRY_CHECK(net.wait_all({&sent, &received}, deadline));
    if (in.size() == 0) continue;
    DirectReduceArgs args = reduce_of(in.size(), type, op);
    FERRY_CHECK(list_direct_pointers(where.backend, comm.resources(), where.device, stream,
                                     {incoming, start_of(in)}, {start_of(in)}, &args));
    FERRY_CHECK(launch_direct_reduce(where.backend, args, stream));
    FERRY_CHECK(synchronize_stream(where.backend, stream));
  }
  // Allgather: each step passes on the segment completed last.
  for (int s = 0; s < n - 1; ++s) {
    const ElementRange out = segment((me + 1 - s + n) % n, n, count);
    const ElementRange in = segment((me - s + n) % n, n, count);
    Completion sent, received;
    FERRY_CHECK(net.post_send(next, start_of(out), bytes_of(out), kRingTag, &sent));
    FERRY_CHECK(net.post_recv(prev, start_of(in), bytes_of(in), kRingTag, &received));
    FERRY_CHECK(net.wait_all({&sent, &received}, deadline));
  }
  return Status::kOk;
}

Status run_net_chain_bcast(NetTransport& net, const std::vector<int>& chain, int me, void* buffer,
                           std::size_t bytes) {
  const int n = static_cast<int>(chain.size());
  const int position = position_of(chain, me);
  if (n < 2 || bytes == 0 || position >= n) return Status::kOk;
  const int prev = position > 0 ? chain[position - 1] : -1;
  const int next = position + 1 < n ? chain[position + 1] : -1;
  // Pieces of a few network chunks: a rank forwards one while the next
  // arrives. Every rank cuts the same pieces.
  const std::size_t piece = std::size_t{4} << 20;
  const std::size_t pieces = (bytes + piece - 1) / piece;
  auto piece_at = [&](std::size_t i) { return at(buffer, i * piece); };
  auto piece_bytes = [&](std::size_t i) { return std::min(piece, bytes - i * piece); };
  const auto deadline = handshake_deadline();
  std::vector<Completion> received(pieces), sent(pieces);
  if (prev >= 0)
    for (std::size_t i = 0; i < pieces; ++i)
      FERRY_CHECK(net.post_recv(prev, piece_at(i), piece_bytes(i), kChainTag, &received[i]));
  std::vector<Completion*> waits;
  for (std::size_t i = 0; i < pieces; ++i) {
    if (prev >= 0) FERRY_CHECK(net.wait_all({&received[i]}, deadline));
    if (next >= 0) {
      FERRY_CHECK(net.post_send(next, piece_at(i), piece_bytes(i), kChainTag, &sent[i]));
      waits.push_back(&sent[i]);
    }
  }
  return net.wait_all(waits, deadline);
}

namespace {

// Tree 0 in 1-based in-order indices 1..n: index i at level lowbit(i) has
// children i -+ lowbit/2 and parent i -+ lowbit (as in a perfect tree of
// 2^k - 1 nodes). Indices past n do not exist: a missing parent is
// replaced by the nearest existing ancestor, a missing right child by its
// nearest existing left descendant (the two rules agree).
int lowbit(int i) { return i & -i; }

// Tree 0's root: the highest power of two <= n.
int root_index(int n) {
  int top = 1;
  while (top * 2 <= n) top *= 2;
  return top;
}

int parent_index(int i, int n) {
  if (i == root_index(n)) return 0;
  for (int bit = lowbit(i);; bit *= 2) {
    i = (i & (2 * bit)) ? i - bit : i + bit;
    if (i <= n) return i;
  }
}

void child_indices(int i, int n, int out[2]) {
  out[0] = out[1] = 0;
  const int bit = lowbit(i);
  if (bit == 1) return;
  out[0] = i - bit / 2;
  int right = i + bit / 2;
  while (right > n && lowbit(right) > 1) right -= lowbit(right) / 2;
  if (right <= n) out[1] = right;
}

}  // namespace

TreeLinks tree_links(int position, int n, int tree) {
  TreeLinks links;
  if (n < 2 || position < 0 || position >= n) return links;
  // Tree 1: position p sits where tree 0 has p + 1.
  const int shift = tree == 1 ? 1 : 0;
  const auto to_index = [&](int p) { return (p + shift) % n + 1; };
  const auto to_position = [&](int i) { return (i - 1 - shift + n) % n; };
  const int index = to_index(position);
  const int parent = parent_index(index, n);
  if (parent) links.parent = to_position(parent);
  int children[2];
  child_indices(index, n, children);
  for (int c = 0; c < 2; ++c)
    if (children[c]) links.children[c] = to_position(children[c]);
  return links;
}

Status run_net_tree_allreduce(Communicator& comm, NetTransport& net, const std::vector<int>& ranks,
                              const Placement& where, void* buffer, std::size_t count, DataType type, ReduceOp op) {
  const int n = static_cast<int>(ranks.size());
  if (n < 2 || count == 0) return Status::kOk;
  const int me = position_of(ranks, comm.rank());
  const std::size_t element = data_type_size(type);
  const std::size_t piece = std::max<std::size_t>(
      1, static_cast<std::size_t>(std::max<std::int64_t>(params().net_chunk_bytes, 1)) / element);
  // Receives posted ahead per tree and child; their scratch slots cycle.
  constexpr std::size_t kAhead = 2;
  const auto deadline = handshake_deadline();
  auto start_of = [&](const ElementRange& r) { return at(buffer, r.begin * element); };
  auto bytes_of = [&](const ElementRange& r) { return r.size() * element; };

  struct Tree {
    TreeLinks links;
    int tag;
    ElementRange half;
    std::size_t pieces;
    std::vector<Completion> from_children[2];
    std::vector<Completion> to_parent;
  };
  Tree trees[2];
  std::size_t most_pieces = 0;
  for (int t = 0; t < 2; ++t) {
    Tree& tree = trees[t];
    tree.links = tree_links(me, n, t);
    tree.tag = kTreeTags[t];
    tree.half = segment(t, 2, count);
    tree.pieces = (tree.half.size() + piece - 1) / piece;
    for (auto& c : tree.from_children) c.resize(tree.pieces);
    tree.to_parent.resize(tree.pieces);
    most_pieces = std::max(most_pieces, tree.pieces);
  }
  auto piece_of = [&](const Tree& tree, std::size_t i) {
    const std::size_t begin = tree.half.begin + i * piece;
    return ElementRange{begin, std::min(begin + piece, tree.half.end)};
  };
  auto peer = [&](int position) { return ranks[position]; };

  gpu::Stream stream = nullptr;
  void* scratch = nullptr;
  const std::size_t slot_bytes = piece * element;
  FERRY_CHECK(where.backend->set_device(where.device));
  FERRY_CHECK(comm.resources().stream_for(where.backend, where.device, &stream));
  FERRY_CHECK(comm.resources().scratch_for(where.backend, where.device, 2 * 2 * kAhead * slot_bytes, &scratch));
  auto slot = [&](int t, int c, std::size_t i) { return at(scratch, ((t * 2 + c) * kAhead + i % kAhead) * slot_bytes); };
  auto post_from_child = [&](int t, int c, std::size_t i) -> Status {
    Tree& tree = trees[t];
    if (tree.links.children[c] < 0 || i >= tree.pieces) return Status::kOk;
    return net.post_recv(peer(tree.links.children[c]), slot(t, c, i), bytes_of(piece_of(tree, i)), tree.tag,
                         &tree.from_children[c][i]);
  };

  // Up: each piece, once the children's have arrived, is reduced into this
  // rank's buffer and sent on to the parent. The root's is then final.
  auto up = [&](std::size_t i) -> Status {
    for (int t = 0; t < 2; ++t) {
      Tree& tree = trees[t];
      if (i >= tree.pieces) continue;
      const ElementRange mine = piece_of(tree, i);
      std::vector<const void*> inputs;
      for (int c = 0; c < 2; ++c) {
        if (tree.links.children[c] < 0) continue;
        FERRY_CHECK(net.wait_all({&tree.from_children[c][i]}, deadline));
        inputs.push_back(slot(t, c, i));
      }
      if (!inputs.empty()) {
        inputs.push_back(start_of(mine));
        DirectReduceArgs args = reduce_of(mine.size(), type, op);
        FERRY_CHECK(list_direct_pointers(where.backend, comm.resources(), where.device, stream, inputs,
                                         {start_of(mine)}, &args));
        FERRY_CHECK(launch_direct_reduce(where.backend, args, stream));
        FERRY_CHECK(synchronize_stream(where.backend, stream));
        for (int c = 0; c < 2; ++c) FERRY_CHECK(post_from_child(t, c, i + kAhead));
      }
      if (tree.links.parent >= 0)
        FERRY_CHECK(net.post_send(peer(tree.links.parent), start_of(mine), bytes_of(mine), tree.tag,
                                  &tree.to_parent[i]));
    }
    return Status::kOk;
  };

  // Down: each piece from the parent into place, then on to the children.
  // Its receive lands where its send up reads from, so it is posted once
  // that send is done; piece i + 1's is posted while piece i is awaited
  // (pieces 0 and 1 at the first), so one is always waiting for the parent.
  std::vector<Completion> from_parent[2], to_children[2][2];
  for (int t = 0; t < 2; ++t) {
    from_parent[t].resize(trees[t].pieces);
    for (int c = 0; c < 2; ++c) to_children[t][c].resize(trees[t].pieces);
  }
  auto post_from_parent = [&](int t, std::size_t i) -> Status {
    Tree& tree = trees[t];
    if (tree.links.parent < 0 || i >= tree.pieces) return Status::kOk;
    FERRY_CHECK(net.wait_all({&tree.to_parent[i]}, deadline));
    return net.post_recv(peer(tree.links.parent), start_of(piece_of(tree, i)), bytes_of(piece_of(tree, i)), tree.tag,
                         &from_parent[t][i]);
  };
  std::vector<Completion*> sends;
  auto down = [&](std::size_t i) -> Status {
    for (int t = 0; t < 2; ++t) {
      Tree& tree = trees[t];
      if (i >= tree.pieces) continue;
      if (i == 0) FERRY_CHECK(post_from_parent(t, 0));
      FERRY_CHECK(post_from_parent(t, i + 1));
      if (tree.links.parent >= 0) FERRY_CHECK(net.wait_all({&from_parent[t][i]}, deadline));
      const ElementRange mine = piece_of(tree, i);
      for (int c = 0; c < 2; ++c) {
        if (tree.links.children[c] < 0) continue;
        FERRY_CHECK(net.post_send(peer(tree.links.children[c]), start_of(mine), bytes_of(mine), tree.tag,
                                  &to_children[t][c][i]));
        sends.push_back(&to_children[t][c][i]);
      }
    }
    return Status::kOk;
  };

  // Both directions at once: step s takes piece s up and piece s - kAhead
  // down. Down waits only on sends up of earlier steps, which wait on
  // nothing that comes down, so no rank waits on a later step of another.
  for (int t = 0; t < 2; ++t)
    for (int c = 0; c < 2; ++c)
      for (std::size_t i = 0; i < kAhead; ++i) FERRY_CHECK(post_from_child(t, c, i));
  for (std::size_t step = 0; step < most_pieces + kAhead; ++step) {
    if (step < most_pieces) FERRY_CHECK(up(step));
    if (step >= kAhead) FERRY_CHECK(down(step - kAhead));
  }
  return net.wait_all(sends, deadline);
}

Status run_net_tree_bcast(NetTransport& net, const std::vector<int>& ranks, int me, void* buffer, std::size_t bytes) {
  const int n = static_cast<int>(ranks.size());
  const int index = position_of(ranks, me);
  if (n < 2 || bytes == 0 || index >= n) return Status::kOk;
  // Tree 0's root sits at position root_index(n) - 1; ranks[k] takes
  // position (k + root) mod n, so ranks[0] is the root.
  const int root = root_index(n) - 1;
  const auto rank_at = [&](int position) { return ranks[(position - root + n) % n]; };
  const TreeLinks links = tree_links((index + root) % n, n, 0);
  const std::size_t piece = static_cast<std::size_t>(std::max<std::int64_t>(params().net_chunk_bytes, 1));
  const std::size_t pieces = (bytes + piece - 1) / piece;
  auto piece_at = [&](std::size_t i) { return at(buffer, i * piece); };
  auto piece_bytes = [&](std::size_t i) { return std::min(piece, bytes - i * piece); };
  const auto deadline = handshake_deadline();
  std::vector<Completion> received(pieces), sent[2];
  for (auto& s : sent) s.resize(pieces);
  if (links.parent >= 0)
    for (std::size_t i = 0; i < pieces; ++i)
      FERRY_CHECK(net.post_recv(rank_at(links.parent), piece_at(i), piece_bytes(i), kTreeBcastTag, &received[i]));
  std::vector<Completion*> waits;
  for (std::size_t i = 0; i < pieces; ++i) {
    if (links.parent >= 0) FERRY_CHECK(net.wait_all({&received[i]}, deadline));
    for (int c = 0; c < 2; ++c) {
      if (links.children[c] < 0) continue;
      FERRY_CHECK(net.post_send(rank_at(links.children[c]), piece_at(i), piece_bytes(i), kTreeBcastTag, &sent[c][i]));
      waits.push_back(&sent[c][i]);
    }
  }
  return net.wait_all(waits, deadline);
}

}  // namespace ferry::coll

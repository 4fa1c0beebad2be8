// Collectives across machines over the net transport (net_transport.h).
#include <algorithm>

#include "engine/collectives/algorithms/algorithms.h"
#include "engine/core/executor.h"

namespace ferry::coll {
namespace {

// One tag per algorithm: calls on a communicator are ordered, and messages
// of one tag between two ranks match in posting order.
constexpr int kRingTag = 1;
constexpr int kChainTag = 2;

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
    FERRY_CHECK(where.backend->stream_synchronize(stream));
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

}  // namespace ferry::coll

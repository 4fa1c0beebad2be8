// The engine's collective algorithms beside the call flow in collectives.cc:
// each runs one rank's part of a call the ranks agreed on (call.h).
// Internal to engine/collectives.
#pragma once

#include <cstddef>
#include <mutex>
#include <set>
#include <utility>
#include <vector>

#include "engine/collectives/call.h"
#include "engine/core/executor.h"
#include "engine/collectives/schedule.h"
#include "engine/collectives/simple_protocol.h"

namespace ferry::coll {

// One-shot and two-shot: SM loads straight from the peers' buffers. The
// elements of slice of every rank's input are reduced into this rank's
// output (one-shot: the whole range), or into every rank's (two-shot: a
// slice a rank).
Status run_direct_reduce(Communicator& comm, const MappedBuffers& buffers, const Placement& where,
                         std::size_t count, DataType type, ReduceOp op, ElementRange slice, bool one_shot);

// A direct reduce of count elements; its pointers come from list_direct_pointers.
DirectReduceArgs reduce_of(std::size_t count, DataType type, ReduceOp op);

Status run_copy_push(Communicator& comm, const Placement& where, const void* input, void* output,
                     std::size_t count, DataType type, ReduceOp op);

// The leader of each GPU (Communicator::gpu_leader) reduces a slice of every
// rank's input into every rank's output, a slice a leader (two-shot among
// the leaders), so one process a GPU runs kernels and none waits out
// another's time slice; right in place too, each element being one
// leader's. The other ranks only wait (finish_together).
Status run_allreduce_by_gpu_leaders(Communicator& comm, const std::vector<Handshake>& all, const Placement& where,
                                    const void* input, void* output, std::size_t count, DataType type, ReduceOp op);

// Bcast's pull where GPU leaders work for their GPU's ranks: each leader
// copies the root's buffer into every other rank's of its GPU.
Status run_bcast_by_gpu_leaders(Communicator& comm, const std::vector<Handshake>& all, const Placement& where,
                                void* buffer, std::size_t bytes, int root);

// Alltoallv's copies where GPU leaders work for their GPU's ranks: each
// leader copies every block its GPU's ranks receive. layouts holds, for
// each rank, its send offsets, receive offsets and receive bytes by peer.
Status run_alltoallv_by_gpu_leaders(Communicator& comm, const std::vector<Handshake>& all, const Placement& where,
                                    const void* send, void* recv, const std::vector<std::uint64_t>& layouts);

// The shm transport: data crosses between ranks through each rank's host
// shared-memory segment, in chunks that fit it; a barrier separates the
// steps, since no rank may read a segment before its owner filled it, nor
// refill it before every peer read it.
Status run_shm_allreduce(Communicator& comm, const Placement& where, const void* input, void* output,
                         std::size_t count, DataType type, ReduceOp op);

Status run_shm_bcast(Communicator& comm, const Placement& where, void* buffer, std::size_t bytes, int root);

// Each rank's whole send span goes to its segment at once (eligible only when
// it fits); receivers then copy their blocks out.
Status run_shm_alltoallv(Communicator& comm, const Placement& where, const void* send, std::size_t send_span,
                         const std::vector<std::uint64_t>& offsets, void* recv, const std::size_t* recv_bytes,
                         const std::size_t* recv_offsets);

// Copy-engine two-shot: for each chunk of this rank's slice, the copy engines
// pull the peers' inputs into scratch, a kernel reduces them with the local
// input into the local output, and the copy engines push the result into the
// peers' outputs. Three streams overlap the stages of successive chunks; two
// scratch slots alternate.
Status run_copy_engine_reduce(Communicator& comm, const MappedBuffers& buffers, const Placement& where,
                              std::size_t count, DataType type, ReduceOp op);

// Whether this rank can take the LL path for blocks of up to largest bytes:
// they fit the LL slots and FERRY_WORKER_MAX_BYTES.
bool ll_ready(Communicator& comm, const PeerReach& reach, const Placement& where, std::size_t largest);

// One-shot over LL or LL128 (kind) on the worker: nothing of the
// application's is mapped, and no rank reads another's buffers, so no
// closing exchange is needed.
Status run_ll_allreduce(Communicator& comm, const Placement& where, WorkKind kind, const void* input, void* output,
                        std::size_t count, DataType type, ReduceOp op);

Status run_ll_bcast(Communicator& comm, const Placement& where, void* buffer, std::size_t bytes, int root);

Status run_ll_alltoallv(Communicator& comm, const Placement& where, const void* send, const std::size_t* send_bytes,
                        const std::size_t* send_offsets, void* recv, const std::size_t* recv_bytes,
                        const std::size_t* recv_offsets);

// Makes the channels at the first call that agreed on them (collective);
// false on every rank when they cannot be made, or must not be (ranks
// sharing a GPU): the call then takes another way.
bool simple_ready(Communicator& comm, const Placement& where);

// Across machines, over the net transport (algorithms/net.cc). ring lists
// the ranks in ring order, this rank among them; buffer is this rank's
// device memory on where. The allreduce is in place: reduce-scatter, then
// allgather, around the ring.
Status run_net_ring_allreduce(Communicator& comm, NetTransport& net, const std::vector<int>& ring,
                              const Placement& where, void* buffer, std::size_t count, DataType type, ReduceOp op);
// chain[0] holds bytes in buffer; they pass along the chain in pieces, each
// rank forwarding a piece as soon as it has it.
Status run_net_chain_bcast(NetTransport& net, const std::vector<int>& chain, int me, void* buffer,
                           std::size_t bytes);

// A binary tree over n positions: parent and children as positions, -1
// where there is none.
struct TreeLinks {
  int parent = -1;
  int children[2] = {-1, -1};
};
// Tree 0 is the in-order binary tree over positions 0..n-1: the even
// positions are its leaves, and it is ceil(log2(n + 1)) levels deep. Tree 1
// is tree 0 over the positions shifted by one, so that its leaves are tree
// 0's inner positions (for odd n all but one): a double binary tree, in
// which every rank sends and receives about as much as every other.
TreeLinks tree_links(int position, int n, int tree);

// The allreduce of run_net_ring_allreduce over a double binary tree among
// ranks (listed by position): each half of the buffer is reduced up one
// tree to its root and broadcast back down, in pieces of
// FERRY_NET_CHUNK_BYTES. 2 log2(n) network steps where the ring takes
// 2 (n - 1): fewer steps for many machines and latency-bound shards.
Status run_net_tree_allreduce(Communicator& comm, NetTransport& net, const std::vector<int>& ranks,
                              const Placement& where, void* buffer, std::size_t count, DataType type, ReduceOp op);
// The bcast of run_net_chain_bcast down tree 0, rooted at ranks[0]: the
// root's bytes reach every rank in log2(n) steps; inner ranks send every
// piece twice.
Status run_net_tree_bcast(NetTransport& net, const std::vector<int>& ranks, int me, void* buffer, std::size_t bytes);

// A collective over the Simple protocol (ring, tree, chain): no rank touches
// another's buffers, so, as with LL, no closing exchange. A failure leaves
// the FIFO counters of the ranks out of step: the channels are not used
// again.
Status run_simple(Communicator& comm, const Placement& where, SimpleCollective collective, int root,
                  const void* input, void* output, std::size_t count, DataType type, ReduceOp op);

// At most one collective over the Simple protocol at a time per process and
// device. Its blocks wait for their peers' blocks, so concurrent ones (other
// communicators, MPI_THREAD_MULTIPLE) could fill the GPU with blocks that
// wait for blocks which cannot start. A call that finds the gate taken plans
// another algorithm; the ranks then disagree and stage, which is correct
// whatever order the ranks' threads arrive in.
class SimpleGate {
 public:
  SimpleGate() = default;
  SimpleGate(const SimpleGate&) = delete;
  SimpleGate& operator=(const SimpleGate&) = delete;
  ~SimpleGate() {
    if (!held_) return;
    std::lock_guard<std::mutex> lock(mutex());
    busy().erase(key_);
  }

  bool try_enter(gpu::Backend* backend, int device) {
    // The emulated device runs the steps on the calling thread: no blocks
    // to fill it with (and its tests run every rank in one process).
    if (backend->execution_site() == gpu::ExecutionSite::kHost) return true;
    std::lock_guard<std::mutex> lock(mutex());
    key_ = {backend, device};
    held_ = busy().insert(key_).second;
    return held_;
  }

 private:
  static std::mutex& mutex() {
    static std::mutex m;
    return m;
  }
  static std::set<std::pair<gpu::Backend*, int>>& busy() {
    static std::set<std::pair<gpu::Backend*, int>> devices;
    return devices;
  }
  std::pair<gpu::Backend*, int> key_{};
  bool held_ = false;
};

}  // namespace ferry::coll

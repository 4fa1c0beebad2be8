// Collectives of a communicator whose ranks span machines, by machine:
// each machine's ranks form a node communicator, where the engine's own
// algorithms run (p2p or shm), and ranks of different machines talk over the
// communicator's net transport.
//
//  - allreduce: an allreduce within each machine; then each of the first S
//    ranks of every machine (S: the fewest ranks any machine has) allreduces
//    one S-th of the buffer with the ranks of its index on the other
//    machines (a ring over the network, every network link busy at once, or
//    a double binary tree, fewer steps: the tuner's choice across machines);
//    then the machine's ranks gather the S shards;
//  - bcast: the root's machine leader (the root) and every other machine's
//    leader (its first rank) pass the buffer along a pipelined chain, or
//    down a pipelined tree, over the network; then each machine's leader
//    broadcasts it within;
//  - alltoallv: every block to or from another machine in flight at once
//    over the network, the machine's own blocks through its engine.
// The calls take the place of allreduce(), bcast() and alltoallv()
// (collectives.h) on
// such communicators, with their contract; small calls, which staging
// through the real MPI serves sooner, they decline (on every rank).
#pragma once

#include <memory>
#include <vector>

#include "engine/collectives/communicator.h"
#include "engine/collectives/tuner.h"
#include "engine/common/types.h"

namespace ferry {

class Hierarchy {
 public:
  // Collective over comm's ranks, which span machines with comm.net() set:
  // kUnavailable on every rank where the bootstrap cannot divide by machine
  // or some machine's ranks have no engine transport among them.
  static Status create(Communicator& comm, std::unique_ptr<Hierarchy>* out);

  // This machine's ranks, ordered by their rank in the whole communicator.
  Communicator& node() { return *node_; }
  int machines() const { return static_cast<int>(members_.size()); }
  int machine_of(int rank) const { return machine_of_[rank]; }
  // Its rank in its machine's node communicator.
  int local_index(int rank) const { return local_index_[rank]; }
  // The rank at index of machine.
  int rank_at(int machine, int index) const { return members_[machine][index]; }
  int machine_size(int machine) const { return static_cast<int>(members_[machine].size()); }
  // The shards an allreduce splits into: the fewest ranks any machine has.
  int shards() const { return shards_; }
  // The network between machines as the tuner prices it (tuner.h): one
  // hop's latency and a large message's bandwidth, timed between the first
  // two machines' leaders over comm's net transport at the first call that
  // asks, the same on every rank; the assumed network between two machines,
  // where the price decides nothing. Collective over comm.
  Status network(Communicator& comm, LinkCost* out);

 private:
  Hierarchy() = default;

  std::unique_ptr<Communicator> node_;
  std::vector<int> machine_of_;
  std::vector<int> local_index_;
  std::vector<std::vector<int>> members_;  // by machine, in rank order
  int shards_ = 1;
  bool network_measured_ = false;
  LinkCost network_{};
};

Status hierarchical_allreduce(Communicator& comm, Hierarchy& hierarchy, const void* send, void* recv,
                              std::size_t count, DataType type, ReduceOp op, bool eligible, bool* ran);
Status hierarchical_bcast(Communicator& comm, Hierarchy& hierarchy, void* buffer, std::size_t bytes, int root,
                          bool eligible, bool* ran);
Status hierarchical_alltoallv(Communicator& comm, Hierarchy& hierarchy, const void* send,
                              const std::size_t* send_bytes, const std::size_t* send_offsets, void* recv,
                              const std::size_t* recv_bytes, const std::size_t* recv_offsets, bool eligible,
                              bool* ran);

}  // namespace ferry

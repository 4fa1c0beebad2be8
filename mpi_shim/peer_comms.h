// Communicators of point-to-point through peer memory (peer_pt2pt.h): each
// known one has an identity every member computes alike without
// communicating (from its parent's identity and how many communicators
// were made from the parent), and knows which of its ranks are other
// processes of this machine and, where the net transport carries messages
// between machines (peer_net.h), which are processes of other machines. MPI_COMM_WORLD is known from start_comms;
// derived() and derived_from_group() add the ones made from a known one,
// forget() drops one (peer_pt2pt.h).
#pragma once

#include <mpi.h>

#include <cstdint>
#include <vector>

namespace ferry::shim::peer {

// What a call needs to know about one rank of a communicator.
struct PeerRank {
  std::uint64_t comm_id;
  int world;
  bool remote;  // on another machine: reached through the net transport
};

// A well-spread 64-bit value of a and b: the identities of communicators
// and shared segments are made with it.
std::uint64_t mix(std::uint64_t a, std::uint64_t b);

// Once every rank agreed at MPI_Init: this process's rank in
// MPI_COMM_WORLD, the machine of every world rank, and whether ranks of
// other machines are reached too (the net channel is open); registers
// MPI_COMM_WORLD.
void start_comms(int world_rank, std::vector<std::uint64_t> host_of, bool reach_remote);
// At MPI_Finalize: every communicator is forgotten.
void stop_comms();

// This process's rank in MPI_COMM_WORLD (from start_comms on).
int world_rank();

// rank of comm when it is a known communicator and rank another process of
// this machine, or of another machine that is reached.
bool peer_rank(MPI_Comm comm, int rank, PeerRank* out);

}  // namespace ferry::shim::peer

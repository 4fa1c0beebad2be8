// What a handler needs to know about a communicator and a root argument to
// tell which buffers are significant on this rank.
#pragma once

#include <mpi.h>

namespace ferry::shim {

struct CommShape {
  int rank = 0;
  int size = 0;   // local group
  int peers = 0;  // ranks the buffers are indexed by: remote group of an intercommunicator
  bool inter = false;
};

// False for MPI_COMM_NULL or a handle the real MPI rejects.
bool comm_shape(MPI_Comm comm, CommShape* shape);

// The neighbours of a process topology (cartesian: two per dimension, also
// where they are MPI_PROC_NULL; graph; distributed graph), by which the
// neighbourhood collectives index their buffers. False for a communicator
// without a topology.
bool neighbor_degrees(MPI_Comm comm, int* indegree, int* outdegree);

enum class RootRole { kRoot, kLeaf, kNone };

// False when root is not valid for the communicator.
bool root_role(const CommShape& shape, int root, RootRole* role);

}  // namespace ferry::shim

// Bootstrap over the application's own MPI, on a private duplicate of its
// communicator so that Ferry's traffic never matches the application's.
#pragma once

#include <mpi.h>

#include <memory>

#include "engine/bootstrap/bootstrap.h"

namespace ferry {

// Collective over comm (duplicates it). nullptr if the duplicate fails.
std::unique_ptr<Bootstrap> make_mpi_bootstrap(MPI_Comm comm);

// A communicator of Ferry's own (a duplicate or a split): its failures come
// back as statuses, never abort (MPI_ERRORS_RETURN), with its rank and size.
struct PrivateComm {
  MPI_Comm comm;
  int rank;
  int size;
};
PrivateComm adopt_private_comm(MPI_Comm comm);
// Frees it unless MPI has been finalized (then MPI took it down).
void free_private_comm(MPI_Comm* comm);

}  // namespace ferry

// Bootstrap over the application's own MPI, on a private duplicate of its
// communicator so that Ferry's traffic never matches the application's.
#pragma once

#include <mpi.h>

#include <memory>

#include "engine/bootstrap/bootstrap.h"

namespace ferry {

// Collective over comm (duplicates it). nullptr if the duplicate fails.
std::unique_ptr<Bootstrap> make_mpi_bootstrap(MPI_Comm comm);

}  // namespace ferry

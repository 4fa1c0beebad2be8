// The net transport's mpi provider (engine/transport/net.h): messages over
// the application's own MPI point-to-point on a private communicator, so
// whatever network the user's MPI drives carries Ferry's traffic too.
// Host memory only: the net transport stages device memory.
#pragma once

#include <mpi.h>

#include <memory>

#include "engine/transport/net.h"

namespace ferry {

// Collective over comm (duplicates it). nullptr if the duplicate fails.
std::unique_ptr<NetProvider> make_mpi_network(MPI_Comm comm);

}  // namespace ferry

// What the rest of the shim may ask about Ferry's RMA windows (rma.cc).
#pragma once

#include <mpi.h>

#include "engine/pgas/window.h"

namespace ferry::shim {

// The engine window behind win, or nullptr when win is the real MPI's.
Window* engine_window(MPI_Win win);

// MPI_Finalize: frees the window the real MPI's checks of accumulates use.
void release_verdict_window();

}  // namespace ferry::shim

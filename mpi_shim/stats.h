// Per-function counters behind FERRY_STATS: calls, bytes, and the route each
// call took. Counting is relaxed atomics; bytes are summed only when enabled.
#pragma once

#include <mpi.h>

#include <cstdint>

#include "function_ids.h"
#include "mpi_shim/route.h"

namespace ferry::shim {

bool stats_enabled();
void count_call(FunctionId id);
void count_route(FunctionId id, Route route);
void count_bytes(FunctionId id, std::int64_t count, MPI_Datatype datatype);

// Prints the table to stderr; called from MPI_Finalize when FERRY_STATS=1.
void print_stats(int rank);

}  // namespace ferry::shim

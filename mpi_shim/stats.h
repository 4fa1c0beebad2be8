// Per-function counters behind FERRY_STATS: calls, bytes, and the route each
// call took. Counting is relaxed atomics; bytes are summed only when enabled.
#pragma once

#include <mpi.h>

#include <cstdint>

#include "function_ids.h"
#include "mpi_shim/route.h"

namespace ferry::shim {

// Read once when the library loads: with FERRY_STATS off, counting costs a
// predictable branch and nothing else on the pass-through path.
extern const bool g_stats_enabled;
inline bool stats_enabled() { return g_stats_enabled; }
// FERRY_STATS or FERRY_TRACE: a wrapper counts and times every call then,
// host buffers too, instead of passing it straight through.
extern const bool g_observing;
inline bool observing() { return g_observing; }

void record_call(FunctionId id);
void record_route_taken(FunctionId id, Route route);
void record_bytes(FunctionId id, std::int64_t count, MPI_Datatype datatype);

inline void count_call(FunctionId id) {
  if (stats_enabled()) record_call(id);
}
inline void count_route(FunctionId id, Route route) {
  if (stats_enabled()) record_route_taken(id, route);
}
inline void count_bytes(FunctionId id, std::int64_t count, MPI_Datatype datatype) {
  if (observing()) record_bytes(id, count, datatype);
}

// Prints the table to stderr; called from MPI_Finalize when FERRY_STATS=1.
void print_stats(int rank);

}  // namespace ferry::shim

// The one place that decides how an intercepted call runs.
#pragma once

#include <mpi.h>

#include <initializer_list>

#include "function_ids.h"

namespace ferry::shim {

enum class Route : int {
  kEngine = 0,  // Ferry's GPU-to-GPU engine
  kStaged = 1,  // pinned host copies around the real MPI call
  kPmpi = 2,    // the real MPI, buffers untouched
};
constexpr int kRouteCount = 3;

const char* route_name(Route route);

// FERRY_ROUTE, read here and nowhere else: kAuto lets each call take its
// route; kStaged and kPmpi force one for every device buffer.
enum class ForcedRoute { kAuto, kStaged, kPmpi };
ForcedRoute forced_route();
const char* forced_route_name(ForcedRoute forced);

struct RouteDecision {
  Route route;
  const char* reason;  // for FERRY_DEBUG=TRACE and support questions
  // Whether this process had device memory in use when the route was
  // decided: if not, it takes no part in the engine's handshakes either.
  bool device_runtime = true;
};

// This rank's choice from its own buffers (MPI_IN_PLACE, MPI_BOTTOM and null
// are ignored; a gpu::CallBuffers the handler opened remembers their
// classification for the engine) and whether the engine runs this call. A
// handler that gets kEngine checks the call's arguments next and demotes it
// to kStaged if the engine does not support them, so host-only calls never
// pay for that check.
// With absolute_bottom, a buffer that is MPI_BOTTOM may name device memory
// through its datatype's absolute displacements: the call is then staged,
// and the staging classifies the memory the type names (host memory passes
// through untouched). In Open MPI and MPICH MPI_BOTTOM is the null pointer,
// so only calls whose null buffers are significant ask for that.
RouteDecision decide_route(FunctionId id, std::initializer_list<const void*> buffers, bool engine_supported,
                           bool absolute_bottom = false);

// A null send buffer with count elements of a predefined type beside a
// device receive buffer: the call is MPI_ERR_BUFFER (logged under
// FERRY_DEBUG), never MPI_IN_PLACE, for which the engine would take it.
// A derived type may name absolute addresses from MPI_BOTTOM (null too).
bool null_send_buffer(FunctionId id, const void* sendbuf, int count, MPI_Datatype type, const void* recvbuf);

// Counts the route in the stats and logs it with its reason.
void record_route(FunctionId id, const RouteDecision& decision);

// decide_route + record_route for calls the engine does not run.
RouteDecision route_call(FunctionId id, std::initializer_list<const void*> buffers, bool absolute_bottom = false);

}  // namespace ferry::shim

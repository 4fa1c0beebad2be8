// Hands a call to the engine when every rank of the communicator agrees.
//
// Ranks of one collective may pass different buffer kinds, so the engine
// route is agreed per call: in a process with a device runtime in use,
// every rank of an engine-capable collective joins a short handshake on the
// engine communicator, saying whether it can take the engine route. If any
// rank cannot, all of them fall back together (device buffers staged, host
// buffers to the real MPI), so the real MPI's collective still matches up.
#pragma once

#include <mpi.h>

#include "engine/collectives/communicator.h"
#include "mpi_shim/route.h"

namespace ferry::shim {

// The engine communicator of comm, created on first use (collective over
// comm) and freed with it. nullptr if the engine is off for comm.
Communicator* engine_communicator(MPI_Comm comm);

// Whether this rank joins the engine handshake for a collective on comm that
// it routed as decided. The same answer on every rank of comm for a uniform job.
bool engine_participates(MPI_Comm comm, const RouteDecision& decided);

// Frees every engine communicator (MPI_Finalize).
void release_engine_communicators();

// Runs `call(engine_comm, eligible, &ran)` when this rank participates. Returns
// true when the engine ran the call; *result is then the MPI result. When it
// returns false, *route says how to run the call instead, and is recorded.
template <typename EngineCall>
bool run_on_engine(FunctionId id, MPI_Comm comm, RouteDecision* route, EngineCall call, int* result);

// The MPI error class of an engine failure: ranks that disagreed
// (engine/collectives/agreement.h) get the class of the argument that
// differed (alltoallv's counts between a pair are counts); the others
// MPI_ERR_NO_MEM or MPI_ERR_OTHER.
int mpi_error_class(Status status);

int report_engine_failure(FunctionId id, MPI_Comm comm, Status status);

// An error code of class MPI_ERR_OTHER whose string names the peer that
// ended (MPI_Error_string, and the message of MPI_ERRORS_ARE_FATAL).
int peer_ended_error();

template <typename EngineCall>
bool run_on_engine(FunctionId id, MPI_Comm comm, RouteDecision* route, EngineCall call, int* result) {
  Communicator* engine = engine_participates(comm, *route) ? engine_communicator(comm) : nullptr;
  if (!engine) {
    if (route->route == Route::kEngine) *route = {Route::kStaged, "the engine is not active on this communicator"};
    record_route(id, *route);
    return false;
  }
  bool ran = false;
  const Status status = call(*engine, route->route == Route::kEngine, &ran);
  if (status != Status::kOk) {
    record_route(id, {Route::kEngine, "failed"});
    *result = report_engine_failure(id, comm, status);
    return true;
  }
  if (ran) {
    record_route(id, *route);
    *result = MPI_SUCCESS;
    return true;
  }
  if (route->route == Route::kEngine) *route = {Route::kStaged, "a peer rank cannot take the engine route for this call"};
  record_route(id, *route);
  return false;
}

}  // namespace ferry::shim

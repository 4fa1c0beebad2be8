// What the blocking receives (MPI_Recv, MPI_Mrecv) share on the staged route.
#pragma once

#include <mpi.h>

#include "mpi_shim/route.h"
#include "mpi_shim/staging.h"
#include "mpi_shim/stats.h"

namespace ferry::shim {

// pmpi(buffer, status) makes the real receive into the buffer to use; only
// the bytes that arrived are copied back where the type allows it.
template <typename PmpiCall>
int receive_staged(FunctionId id, void* buf, int count, MPI_Datatype datatype, MPI_Comm comm, MPI_Status* status,
                   PmpiCall pmpi) {
  count_bytes(id, count, datatype);
  if (route_call(id, {buf}).route == Route::kPmpi) return pmpi(buf, status);
  Extent extent;
  if (comm == MPI_COMM_NULL || !extent_of(count, datatype, &extent)) return pmpi(buf, status);
  Staging staging(id, comm);
  void* recv = staging.receive(buf, extent, datatype);
  if (staging.failed()) return staging.raise();
  MPI_Status local;
  MPI_Status* st = status == MPI_STATUS_IGNORE ? &local : status;
  const int result = pmpi(recv, st);
  if (result == MPI_SUCCESS) staging.received(*st);
  return staging.finish(result);
}

}  // namespace ferry::shim

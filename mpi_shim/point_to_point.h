// What the blocking receives (MPI_Recv, MPI_Mrecv) share on the staged route.
#pragma once

#include <mpi.h>

#include "mpi_shim/wrapper_support.h"

#include "mpi_shim/peer_pt2pt.h"
#include "mpi_shim/staged_requests.h"
#include "mpi_shim/route.h"
#include "mpi_shim/staging.h"
#include "mpi_shim/stats.h"

namespace ferry::shim {

// pmpi(buffer, status) makes the real receive into the buffer to use; only
// the bytes that arrived are copied back where the type allows it. A
// receive that matched a marker then gets its data (peer_pt2pt.h), unless
// check_markers is false (a matched probe took care of that).
template <typename PmpiCall>
int receive_staged(FunctionId id, void* buf, int count, MPI_Datatype datatype, MPI_Comm comm, MPI_Status* status,
                   PmpiCall pmpi, bool check_markers = true) {
  count_bytes(id, count, datatype);
  MPI_Status local;
  MPI_Status* st = status == MPI_STATUS_IGNORE ? &local : status;
  const bool checked = check_markers && peer::checks_receives(comm);
  auto check = [&](int result) {
    if (result != MPI_SUCCESS || !checked) return result;
    const int received = peer::after_receive(comm, buf, count, datatype, st);
    return received == MPI_SUCCESS ? received : raise_error(comm, received);
  };
  if (route_call(id, {buf}, true).route == Route::kPmpi) return check(pmpi(buf, checked ? st : status));
  Extent extent;
  if (comm == MPI_COMM_NULL || !extent_of(count, datatype, &extent)) return check(pmpi(buf, checked ? st : status));
  Staging staging(id, comm);
  void* recv = staging.receive(buf, extent, datatype);
  if (staging.failed()) return staging.raise();
  const int result = pmpi(recv, st);
  if (result == MPI_SUCCESS) staging.received(*st);
  return check(staging.finish(result));
}

// A send's way out: through peer memory when it can (mode: how its marker
// goes; kNone for a send mode that cannot, MPI_Bsend's), else the envelope
// of an empty message first, then otherwise(). A nonblocking send with an
// envelope cannot be cancelled.
template <typename Otherwise>
int send_through(FunctionId id, peer::Mode mode, const void* buf, int count, MPI_Datatype type, int dest, int tag,
                 MPI_Comm comm, MPI_Request* request, Otherwise otherwise) {
  if (!peer::active()) return otherwise();
  if (mode != peer::Mode::kNone) {
    bool handled = false;
    const int result = peer::send(id, mode, buf, count, type, dest, tag, comm, request, &handled);
    if (handled) {
      count_bytes(id, count, type);
      if (result == MPI_SUCCESS && request) track_uncancellable(*request);
      return result;
    }
  }
  bool announced = false;
  const int rc = peer::before_send(count, type, dest, tag, comm, &announced);
  if (rc != MPI_SUCCESS) return raise_error(comm, rc);
  const int result = otherwise();
  if (result == MPI_SUCCESS && announced && request) track_uncancellable(*request);
  return result;
}

}  // namespace ferry::shim

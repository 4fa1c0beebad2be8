// Requests on the staged route: the host copies behind a nonblocking or
// persistent call on device buffers stay with its MPI request, in the
// request registry (request_registry.h), until the call that completes it
// (any Wait or Test, or MPI_Request_get_status) copies the outputs back.
// The request itself is always the real MPI's.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <memory>
#include <vector>

#include "mpi_shim/peer_pt2pt.h"
#include "mpi_shim/request_registry.h"
#include "mpi_shim/route.h"
#include "mpi_shim/staging.h"
#include "mpi_shim/stats.h"

namespace ferry::shim {

// A receive that may match a marker of a send through peer memory
// (peer_pt2pt.h): checked when it completes. comm == MPI_COMM_NULL: none.
struct CheckedReceive {
  MPI_Comm comm = MPI_COMM_NULL;
  void* buf = nullptr;
  int count = 0;
  MPI_Datatype type = MPI_DATATYPE_NULL;
  // MPI_COMM_NULL is not a null pointer in every MPI.
  bool on() const { return comm != MPI_COMM_NULL; }
};

inline CheckedReceive checked_receive(MPI_Comm comm, void* buf, int count, MPI_Datatype type) {
  if (!peer::checks_receives(comm)) return {};
  return CheckedReceive{comm, buf, count, type};
}

// How a staged call ends once the real MPI call returned mpi_result. With no
// request (a blocking call), or a request the real MPI completed at once,
// the outputs are copied back now. Otherwise the staging goes with *request
// when anything was staged and the call succeeded; a persistent request
// starts inactive. A point-to-point receive copies back only what arrived
// (Staging::received).
// A checked receive is tracked even when nothing was staged. One not
// cancellable: MPI_Cancel of it does nothing, and its status is never asked
// whether it was.
int end_staged(Staging& staging, int mpi_result, MPI_Request* request, Lifetime lifetime = Lifetime::kOnce,
               bool receive = false, const CheckedReceive& checked = {}, bool cancellable = true);

// A receive into a buffer that was not staged, checked when it completes
// (never one from MPI_PROC_NULL: Open MPI shares the request of every such
// receive).
void track_checked_receive(MPI_Request request, const CheckedReceive& checked, Lifetime lifetime);

// MPI_Isendrecv(_replace) posted as a receive and a send apart, which a
// checked receive needs: its status must be its message's, and MPICH leaves
// an MPI_Isendrecv's unwritten. The user's handle is receive, completed
// only once send (which reads send_copy when that is not empty) is too;
// staging's outputs are delivered whole. Not cancellable.
void track_apart(MPI_Request receive, MPI_Request send, std::unique_ptr<Staging> staging,
                 std::vector<std::byte> send_copy, const CheckedReceive& checked);

// result, of the real MPI's call on the user's own buffers (nothing
// staged); on success its receive, when checked, is tracked.
inline int unstaged_result(int result, MPI_Request* request, const CheckedReceive& checked, Lifetime lifetime) {
  if (result == MPI_SUCCESS && checked.on() && request) track_checked_receive(*request, checked, lifetime);
  return result;
}

// A point-to-point call with one buffer that returns a request: Isend and
// Irecv and their kin, the persistent inits, Imrecv. pmpi(buffer) makes the
// real call on the buffer to use.
template <typename PmpiCall>
int post_staged(FunctionId id, void* buf, int count, MPI_Datatype datatype, MPI_Comm comm, MPI_Request* request,
                bool receive, Lifetime lifetime, PmpiCall pmpi, bool check_markers = true) {
  count_bytes(id, count, datatype);
  const CheckedReceive checked =
      receive && check_markers ? checked_receive(comm, buf, count, datatype) : CheckedReceive{};
  auto unstaged = [&] { return unstaged_result(pmpi(buf), request, checked, lifetime); };
  if (route_call(id, {buf}, true).route == Route::kPmpi) return unstaged();
  Extent extent;
  if (comm == MPI_COMM_NULL || !request || !extent_of(count, datatype, &extent)) return unstaged();
  Staging staging(id, comm);
  // A persistent send copies here and again at every MPI_Start.
  void* staged = receive ? staging.receive(buf, extent, datatype) : const_cast<void*>(staging.in(buf, extent));
  if (staging.failed()) return staging.raise();
  return end_staged(staging, pmpi(staged), request, lifetime, receive, checked);
}

}  // namespace ferry::shim

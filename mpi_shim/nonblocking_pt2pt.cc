// The nonblocking point-to-point calls: through peer memory where the send
// can go there (point_to_point.h), else staged (staged_requests.h), else the
// real MPI's as they are. MPI 4.0's MPI_Isendrecv(_replace) are staged, their
// send announced to a peer that checks receives (peer_pt2pt.h), and not
// cancellable: MPICH leaves their statuses unwritten, so a staged one's
// copies never depend on a status.
#include "handlers.h"
#include "mpi_shim/point_to_point.h"
#include "mpi_shim/staged_requests.h"

namespace ferry::shim {

int handle_Isend(const void* buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm,
                 MPI_Request* request) {
  return send_through(FunctionId::kIsend, peer::Mode::kStandard, buf, count, datatype, dest, tag, comm, request, [&] {
    return post_staged(FunctionId::kIsend, const_cast<void*>(buf), count, datatype, comm, request, false,
                       Lifetime::kOnce,
                       [&](void* b) { return PMPI_Isend(b, count, datatype, dest, tag, comm, request); });
  });
}

int handle_Issend(const void* buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm,
                  MPI_Request* request) {
  return send_through(FunctionId::kIssend, peer::Mode::kSynchronous, buf, count, datatype, dest, tag, comm, request, [&] {
    return post_staged(FunctionId::kIssend, const_cast<void*>(buf), count, datatype, comm, request, false,
                       Lifetime::kOnce,
                       [&](void* b) { return PMPI_Issend(b, count, datatype, dest, tag, comm, request); });
  });
}

int handle_Ibsend(const void* buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm,
                  MPI_Request* request) {
  return send_through(FunctionId::kIbsend, peer::Mode::kNone, buf, count, datatype, dest, tag, comm, request, [&] {
    return post_staged(FunctionId::kIbsend, const_cast<void*>(buf), count, datatype, comm, request, false,
                       Lifetime::kOnce,
                       [&](void* b) { return PMPI_Ibsend(b, count, datatype, dest, tag, comm, request); });
  });
}

int handle_Irsend(const void* buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm,
                  MPI_Request* request) {
  return send_through(FunctionId::kIrsend, peer::Mode::kReady, buf, count, datatype, dest, tag, comm, request, [&] {
    return post_staged(FunctionId::kIrsend, const_cast<void*>(buf), count, datatype, comm, request, false,
                       Lifetime::kOnce,
                       [&](void* b) { return PMPI_Irsend(b, count, datatype, dest, tag, comm, request); });
  });
}

int handle_Irecv(void* buf, int count, MPI_Datatype datatype, int source, int tag, MPI_Comm comm,
                 MPI_Request* request) {
  return post_staged(
      FunctionId::kIrecv, buf, count, datatype, comm, request, true, Lifetime::kOnce,
      [&](void* b) { return PMPI_Irecv(b, count, datatype, source, tag, comm, request); }, source != MPI_PROC_NULL);
}

#if defined(FERRY_MPI_40)
int handle_Isendrecv(const void* sendbuf, int sendcount, MPI_Datatype sendtype, int dest, int sendtag, void* recvbuf,
                     int recvcount, MPI_Datatype recvtype, int source, int recvtag, MPI_Comm comm,
                     MPI_Request* request) {
  const FunctionId id = FunctionId::kIsendrecv;
  auto pmpi = [&](const void* s, void* r) {
    return PMPI_Isendrecv(s, sendcount, sendtype, dest, sendtag, r, recvcount, recvtype, source, recvtag, comm,
                          request);
  };
  return send_through(id, peer::Mode::kNone, sendbuf, sendcount, sendtype, dest, sendtag, comm, request, [&] {
    count_bytes(id, sendcount, sendtype);
    const CheckedReceive checked =
        source != MPI_PROC_NULL ? checked_receive(comm, recvbuf, recvcount, recvtype) : CheckedReceive{};
    auto unstaged = [&] { return unstaged_result(pmpi(sendbuf, recvbuf), request, checked, Lifetime::kOnce); };
    if (route_call(id, {sendbuf, recvbuf}, true).route == Route::kPmpi) return unstaged();
    Extent send_extent, recv_extent;
    if (comm == MPI_COMM_NULL || !request || !extent_of(sendcount, sendtype, &send_extent) ||
        !extent_of(recvcount, recvtype, &recv_extent))
      return unstaged();
    // The receive buffer goes both ways whole, never cut to the status's
    // count: MPICH leaves the status of this request as it was.
    Staging staging(id, comm);
    const void* send = staging.in(sendbuf, send_extent);
    void* recv = staging.inout(recvbuf, recv_extent);
    if (staging.failed()) return staging.raise();
    return end_staged(staging, pmpi(send, recv), request, Lifetime::kOnce, false, checked, false);
  });
}

// The buffer goes both ways whole: the bytes past a shorter message keep
// what was sent from them.
int handle_Isendrecv_replace(void* buf, int count, MPI_Datatype datatype, int dest, int sendtag, int source,
                             int recvtag, MPI_Comm comm, MPI_Request* request) {
  const FunctionId id = FunctionId::kIsendrecv_replace;
  auto pmpi = [&](void* b) {
    return PMPI_Isendrecv_replace(b, count, datatype, dest, sendtag, source, recvtag, comm, request);
  };
  return send_through(id, peer::Mode::kNone, buf, count, datatype, dest, sendtag, comm, request, [&] {
    count_bytes(id, count, datatype);
    const CheckedReceive checked =
        source != MPI_PROC_NULL ? checked_receive(comm, buf, count, datatype) : CheckedReceive{};
    auto unstaged = [&] { return unstaged_result(pmpi(buf), request, checked, Lifetime::kOnce); };
    if (route_call(id, {buf}, true).route == Route::kPmpi) return unstaged();
    Extent extent;
    if (comm == MPI_COMM_NULL || !request || !extent_of(count, datatype, &extent)) return unstaged();
    Staging staging(id, comm);
    void* staged = staging.inout(buf, extent);
    if (staging.failed()) return staging.raise();
    return end_staged(staging, pmpi(staged), request, Lifetime::kOnce, false, checked, false);
  });
}
#endif  // FERRY_MPI_40

}  // namespace ferry::shim

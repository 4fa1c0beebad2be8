// The nonblocking point-to-point calls on one buffer: through peer memory
// where the send can go there (point_to_point.h), else staged
// (staged_requests.h), else the real MPI's as they are.
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

}  // namespace ferry::shim

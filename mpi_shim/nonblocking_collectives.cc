// Nonblocking collectives on the staged route (MPI_Iallreduce, MPI_Ibcast
// and MPI_Ialltoallv go to the engine where they can: nonblocking_engine.h): device inputs are copied to
// host memory when the call is made, and the request returned is the real
// MPI's, made on the host copies, so it mixes freely with other requests in
// any completion call; that call copies the device outputs back.
// (MPI_Ibarrier has no buffers and is not intercepted. The persistent
// collectives without an engine route are in persistent_collectives.cc.)
#include "handlers.h"
#include "mpi_shim/collective_staging.h"
#include "mpi_shim/nonblocking_engine.h"
#include "mpi_shim/route.h"
#include "mpi_shim/wrapper_support.h"

namespace ferry::shim {

int handle_Iallreduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
                      MPI_Comm comm, MPI_Request* request) {
  if (null_send_buffer(FunctionId::kIallreduce, sendbuf, count, datatype, recvbuf))
    return raise_error(comm, MPI_ERR_BUFFER);
  int result = MPI_SUCCESS;
  if (nbc::start_allreduce(sendbuf, recvbuf, count, datatype, op, comm, request, &result)) return result;
  return reduce_like(FunctionId::kIallreduce, sendbuf, recvbuf, count, datatype, op, comm, request, false,
                     [&](const void* s, void* r) { return PMPI_Iallreduce(s, r, count, datatype, op, comm, request); });
}

int handle_Iscan(const void* sendbuf, void* recvbuf, int count, MPI_Datatype datatype, MPI_Op op, MPI_Comm comm,
                 MPI_Request* request) {
  return reduce_like(FunctionId::kIscan, sendbuf, recvbuf, count, datatype, op, comm, request, false,
                     [&](const void* s, void* r) { return PMPI_Iscan(s, r, count, datatype, op, comm, request); });
}

int handle_Iexscan(const void* sendbuf, void* recvbuf, int count, MPI_Datatype datatype, MPI_Op op, MPI_Comm comm,
                   MPI_Request* request) {
  // As in Exscan: rank 0's receive buffer keeps its bytes.
  return reduce_like(FunctionId::kIexscan, sendbuf, recvbuf, count, datatype, op, comm, request, true,
                     [&](const void* s, void* r) { return PMPI_Iexscan(s, r, count, datatype, op, comm, request); });
}

int handle_Ireduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype datatype, MPI_Op op, int root,
                   MPI_Comm comm, MPI_Request* request) {
  return rooted_reduce_like(
      FunctionId::kIreduce, sendbuf, recvbuf, count, datatype, op, root, comm, request,
      [&](const void* s, void* r) { return PMPI_Ireduce(s, r, count, datatype, op, root, comm, request); });
}

int handle_Ibcast(void* buffer, int count, MPI_Datatype datatype, int root, MPI_Comm comm, MPI_Request* request) {
  int result = MPI_SUCCESS;
  if (nbc::start_bcast(buffer, count, datatype, root, comm, request, &result)) return result;
  const FunctionId id = FunctionId::kIbcast;
  count_bytes(id, count, datatype);
  return bcast_like(id, route_call(id, {buffer}, true).route, buffer, count, datatype, root, comm, request,
                    [&](void* b) { return PMPI_Ibcast(b, count, datatype, root, comm, request); });
}

int handle_Iallgather(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, int recvcount,
                      MPI_Datatype recvtype, MPI_Comm comm, MPI_Request* request) {
  count_bytes(FunctionId::kIallgather, sendcount, sendtype);
  return exchange_like(FunctionId::kIallgather, sendbuf, recvbuf, comm, request, elements(sendcount, sendtype),
                       per_peer(recvcount, recvtype), [&](const void* s, void* r) {
                         return PMPI_Iallgather(s, sendcount, sendtype, r, recvcount, recvtype, comm, request);
                       });
}

int handle_Iallgatherv(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
                       const int* recvcounts, const int* displs, MPI_Datatype recvtype, MPI_Comm comm,
                       MPI_Request* request) {
  count_bytes(FunctionId::kIallgatherv, sendcount, sendtype);
  return exchange_like(FunctionId::kIallgatherv, sendbuf, recvbuf, comm, request, elements(sendcount, sendtype),
                       blocks(recvcounts, displs, recvtype), [&](const void* s, void* r) {
                         return PMPI_Iallgatherv(s, sendcount, sendtype, r, recvcounts, displs, recvtype, comm,
                                                 request);
                       });
}

int handle_Igather(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, int recvcount,
                   MPI_Datatype recvtype, int root, MPI_Comm comm, MPI_Request* request) {
  return gather_like(FunctionId::kIgather, sendbuf, sendcount, sendtype, recvbuf, root, comm, request,
                     per_peer(recvcount, recvtype), [&](const void* s, void* r) {
                       return PMPI_Igather(s, sendcount, sendtype, r, recvcount, recvtype, root, comm, request);
                     });
}

int handle_Igatherv(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, const int* recvcounts,
                    const int* displs, MPI_Datatype recvtype, int root, MPI_Comm comm, MPI_Request* request) {
  return gather_like(FunctionId::kIgatherv, sendbuf, sendcount, sendtype, recvbuf, root, comm, request,
                     blocks(recvcounts, displs, recvtype), [&](const void* s, void* r) {
                       return PMPI_Igatherv(s, sendcount, sendtype, r, recvcounts, displs, recvtype, root, comm,
                                            request);
                     });
}

int handle_Iscatter(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, int recvcount,
                    MPI_Datatype recvtype, int root, MPI_Comm comm, MPI_Request* request) {
  return scatter_like(FunctionId::kIscatter, sendbuf, recvbuf, recvcount, recvtype, root, comm, request,
                      per_peer(sendcount, sendtype), [&](const void* s, void* r) {
                        return PMPI_Iscatter(s, sendcount, sendtype, r, recvcount, recvtype, root, comm, request);
                      });
}

int handle_Iscatterv(const void* sendbuf, const int* sendcounts, const int* displs, MPI_Datatype sendtype,
                     void* recvbuf, int recvcount, MPI_Datatype recvtype, int root, MPI_Comm comm,
                     MPI_Request* request) {
  return scatter_like(FunctionId::kIscatterv, sendbuf, recvbuf, recvcount, recvtype, root, comm, request,
                      blocks(sendcounts, displs, sendtype), [&](const void* s, void* r) {
                        return PMPI_Iscatterv(s, sendcounts, displs, sendtype, r, recvcount, recvtype, root, comm,
                                              request);
                      });
}

int handle_Ialltoall(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, int recvcount,
                     MPI_Datatype recvtype, MPI_Comm comm, MPI_Request* request) {
  const FunctionId id = FunctionId::kIalltoall;
  return exchange_like(id, sendbuf, recvbuf, comm, request, counted_per_peer(id, sendcount, sendtype),
                       per_peer(recvcount, recvtype), [&](const void* s, void* r) {
                         return PMPI_Ialltoall(s, sendcount, sendtype, r, recvcount, recvtype, comm, request);
                       });
}

int handle_Ialltoallv(const void* sendbuf, const int* sendcounts, const int* sdispls, MPI_Datatype sendtype,
                      void* recvbuf, const int* recvcounts, const int* rdispls, MPI_Datatype recvtype, MPI_Comm comm,
                      MPI_Request* request) {
  int result = MPI_SUCCESS;
  if (nbc::start_alltoallv(sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls, recvtype, comm,
                           request, &result))
    return result;
  const FunctionId id = FunctionId::kIalltoallv;
  return exchange_like(id, sendbuf, recvbuf, comm, request, counted_blocks(id, sendcounts, sdispls, sendtype),
                       blocks(recvcounts, rdispls, recvtype), [&](const void* s, void* r) {
                         return PMPI_Ialltoallv(s, sendcounts, sdispls, sendtype, r, recvcounts, rdispls, recvtype,
                                                comm, request);
                       });
}

int handle_Ireduce_scatter_block(const void* sendbuf, void* recvbuf, int recvcount, MPI_Datatype datatype,
                                 MPI_Op op, MPI_Comm comm, MPI_Request* request) {
  return reduce_scatter_block_like(
      FunctionId::kIreduce_scatter_block, sendbuf, recvbuf, recvcount, datatype, op, comm, request,
      [&](const void* s, void* r) {
        return PMPI_Ireduce_scatter_block(s, r, recvcount, datatype, op, comm, request);
      });
}

int handle_Ireduce_scatter(const void* sendbuf, void* recvbuf, const int* recvcounts, MPI_Datatype datatype,
                           MPI_Op op, MPI_Comm comm, MPI_Request* request) {
  return reduce_scatter_counts_like(
      FunctionId::kIreduce_scatter, sendbuf, recvbuf, recvcounts, datatype, op, comm, request,
      [&](const void* s, void* r) { return PMPI_Ireduce_scatter(s, r, recvcounts, datatype, op, comm, request); });
}

int handle_Ialltoallw(const void* sendbuf, const int* sendcounts, const int* sdispls, const MPI_Datatype* sendtypes,
                      void* recvbuf, const int* recvcounts, const int* rdispls, const MPI_Datatype* recvtypes,
                      MPI_Comm comm, MPI_Request* request) {
  const FunctionId id = FunctionId::kIalltoallw;
  return exchange_like(id, sendbuf, recvbuf, comm, request, typed_blocks(id, sendcounts, sdispls, sendtypes, true),
                       typed_blocks(id, recvcounts, rdispls, recvtypes, false), [&](const void* s, void* r) {
                         return PMPI_Ialltoallw(s, sendcounts, sdispls, sendtypes, r, recvcounts, rdispls,
                                                recvtypes, comm, request);
                       });
}

// Persistent collectives: Open MPI 4.1 has MPI 4.0's as MPIX_ extensions.
// Each MPI_Start runs the nonblocking call (nonblocking_engine.h).
int handle_Allreduce_init(const void* sendbuf, void* recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
                          MPI_Comm comm, MPI_Info, MPI_Request* request) {
  if (null_send_buffer(FunctionId::kAllreduce_init, sendbuf, count, datatype, recvbuf))
    return raise_error(comm, MPI_ERR_BUFFER);
  return nbc::init_allreduce(sendbuf, recvbuf, count, datatype, op, comm, request);
}

int handle_Bcast_init(void* buffer, int count, MPI_Datatype datatype, int root, MPI_Comm comm, MPI_Info,
                      MPI_Request* request) {
  return nbc::init_bcast(buffer, count, datatype, root, comm, request);
}

int handle_Alltoallv_init(const void* sendbuf, const int* sendcounts, const int* sdispls, MPI_Datatype sendtype,
                          void* recvbuf, const int* recvcounts, const int* rdispls, MPI_Datatype recvtype,
                          MPI_Comm comm, MPI_Info, MPI_Request* request) {
  return nbc::init_alltoallv(sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls, recvtype, comm,
                             request);
}

}  // namespace ferry::shim

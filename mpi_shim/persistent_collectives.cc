// The persistent collectives of Open MPI 4.1's mpi-ext.h (MPI 4.0's, as
// MPIX_ extensions) that have no engine route: staged on the real MPI's
// persistent request. Every MPI_Start copies the device inputs anew and every
// completion of a start copies the outputs back (staged_requests.h). Allreduce,
// Bcast and Alltoallv are in nonblocking_collectives.cc.
#include "handlers.h"
#include "mpi_shim/collective_staging.h"

namespace ferry::shim {
namespace {

constexpr Lifetime kPersistent = Lifetime::kPersistent;

}  // namespace

int handle_Reduce_init(const void* sendbuf, void* recvbuf, int count, MPI_Datatype datatype, MPI_Op op, int root,
                       MPI_Comm comm, MPI_Info info, MPI_Request* request) {
  return rooted_reduce_like(
      FunctionId::kReduce_init, sendbuf, recvbuf, count, datatype, op, root, comm, {request, kPersistent},
      [&](const void* s, void* r) { return FERRY_PMPI_PERSISTENT_COLLECTIVE(Reduce_init)(s, r, count, datatype, op, root, comm, info, request); });
}

int handle_Scan_init(const void* sendbuf, void* recvbuf, int count, MPI_Datatype datatype, MPI_Op op, MPI_Comm comm,
                     MPI_Info info, MPI_Request* request) {
  return reduce_like(
      FunctionId::kScan_init, sendbuf, recvbuf, count, datatype, op, comm, {request, kPersistent}, false,
      [&](const void* s, void* r) { return FERRY_PMPI_PERSISTENT_COLLECTIVE(Scan_init)(s, r, count, datatype, op, comm, info, request); });
}

int handle_Exscan_init(const void* sendbuf, void* recvbuf, int count, MPI_Datatype datatype, MPI_Op op, MPI_Comm comm,
                       MPI_Info info, MPI_Request* request) {
  // As in Exscan: rank 0's receive buffer keeps its bytes.
  return reduce_like(
      FunctionId::kExscan_init, sendbuf, recvbuf, count, datatype, op, comm, {request, kPersistent}, true,
      [&](const void* s, void* r) { return FERRY_PMPI_PERSISTENT_COLLECTIVE(Exscan_init)(s, r, count, datatype, op, comm, info, request); });
}

int handle_Allgather_init(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, int recvcount,
                          MPI_Datatype recvtype, MPI_Comm comm, MPI_Info info, MPI_Request* request) {
  count_bytes(FunctionId::kAllgather_init, sendcount, sendtype);
  return exchange_like(FunctionId::kAllgather_init, sendbuf, recvbuf, comm, {request, kPersistent},
                       elements(sendcount, sendtype), per_peer(recvcount, recvtype), [&](const void* s, void* r) {
                         return FERRY_PMPI_PERSISTENT_COLLECTIVE(Allgather_init)(s, sendcount, sendtype, r, recvcount, recvtype, comm, info,
                                                     request);
                       });
}

int handle_Allgatherv_init(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
                           const int* recvcounts, const int* displs, MPI_Datatype recvtype, MPI_Comm comm,
                           MPI_Info info, MPI_Request* request) {
  count_bytes(FunctionId::kAllgatherv_init, sendcount, sendtype);
  return exchange_like(
      FunctionId::kAllgatherv_init, sendbuf, recvbuf, comm, {request, kPersistent}, elements(sendcount, sendtype),
      blocks(recvcounts, displs, recvtype), [&](const void* s, void* r) {
        return FERRY_PMPI_PERSISTENT_COLLECTIVE(Allgatherv_init)(s, sendcount, sendtype, r, recvcounts, displs, recvtype, comm, info, request);
      });
}

int handle_Gather_init(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, int recvcount,
                       MPI_Datatype recvtype, int root, MPI_Comm comm, MPI_Info info, MPI_Request* request) {
  return gather_like(FunctionId::kGather_init, sendbuf, sendcount, sendtype, recvbuf, root, comm,
                     {request, kPersistent}, per_peer(recvcount, recvtype), [&](const void* s, void* r) {
                       return FERRY_PMPI_PERSISTENT_COLLECTIVE(Gather_init)(s, sendcount, sendtype, r, recvcount, recvtype, root, comm, info,
                                                request);
                     });
}

int handle_Gatherv_init(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, const int* recvcounts,
                        const int* displs, MPI_Datatype recvtype, int root, MPI_Comm comm, MPI_Info info,
                        MPI_Request* request) {
  return gather_like(FunctionId::kGatherv_init, sendbuf, sendcount, sendtype, recvbuf, root, comm,
                     {request, kPersistent}, blocks(recvcounts, displs, recvtype), [&](const void* s, void* r) {
                       return FERRY_PMPI_PERSISTENT_COLLECTIVE(Gatherv_init)(s, sendcount, sendtype, r, recvcounts, displs, recvtype, root, comm,
                                                 info, request);
                     });
}

int handle_Scatter_init(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, int recvcount,
                        MPI_Datatype recvtype, int root, MPI_Comm comm, MPI_Info info, MPI_Request* request) {
  return scatter_like(FunctionId::kScatter_init, sendbuf, recvbuf, recvcount, recvtype, root, comm,
                      {request, kPersistent}, per_peer(sendcount, sendtype), [&](const void* s, void* r) {
                        return FERRY_PMPI_PERSISTENT_COLLECTIVE(Scatter_init)(s, sendcount, sendtype, r, recvcount, recvtype, root, comm, info,
                                                  request);
                      });
}

int handle_Scatterv_init(const void* sendbuf, const int* sendcounts, const int* displs, MPI_Datatype sendtype,
                         void* recvbuf, int recvcount, MPI_Datatype recvtype, int root, MPI_Comm comm, MPI_Info info,
                         MPI_Request* request) {
  return scatter_like(FunctionId::kScatterv_init, sendbuf, recvbuf, recvcount, recvtype, root, comm,
                      {request, kPersistent}, blocks(sendcounts, displs, sendtype), [&](const void* s, void* r) {
                        return FERRY_PMPI_PERSISTENT_COLLECTIVE(Scatterv_init)(s, sendcounts, displs, sendtype, r, recvcount, recvtype, root, comm,
                                                   info, request);
                      });
}

int handle_Alltoall_init(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, int recvcount,
                         MPI_Datatype recvtype, MPI_Comm comm, MPI_Info info, MPI_Request* request) {
  count_bytes(FunctionId::kAlltoall_init, sendcount, sendtype);
  return exchange_like(FunctionId::kAlltoall_init, sendbuf, recvbuf, comm, {request, kPersistent},
                       per_peer(sendcount, sendtype), per_peer(recvcount, recvtype), [&](const void* s, void* r) {
                         return FERRY_PMPI_PERSISTENT_COLLECTIVE(Alltoall_init)(s, sendcount, sendtype, r, recvcount, recvtype, comm, info,
                                                    request);
                       });
}

int handle_Alltoallw_init(const void* sendbuf, const int* sendcounts, const int* sdispls, const MPI_Datatype* sendtypes,
                          void* recvbuf, const int* recvcounts, const int* rdispls, const MPI_Datatype* recvtypes,
                          MPI_Comm comm, MPI_Info info, MPI_Request* request) {
  const FunctionId id = FunctionId::kAlltoallw_init;
  return exchange_like(id, sendbuf, recvbuf, comm, {request, kPersistent},
                       typed_blocks(id, sendcounts, sdispls, sendtypes, true),
                       typed_blocks(id, recvcounts, rdispls, recvtypes, false), [&](const void* s, void* r) {
                         return FERRY_PMPI_PERSISTENT_COLLECTIVE(Alltoallw_init)(s, sendcounts, sdispls, sendtypes, r, recvcounts, rdispls,
                                                     recvtypes, comm, info, request);
                       });
}

int handle_Reduce_scatter_init(const void* sendbuf, void* recvbuf, const int* recvcounts, MPI_Datatype datatype,
                               MPI_Op op, MPI_Comm comm, MPI_Info info, MPI_Request* request) {
  return reduce_scatter_counts_like(FunctionId::kReduce_scatter_init, sendbuf, recvbuf, recvcounts, datatype, op, comm,
                                    {request, kPersistent}, [&](const void* s, void* r) {
                                      return FERRY_PMPI_PERSISTENT_COLLECTIVE(Reduce_scatter_init)(s, r, recvcounts, datatype, op, comm, info,
                                                                       request);
                                    });
}

int handle_Reduce_scatter_block_init(const void* sendbuf, void* recvbuf, int recvcount, MPI_Datatype datatype,
                                     MPI_Op op, MPI_Comm comm, MPI_Info info, MPI_Request* request) {
  return reduce_scatter_block_like(FunctionId::kReduce_scatter_block_init, sendbuf, recvbuf, recvcount, datatype, op,
                                   comm, {request, kPersistent}, [&](const void* s, void* r) {
                                     return FERRY_PMPI_PERSISTENT_COLLECTIVE(Reduce_scatter_block_init)(s, r, recvcount, datatype, op, comm, info,
                                                                            request);
                                   });
}

}  // namespace ferry::shim

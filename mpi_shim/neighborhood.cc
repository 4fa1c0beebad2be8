// Neighbourhood collectives on cartesian, graph and distributed-graph
// communicators, blocking, nonblocking and persistent: staged. The send side
// is indexed by the outgoing neighbours, the receive side by the incoming
// ones; neither may be MPI_IN_PLACE.
#include "handlers.h"
#include "mpi_shim/collective_staging.h"

namespace ferry::shim {
namespace {

// A side's extent by the rules of side(shape, extent), with shape.peers the
// neighbours that side is indexed by. False without a topology: the real MPI
// then reports the error.
template <typename Side>
auto to_neighbors(MPI_Comm comm, bool outgoing, Side side) {
  return [=](const CommShape& shape, Extent* e) {
    int indegree = 0, outdegree = 0;
    if (!neighbor_degrees(comm, &indegree, &outdegree)) return false;
    CommShape neighbors = shape;
    neighbors.peers = outgoing ? outdegree : indegree;
    return side(neighbors, e);
  };
}

template <typename PmpiCall>
int allgather(FunctionId id, const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, int recvcount,
              MPI_Datatype recvtype, MPI_Comm comm, CallRequest request, PmpiCall pmpi) {
  count_bytes(id, sendcount, sendtype);
  return exchange_like(id, sendbuf, recvbuf, comm, request, elements(sendcount, sendtype),
                       to_neighbors(comm, false, per_peer(recvcount, recvtype)), pmpi);
}

template <typename PmpiCall>
int allgatherv(FunctionId id, const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
               const int* recvcounts, const int* displs, MPI_Datatype recvtype, MPI_Comm comm, CallRequest request,
               PmpiCall pmpi) {
  count_bytes(id, sendcount, sendtype);
  return exchange_like(id, sendbuf, recvbuf, comm, request, elements(sendcount, sendtype),
                       to_neighbors(comm, false, blocks(recvcounts, displs, recvtype)), pmpi);
}

template <typename PmpiCall>
int alltoall(FunctionId id, const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, int recvcount,
             MPI_Datatype recvtype, MPI_Comm comm, CallRequest request, PmpiCall pmpi) {
  return exchange_like(id, sendbuf, recvbuf, comm, request,
                       to_neighbors(comm, true,
                                    [=](const CommShape& shape, Extent* e) {
                                      count_bytes(id, static_cast<std::int64_t>(sendcount) * shape.peers, sendtype);
                                      return per_peer(sendcount, sendtype)(shape, e);
                                    }),
                       to_neighbors(comm, false, per_peer(recvcount, recvtype)), pmpi);
}

template <typename PmpiCall>
int alltoallv(FunctionId id, const void* sendbuf, const int* sendcounts, const int* sdispls, MPI_Datatype sendtype,
              void* recvbuf, const int* recvcounts, const int* rdispls, MPI_Datatype recvtype, MPI_Comm comm,
              CallRequest request, PmpiCall pmpi) {
  return exchange_like(id, sendbuf, recvbuf, comm, request,
                       to_neighbors(comm, true, counted_blocks(id, sendcounts, sdispls, sendtype)),
                       to_neighbors(comm, false, blocks(recvcounts, rdispls, recvtype)), pmpi);
}

template <typename PmpiCall>
int alltoallw(FunctionId id, const void* sendbuf, const int* sendcounts, const MPI_Aint* sdispls,
              const MPI_Datatype* sendtypes, void* recvbuf, const int* recvcounts, const MPI_Aint* rdispls,
              const MPI_Datatype* recvtypes, MPI_Comm comm, CallRequest request, PmpiCall pmpi) {
  return exchange_like(id, sendbuf, recvbuf, comm, request,
                       to_neighbors(comm, true, typed_blocks(id, sendcounts, sdispls, sendtypes, true)),
                       to_neighbors(comm, false, typed_blocks(id, recvcounts, rdispls, recvtypes, false)), pmpi);
}

constexpr Lifetime kPersistent = Lifetime::kPersistent;

}  // namespace

int handle_Neighbor_allgather(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, int recvcount,
                              MPI_Datatype recvtype, MPI_Comm comm) {
  return allgather(FunctionId::kNeighbor_allgather, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm,
                   nullptr, [&](const void* s, void* r) {
                     return PMPI_Neighbor_allgather(s, sendcount, sendtype, r, recvcount, recvtype, comm);
                   });
}

int handle_Ineighbor_allgather(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, int recvcount,
                               MPI_Datatype recvtype, MPI_Comm comm, MPI_Request* request) {
  return allgather(FunctionId::kIneighbor_allgather, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm,
                   request, [&](const void* s, void* r) {
                     return PMPI_Ineighbor_allgather(s, sendcount, sendtype, r, recvcount, recvtype, comm, request);
                   });
}

int handle_Neighbor_allgather_init(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
                                   int recvcount, MPI_Datatype recvtype, MPI_Comm comm, MPI_Info info,
                                   MPI_Request* request) {
  return allgather(FunctionId::kNeighbor_allgather_init, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype,
                   comm, {request, kPersistent}, [&](const void* s, void* r) {
                     return FERRY_PMPI_PERSISTENT_COLLECTIVE(Neighbor_allgather_init)(s, sendcount, sendtype, r, recvcount, recvtype, comm, info,
                                                          request);
                   });
}

int handle_Neighbor_allgatherv(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
                               const int* recvcounts, const int* displs, MPI_Datatype recvtype, MPI_Comm comm) {
  return allgatherv(FunctionId::kNeighbor_allgatherv, sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs,
                    recvtype, comm, nullptr, [&](const void* s, void* r) {
                      return PMPI_Neighbor_allgatherv(s, sendcount, sendtype, r, recvcounts, displs, recvtype, comm);
                    });
}

int handle_Ineighbor_allgatherv(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
                                const int* recvcounts, const int* displs, MPI_Datatype recvtype, MPI_Comm comm,
                                MPI_Request* request) {
  return allgatherv(FunctionId::kIneighbor_allgatherv, sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs,
                    recvtype, comm, request, [&](const void* s, void* r) {
                      return PMPI_Ineighbor_allgatherv(s, sendcount, sendtype, r, recvcounts, displs, recvtype, comm,
                                                       request);
                    });
}

int handle_Neighbor_allgatherv_init(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
                                    const int* recvcounts, const int* displs, MPI_Datatype recvtype, MPI_Comm comm,
                                    MPI_Info info, MPI_Request* request) {
  return allgatherv(FunctionId::kNeighbor_allgatherv_init, sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs,
                    recvtype, comm, {request, kPersistent}, [&](const void* s, void* r) {
                      return FERRY_PMPI_PERSISTENT_COLLECTIVE(Neighbor_allgatherv_init)(s, sendcount, sendtype, r, recvcounts, displs, recvtype,
                                                            comm, info, request);
                    });
}

int handle_Neighbor_alltoall(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, int recvcount,
                             MPI_Datatype recvtype, MPI_Comm comm) {
  return alltoall(FunctionId::kNeighbor_alltoall, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm,
                  nullptr, [&](const void* s, void* r) {
                    return PMPI_Neighbor_alltoall(s, sendcount, sendtype, r, recvcount, recvtype, comm);
                  });
}

int handle_Ineighbor_alltoall(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, int recvcount,
                              MPI_Datatype recvtype, MPI_Comm comm, MPI_Request* request) {
  return alltoall(FunctionId::kIneighbor_alltoall, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm,
                  request, [&](const void* s, void* r) {
                    return PMPI_Ineighbor_alltoall(s, sendcount, sendtype, r, recvcount, recvtype, comm, request);
                  });
}

int handle_Neighbor_alltoall_init(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
                                  int recvcount, MPI_Datatype recvtype, MPI_Comm comm, MPI_Info info,
                                  MPI_Request* request) {
  return alltoall(FunctionId::kNeighbor_alltoall_init, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm,
                  {request, kPersistent}, [&](const void* s, void* r) {
                    return FERRY_PMPI_PERSISTENT_COLLECTIVE(Neighbor_alltoall_init)(s, sendcount, sendtype, r, recvcount, recvtype, comm, info,
                                                        request);
                  });
}

int handle_Neighbor_alltoallv(const void* sendbuf, const int* sendcounts, const int* sdispls, MPI_Datatype sendtype,
                              void* recvbuf, const int* recvcounts, const int* rdispls, MPI_Datatype recvtype,
                              MPI_Comm comm) {
  return alltoallv(FunctionId::kNeighbor_alltoallv, sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts,
                   rdispls, recvtype, comm, nullptr, [&](const void* s, void* r) {
                     return PMPI_Neighbor_alltoallv(s, sendcounts, sdispls, sendtype, r, recvcounts, rdispls, recvtype,
                                                    comm);
                   });
}

int handle_Ineighbor_alltoallv(const void* sendbuf, const int* sendcounts, const int* sdispls, MPI_Datatype sendtype,
                               void* recvbuf, const int* recvcounts, const int* rdispls, MPI_Datatype recvtype,
                               MPI_Comm comm, MPI_Request* request) {
  return alltoallv(FunctionId::kIneighbor_alltoallv, sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts,
                   rdispls, recvtype, comm, request, [&](const void* s, void* r) {
                     return PMPI_Ineighbor_alltoallv(s, sendcounts, sdispls, sendtype, r, recvcounts, rdispls, recvtype,
                                                     comm, request);
                   });
}

int handle_Neighbor_alltoallv_init(const void* sendbuf, const int* sendcounts, const int* sdispls,
                                   MPI_Datatype sendtype, void* recvbuf, const int* recvcounts, const int* rdispls,
                                   MPI_Datatype recvtype, MPI_Comm comm, MPI_Info info, MPI_Request* request) {
  return alltoallv(FunctionId::kNeighbor_alltoallv_init, sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts,
                   rdispls, recvtype, comm, {request, kPersistent}, [&](const void* s, void* r) {
                     return FERRY_PMPI_PERSISTENT_COLLECTIVE(Neighbor_alltoallv_init)(s, sendcounts, sdispls, sendtype, r, recvcounts, rdispls,
                                                          recvtype, comm, info, request);
                   });
}

int handle_Neighbor_alltoallw(const void* sendbuf, const int* sendcounts, const MPI_Aint* sdispls,
                              const MPI_Datatype* sendtypes, void* recvbuf, const int* recvcounts,
                              const MPI_Aint* rdispls, const MPI_Datatype* recvtypes, MPI_Comm comm) {
  return alltoallw(FunctionId::kNeighbor_alltoallw, sendbuf, sendcounts, sdispls, sendtypes, recvbuf, recvcounts,
                   rdispls, recvtypes, comm, nullptr, [&](const void* s, void* r) {
                     return PMPI_Neighbor_alltoallw(s, sendcounts, sdispls, sendtypes, r, recvcounts, rdispls,
                                                    recvtypes, comm);
                   });
}

int handle_Ineighbor_alltoallw(const void* sendbuf, const int* sendcounts, const MPI_Aint* sdispls,
                               const MPI_Datatype* sendtypes, void* recvbuf, const int* recvcounts,
                               const MPI_Aint* rdispls, const MPI_Datatype* recvtypes, MPI_Comm comm,
                               MPI_Request* request) {
  return alltoallw(FunctionId::kIneighbor_alltoallw, sendbuf, sendcounts, sdispls, sendtypes, recvbuf, recvcounts,
                   rdispls, recvtypes, comm, request, [&](const void* s, void* r) {
                     return PMPI_Ineighbor_alltoallw(s, sendcounts, sdispls, sendtypes, r, recvcounts, rdispls,
                                                     recvtypes, comm, request);
                   });
}

int handle_Neighbor_alltoallw_init(const void* sendbuf, const int* sendcounts, const MPI_Aint* sdispls,
                                   const MPI_Datatype* sendtypes, void* recvbuf, const int* recvcounts,
                                   const MPI_Aint* rdispls, const MPI_Datatype* recvtypes, MPI_Comm comm, MPI_Info info,
                                   MPI_Request* request) {
  return alltoallw(FunctionId::kNeighbor_alltoallw_init, sendbuf, sendcounts, sdispls, sendtypes, recvbuf, recvcounts,
                   rdispls, recvtypes, comm, {request, kPersistent}, [&](const void* s, void* r) {
                     return FERRY_PMPI_PERSISTENT_COLLECTIVE(Neighbor_alltoallw_init)(s, sendcounts, sdispls, sendtypes, r, recvcounts, rdispls,
                                                          recvtypes, comm, info, request);
                   });
}

}  // namespace ferry::shim

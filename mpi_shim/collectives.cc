// Blocking collectives. Each handler routes once: Allreduce, Bcast and
// Alltoallv may run on the engine; the staged route is shared with the
// nonblocking collectives (collective_staging.h).
#include <algorithm>
#include <cstdint>
#include <vector>

#include "engine/collectives/collectives.h"
#include "engine/gpu/gpu.h"
#include "handlers.h"
#include "mpi_shim/collective_staging.h"
#include "mpi_shim/engine_route.h"
#include "mpi_shim/nonblocking_engine.h"
#include "mpi_shim/translate.h"
#include "mpi_shim/wrapper_support.h"

namespace ferry::shim {
namespace {

// An Alltoallv in the engine's terms: bytes and byte offsets per peer.
struct AlltoallvLayout {
  std::vector<std::size_t> send_bytes, send_offsets, recv_bytes, recv_offsets;
};

// The layout of an Alltoallv the engine can run: dense types of equal size
// on both sides, not in place. False otherwise.
bool alltoallv_layout(const void* sendbuf, const int* sendcounts, const int* sdispls, MPI_Datatype sendtype,
                      const void* recvbuf, const int* recvcounts, const int* rdispls, MPI_Datatype recvtype,
                      MPI_Comm comm, AlltoallvLayout* layout) {
  CommShape shape;
  int send_size = 0, recv_size = 0;
  if (sendbuf == MPI_IN_PLACE || !recvbuf || !comm_shape(comm, &shape) || shape.inter || !sendcounts || !sdispls ||
      !recvcounts || !rdispls || !dense_data_type(sendtype, &send_size) || !dense_data_type(recvtype, &recv_size) ||
      send_size != recv_size)
    return false;
  for (auto* v : {&layout->send_bytes, &layout->send_offsets, &layout->recv_bytes, &layout->recv_offsets})
    v->resize(shape.size);
  for (int p = 0; p < shape.size; ++p) {
    if (sendcounts[p] < 0 || sdispls[p] < 0 || recvcounts[p] < 0 || rdispls[p] < 0) return false;
    layout->send_bytes[p] = static_cast<std::size_t>(sendcounts[p]) * send_size;
    layout->send_offsets[p] = static_cast<std::size_t>(sdispls[p]) * send_size;
    layout->recv_bytes[p] = static_cast<std::size_t>(recvcounts[p]) * recv_size;
    layout->recv_offsets[p] = static_cast<std::size_t>(rdispls[p]) * recv_size;
  }
  return true;
}

// Bytes per peer of any Alltoallv (offsets left 0), for the engine's
// handshake on a rank that does not take the engine route: every rank's
// counts are compared there. In place, what a rank sends is what it
// receives. Sizes are packed, so ranks with different types of one
// signature agree.
void alltoallv_bytes(const void* sendbuf, const int* sendcounts, MPI_Datatype sendtype, const int* recvcounts,
                     MPI_Datatype recvtype, MPI_Comm comm, AlltoallvLayout* layout) {
  int ranks = 0;
  PMPI_Comm_size(comm, &ranks);
  layout->recv_bytes = packed_block_bytes(ranks, recvcounts, recvtype);
  layout->send_bytes =
      sendbuf == MPI_IN_PLACE ? layout->recv_bytes : packed_block_bytes(ranks, sendcounts, sendtype);
  layout->send_offsets.assign(ranks, 0);
  layout->recv_offsets.assign(ranks, 0);
}

}  // namespace

int handle_Allreduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
                     MPI_Comm comm) {
  const FunctionId id = FunctionId::kAllreduce;
  if (null_send_buffer(id, sendbuf, count, datatype, recvbuf)) return raise_error(comm, MPI_ERR_BUFFER);
  gpu::CallBuffers classified;
  RouteDecision route = decide_route(id, {sendbuf, recvbuf}, true, true);
  // Translated on every rank, whatever its route: the engine's handshake
  // compares them (kCount: none the engine knows).
  DataType type = DataType::kCount;
  ReduceOp reduce_op = ReduceOp::kCount;
  const bool known_type = engine_data_type(datatype, &type);
  const bool known_op = engine_reduce_op(op, &reduce_op);
  if (route.route == Route::kEngine &&
      !(count > 0 && known_type && known_op && reduction_defined(type, reduce_op)))
    route = {Route::kStaged, "the engine does not reduce this type, op or count"};
  int result = MPI_SUCCESS;
  nbc::issue_all(comm);
  if (run_on_engine(id, comm, &route,
                    [&](Communicator& engine, bool eligible, bool* ran) {
                      return allreduce(engine, sendbuf == MPI_IN_PLACE ? nullptr : sendbuf, recvbuf, count, type,
                                       reduce_op, eligible, ran);
                    },
                    &result)) {
    count_bytes(id, count, datatype);
    return result;
  }
  return reduce_like(
      id, sendbuf, recvbuf, count, datatype, op, comm, nullptr, false,
      [&](const void* s, void* r) { return PMPI_Allreduce(s, r, count, datatype, op, comm); }, &route);
}

int handle_Scan(const void* sendbuf, void* recvbuf, int count, MPI_Datatype datatype, MPI_Op op, MPI_Comm comm) {
  return reduce_like(FunctionId::kScan, sendbuf, recvbuf, count, datatype, op, comm, nullptr, false,
                     [&](const void* s, void* r) { return PMPI_Scan(s, r, count, datatype, op, comm); });
}

int handle_Exscan(const void* sendbuf, void* recvbuf, int count, MPI_Datatype datatype, MPI_Op op, MPI_Comm comm) {
  // Rank 0's receive buffer is left undefined by MPI; keeping its old bytes
  // is what the real MPI does, so stage it both ways.
  return reduce_like(FunctionId::kExscan, sendbuf, recvbuf, count, datatype, op, comm, nullptr, true,
                     [&](const void* s, void* r) { return PMPI_Exscan(s, r, count, datatype, op, comm); });
}

int handle_Reduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype datatype, MPI_Op op, int root,
                  MPI_Comm comm) {
  return rooted_reduce_like(FunctionId::kReduce, sendbuf, recvbuf, count, datatype, op, root, comm, nullptr,
                            [&](const void* s, void* r) { return PMPI_Reduce(s, r, count, datatype, op, root, comm); });
}

int handle_Bcast(void* buffer, int count, MPI_Datatype datatype, int root, MPI_Comm comm) {
  const FunctionId id = FunctionId::kBcast;
  count_bytes(id, count, datatype);
  auto pmpi = [&](void* b) { return PMPI_Bcast(b, count, datatype, root, comm); };
  gpu::CallBuffers classified;
  RouteDecision route = decide_route(id, {buffer}, true, true);
  int element_size = 0;
  if (route.route == Route::kEngine && !(count > 0 && dense_data_type(datatype, &element_size)))
    route = {Route::kStaged, "the engine copies only contiguous types"};
  // The bytes every rank passes, whatever its route: the engine's handshake
  // compares them.
  const std::size_t bytes = static_cast<std::size_t>(std::max(count, 0)) * packed_size(datatype);
  int result = MPI_SUCCESS;
  if (run_on_engine(id, comm, &route,
                    [&](Communicator& engine, bool eligible, bool* ran) {
                      return bcast(engine, buffer, bytes, root, eligible, ran);
                    },
                    &result))
    return result;
  return bcast_like(id, route.route, buffer, count, datatype, root, comm, nullptr, pmpi);
}

int handle_Allgather(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, int recvcount,
                     MPI_Datatype recvtype, MPI_Comm comm) {
  count_bytes(FunctionId::kAllgather, sendcount, sendtype);
  return exchange_like(
      FunctionId::kAllgather, sendbuf, recvbuf, comm, nullptr, elements(sendcount, sendtype),
      per_peer(recvcount, recvtype),
      [&](const void* s, void* r) { return PMPI_Allgather(s, sendcount, sendtype, r, recvcount, recvtype, comm); });
}

int handle_Allgatherv(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
                      const int* recvcounts, const int* displs, MPI_Datatype recvtype, MPI_Comm comm) {
  count_bytes(FunctionId::kAllgatherv, sendcount, sendtype);
  return exchange_like(FunctionId::kAllgatherv, sendbuf, recvbuf, comm, nullptr, elements(sendcount, sendtype),
                       blocks(recvcounts, displs, recvtype), [&](const void* s, void* r) {
                         return PMPI_Allgatherv(s, sendcount, sendtype, r, recvcounts, displs, recvtype, comm);
                       });
}

int handle_Gather(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, int recvcount,
                  MPI_Datatype recvtype, int root, MPI_Comm comm) {
  return gather_like(FunctionId::kGather, sendbuf, sendcount, sendtype, recvbuf, root, comm, nullptr,
                     per_peer(recvcount, recvtype), [&](const void* s, void* r) {
                       return PMPI_Gather(s, sendcount, sendtype, r, recvcount, recvtype, root, comm);
                     });
}

int handle_Gatherv(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, const int* recvcounts,
                   const int* displs, MPI_Datatype recvtype, int root, MPI_Comm comm) {
  return gather_like(FunctionId::kGatherv, sendbuf, sendcount, sendtype, recvbuf, root, comm, nullptr,
                     blocks(recvcounts, displs, recvtype), [&](const void* s, void* r) {
                       return PMPI_Gatherv(s, sendcount, sendtype, r, recvcounts, displs, recvtype, root, comm);
                     });
}

int handle_Scatter(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, int recvcount,
                   MPI_Datatype recvtype, int root, MPI_Comm comm) {
  return scatter_like(FunctionId::kScatter, sendbuf, recvbuf, recvcount, recvtype, root, comm, nullptr,
                      per_peer(sendcount, sendtype), [&](const void* s, void* r) {
                        return PMPI_Scatter(s, sendcount, sendtype, r, recvcount, recvtype, root, comm);
                      });
}

int handle_Scatterv(const void* sendbuf, const int* sendcounts, const int* displs, MPI_Datatype sendtype,
                    void* recvbuf, int recvcount, MPI_Datatype recvtype, int root, MPI_Comm comm) {
  return scatter_like(FunctionId::kScatterv, sendbuf, recvbuf, recvcount, recvtype, root, comm, nullptr,
                      blocks(sendcounts, displs, sendtype), [&](const void* s, void* r) {
                        return PMPI_Scatterv(s, sendcounts, displs, sendtype, r, recvcount, recvtype, root, comm);
                      });
}

int handle_Alltoall(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, int recvcount,
                    MPI_Datatype recvtype, MPI_Comm comm) {
  const FunctionId id = FunctionId::kAlltoall;
  return exchange_like(
      id, sendbuf, recvbuf, comm, nullptr, counted_per_peer(id, sendcount, sendtype), per_peer(recvcount, recvtype),
      [&](const void* s, void* r) { return PMPI_Alltoall(s, sendcount, sendtype, r, recvcount, recvtype, comm); });
}

int handle_Alltoallv(const void* sendbuf, const int* sendcounts, const int* sdispls, MPI_Datatype sendtype,
                     void* recvbuf, const int* recvcounts, const int* rdispls, MPI_Datatype recvtype, MPI_Comm comm) {
  const FunctionId id = FunctionId::kAlltoallv;
  auto pmpi = [&](const void* s, void* r) {
    return PMPI_Alltoallv(s, sendcounts, sdispls, sendtype, r, recvcounts, rdispls, recvtype, comm);
  };
  gpu::CallBuffers classified;
  RouteDecision route = decide_route(id, {sendbuf, recvbuf}, true, true);
  AlltoallvLayout layout;
  if (route.route == Route::kEngine &&
      !alltoallv_layout(sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls, recvtype, comm,
                        &layout))
    route = {Route::kStaged, "the engine copies only contiguous types of one size, not in place"};
  if (route.route != Route::kEngine)
    alltoallv_bytes(sendbuf, sendcounts, sendtype, recvcounts, recvtype, comm, &layout);
  int result = MPI_SUCCESS;
  if (run_on_engine(id, comm, &route,
                    [&](Communicator& engine, bool eligible, bool* ran) {
                      return alltoallv(engine, sendbuf, layout.send_bytes.data(), layout.send_offsets.data(),
                                       recvbuf, layout.recv_bytes.data(), layout.recv_offsets.data(), eligible, ran);
                    },
                    &result)) {
    count_bytes(id, sum(sendcounts, static_cast<int>(layout.send_bytes.size())), sendtype);
    return result;
  }
  return exchange_like(id, sendbuf, recvbuf, comm, nullptr, counted_blocks(id, sendcounts, sdispls, sendtype),
                       blocks(recvcounts, rdispls, recvtype), pmpi, &route);
}

int handle_Alltoallw(const void* sendbuf, const int* sendcounts, const int* sdispls, const MPI_Datatype* sendtypes,
                     void* recvbuf, const int* recvcounts, const int* rdispls, const MPI_Datatype* recvtypes,
                     MPI_Comm comm) {
  const FunctionId id = FunctionId::kAlltoallw;
  return exchange_like(id, sendbuf, recvbuf, comm, nullptr, typed_blocks(id, sendcounts, sdispls, sendtypes, true),
                       typed_blocks(id, recvcounts, rdispls, recvtypes, false), [&](const void* s, void* r) {
                         return PMPI_Alltoallw(s, sendcounts, sdispls, sendtypes, r, recvcounts, rdispls, recvtypes,
                                               comm);
                       });
}

int handle_Reduce_scatter(const void* sendbuf, void* recvbuf, const int* recvcounts, MPI_Datatype datatype,
                          MPI_Op op, MPI_Comm comm) {
  return reduce_scatter_counts_like(
      FunctionId::kReduce_scatter, sendbuf, recvbuf, recvcounts, datatype, op, comm, nullptr,
      [&](const void* s, void* r) { return PMPI_Reduce_scatter(s, r, recvcounts, datatype, op, comm); });
}

int handle_Reduce_scatter_block(const void* sendbuf, void* recvbuf, int recvcount, MPI_Datatype datatype,
                                MPI_Op op, MPI_Comm comm) {
  return reduce_scatter_block_like(
      FunctionId::kReduce_scatter_block, sendbuf, recvbuf, recvcount, datatype, op, comm, nullptr,
      [&](const void* s, void* r) { return PMPI_Reduce_scatter_block(s, r, recvcount, datatype, op, comm); });
}

}  // namespace ferry::shim

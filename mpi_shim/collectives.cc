// Blocking collectives. Each handler routes once; on the staged route it
// works out which buffers are significant on this rank and how many bytes
// each touches, stages them, and calls the real MPI on host copies.
// Arguments the real MPI would reject go to it unchanged, so users get the
// real MPI's error class through their error handler.
#include <cstdint>
#include <vector>

#include "engine/collectives/collectives.h"
#include "handlers.h"
#include "mpi_shim/comm_shape.h"
#include "mpi_shim/engine_route.h"
#include "mpi_shim/route.h"
#include "mpi_shim/staging.h"
#include "mpi_shim/stats.h"
#include "mpi_shim/translate.h"

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

std::int64_t sum(const int counts[], int n) {
  std::int64_t total = 0;
  for (int i = 0; i < n; ++i) total += counts[i];
  return total;
}

// Allreduce, Scan and Exscan share their buffer rules. A route already
// decided and recorded (Allreduce after the engine handshake) is passed in.
template <typename PmpiCall>
int reduce_like(FunctionId id, const void* sendbuf, void* recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
                MPI_Comm comm, bool preserve_recv, PmpiCall pmpi, const RouteDecision* decided = nullptr) {
  count_bytes(id, count, datatype);
  const Route route = decided ? decided->route : route_call(id, {sendbuf, recvbuf}).route;
  if (route == Route::kPmpi) return pmpi(sendbuf, recvbuf);
  Extent extent;
  if (op == MPI_OP_NULL || comm == MPI_COMM_NULL || !extent_of(count, datatype, &extent))
    return pmpi(sendbuf, recvbuf);
  Staging staging(id, comm);
  const void* send = staging.in(sendbuf, extent);
  void* recv = sendbuf == MPI_IN_PLACE || preserve_recv ? staging.inout(recvbuf, extent)
                                                         : staging.out(recvbuf, extent);
  if (staging.failed()) return staging.raise();
  return staging.finish(pmpi(send, recv));
}

// Calls in which every rank sends and receives (Allgather(v), Alltoall(v,w)):
// the extents come from the call's own rules; MPI_IN_PLACE means the receive
// buffer is also the input.
template <typename SendExtent, typename RecvExtent, typename PmpiCall>
int exchange_like(FunctionId id, const void* sendbuf, void* recvbuf, MPI_Comm comm, SendExtent send_extent_of,
                  RecvExtent recv_extent_of, PmpiCall pmpi, const RouteDecision* decided = nullptr) {
  const Route route = decided ? decided->route : route_call(id, {sendbuf, recvbuf}).route;
  if (route == Route::kPmpi) return pmpi(sendbuf, recvbuf);
  CommShape shape;
  Extent send_extent, recv_extent;
  const bool in_place = sendbuf == MPI_IN_PLACE;
  if (!comm_shape(comm, &shape) || (!in_place && !send_extent_of(shape, &send_extent)) ||
      !recv_extent_of(shape, &recv_extent))
    return pmpi(sendbuf, recvbuf);
  Staging staging(id, comm);
  const void* send = staging.in(sendbuf, send_extent);
  void* recv = in_place ? staging.inout(recvbuf, recv_extent) : staging.out(recvbuf, recv_extent);
  if (staging.failed()) return staging.raise();
  return staging.finish(pmpi(send, recv));
}

// Gather(v): every rank but an in-place root sends; the root receives.
template <typename RootRecvExtent, typename PmpiCall>
int gather_like(FunctionId id, const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, int root,
                MPI_Comm comm, RootRecvExtent root_recv_extent_of, PmpiCall pmpi) {
  count_bytes(id, sendcount, sendtype);
  if (route_call(id, {sendbuf, recvbuf}).route == Route::kPmpi) return pmpi(sendbuf, recvbuf);
  CommShape shape;
  RootRole role;
  if (!comm_shape(comm, &shape) || !root_role(shape, root, &role)) return pmpi(sendbuf, recvbuf);
  const bool in_place = sendbuf == MPI_IN_PLACE;
  const bool sends = role == RootRole::kLeaf || (role == RootRole::kRoot && !shape.inter && !in_place);
  Extent send_extent, recv_extent;
  if ((sends && !extent_of(sendcount, sendtype, &send_extent)) ||
      (role == RootRole::kRoot && !root_recv_extent_of(shape, &recv_extent)))
    return pmpi(sendbuf, recvbuf);
  Staging staging(id, comm);
  const void* send = sends ? staging.in(sendbuf, send_extent) : sendbuf;
  void* recv = recvbuf;
  if (role == RootRole::kRoot)
    recv = in_place ? staging.inout(recvbuf, recv_extent) : staging.out(recvbuf, recv_extent);
  if (staging.failed()) return staging.raise();
  return staging.finish(pmpi(send, recv));
}

// Scatter(v): the root sends; every rank but an in-place root receives.
template <typename RootSendExtent, typename PmpiCall>
int scatter_like(FunctionId id, const void* sendbuf, void* recvbuf, int recvcount, MPI_Datatype recvtype, int root,
                 MPI_Comm comm, RootSendExtent root_send_extent_of, PmpiCall pmpi) {
  count_bytes(id, recvcount, recvtype);
  if (route_call(id, {sendbuf, recvbuf}).route == Route::kPmpi) return pmpi(sendbuf, recvbuf);
  CommShape shape;
  RootRole role;
  if (!comm_shape(comm, &shape) || !root_role(shape, root, &role)) return pmpi(sendbuf, recvbuf);
  const bool in_place = recvbuf == MPI_IN_PLACE;
  const bool receives = role == RootRole::kLeaf || (role == RootRole::kRoot && !shape.inter && !in_place);
  Extent send_extent, recv_extent;
  if ((role == RootRole::kRoot && !root_send_extent_of(shape, &send_extent)) ||
      (receives && !extent_of(recvcount, recvtype, &recv_extent)))
    return pmpi(sendbuf, recvbuf);
  Staging staging(id, comm);
  const void* send = role == RootRole::kRoot ? staging.in(sendbuf, send_extent) : sendbuf;
  void* recv = receives ? staging.out(recvbuf, recv_extent) : recvbuf;
  if (staging.failed()) return staging.raise();
  return staging.finish(pmpi(send, recv));
}

// Reduce_scatter(_block): the input is the whole vector, the output this
// rank's block; in place, the receive buffer holds the whole vector.
template <typename PmpiCall>
int reduce_scatter_like(FunctionId id, const void* sendbuf, void* recvbuf, std::int64_t total, int own,
                        MPI_Datatype datatype, MPI_Comm comm, PmpiCall pmpi) {
  count_bytes(id, total, datatype);
  Extent full_extent, own_extent;
  if (!extent_of(total, datatype, &full_extent) || !extent_of(own, datatype, &own_extent))
    return pmpi(sendbuf, recvbuf);
  Staging staging(id, comm);
  const void* send = staging.in(sendbuf, full_extent);
  void* recv = sendbuf == MPI_IN_PLACE ? staging.inout(recvbuf, full_extent) : staging.out(recvbuf, own_extent);
  if (staging.failed()) return staging.raise();
  return staging.finish(pmpi(send, recv));
}

}  // namespace

int handle_Allreduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
                     MPI_Comm comm) {
  const FunctionId id = FunctionId::kAllreduce;
  RouteDecision route = decide_route(id, {sendbuf, recvbuf}, true);
  DataType type = DataType::kFloat32;
  ReduceOp reduce_op = ReduceOp::kSum;
  if (route.route == Route::kEngine &&
      !(count > 0 && engine_data_type(datatype, &type) && engine_reduce_op(op, &reduce_op) &&
        reduction_defined(type, reduce_op)))
    route = {Route::kStaged, "the engine does not reduce this type, op or count"};
  int result = MPI_SUCCESS;
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
      id, sendbuf, recvbuf, count, datatype, op, comm, false,
      [&](const void* s, void* r) { return PMPI_Allreduce(s, r, count, datatype, op, comm); }, &route);
}

int handle_Scan(const void* sendbuf, void* recvbuf, int count, MPI_Datatype datatype, MPI_Op op, MPI_Comm comm) {
  return reduce_like(FunctionId::kScan, sendbuf, recvbuf, count, datatype, op, comm, false,
                     [&](const void* s, void* r) { return PMPI_Scan(s, r, count, datatype, op, comm); });
}

int handle_Exscan(const void* sendbuf, void* recvbuf, int count, MPI_Datatype datatype, MPI_Op op, MPI_Comm comm) {
  // Rank 0's receive buffer is left undefined by MPI; keeping its old bytes
  // is what the real MPI does, so stage it both ways.
  return reduce_like(FunctionId::kExscan, sendbuf, recvbuf, count, datatype, op, comm, true,
                     [&](const void* s, void* r) { return PMPI_Exscan(s, r, count, datatype, op, comm); });
}

int handle_Reduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype datatype, MPI_Op op, int root,
                  MPI_Comm comm) {
  const FunctionId id = FunctionId::kReduce;
  count_bytes(id, count, datatype);
  auto pmpi = [&](const void* s, void* r) { return PMPI_Reduce(s, r, count, datatype, op, root, comm); };
  if (route_call(id, {sendbuf, recvbuf}).route == Route::kPmpi) return pmpi(sendbuf, recvbuf);
  CommShape shape;
  RootRole role;
  Extent extent;
  if (op == MPI_OP_NULL || !comm_shape(comm, &shape) || !root_role(shape, root, &role) ||
      !extent_of(count, datatype, &extent))
    return pmpi(sendbuf, recvbuf);
  Staging staging(id, comm);
  const bool sends = shape.inter ? role == RootRole::kLeaf : true;
  const void* send = sends ? staging.in(sendbuf, extent) : sendbuf;
  void* recv = recvbuf;
  if (role == RootRole::kRoot)
    recv = sendbuf == MPI_IN_PLACE ? staging.inout(recvbuf, extent) : staging.out(recvbuf, extent);
  if (staging.failed()) return staging.raise();
  return staging.finish(pmpi(send, recv));
}

int handle_Bcast(void* buffer, int count, MPI_Datatype datatype, int root, MPI_Comm comm) {
  const FunctionId id = FunctionId::kBcast;
  count_bytes(id, count, datatype);
  auto pmpi = [&](void* b) { return PMPI_Bcast(b, count, datatype, root, comm); };
  RouteDecision route = decide_route(id, {buffer}, true);
  int element_size = 0;
  if (route.route == Route::kEngine && !(count > 0 && dense_data_type(datatype, &element_size)))
    route = {Route::kStaged, "the engine copies only contiguous types"};
  int result = MPI_SUCCESS;
  if (run_on_engine(id, comm, &route,
                    [&](Communicator& engine, bool eligible, bool* ran) {
                      return bcast(engine, buffer, static_cast<std::size_t>(count) * element_size, root, eligible,
                                   ran);
                    },
                    &result))
    return result;
  if (route.route == Route::kPmpi) return pmpi(buffer);
  CommShape shape;
  RootRole role;
  Extent extent;
  if (!comm_shape(comm, &shape) || !root_role(shape, root, &role) || !extent_of(count, datatype, &extent))
    return pmpi(buffer);
  Staging staging(id, comm);
  void* staged = buffer;
  if (role == RootRole::kRoot) {
    staged = const_cast<void*>(staging.in(buffer, extent));
  } else if (role == RootRole::kLeaf) {
    staged = staging.out(buffer, extent);
  }
  if (staging.failed()) return staging.raise();
  return staging.finish(pmpi(staged));
}

int handle_Allgather(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, int recvcount,
                     MPI_Datatype recvtype, MPI_Comm comm) {
  count_bytes(FunctionId::kAllgather, sendcount, sendtype);
  return exchange_like(
      FunctionId::kAllgather, sendbuf, recvbuf, comm,
      [&](const CommShape&, Extent* e) { return extent_of(sendcount, sendtype, e); },
      [&](const CommShape& shape, Extent* e) {
        return extent_of(static_cast<std::int64_t>(recvcount) * shape.peers, recvtype, e);
      },
      [&](const void* s, void* r) { return PMPI_Allgather(s, sendcount, sendtype, r, recvcount, recvtype, comm); });
}

int handle_Allgatherv(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
                      const int* recvcounts, const int* displs, MPI_Datatype recvtype, MPI_Comm comm) {
  count_bytes(FunctionId::kAllgatherv, sendcount, sendtype);
  return exchange_like(
      FunctionId::kAllgatherv, sendbuf, recvbuf, comm,
      [&](const CommShape&, Extent* e) { return extent_of(sendcount, sendtype, e); },
      [&](const CommShape& shape, Extent* e) {
        return displs && extent_of_blocks(shape.peers, recvcounts, displs, recvtype, e);
      },
      [&](const void* s, void* r) {
        return PMPI_Allgatherv(s, sendcount, sendtype, r, recvcounts, displs, recvtype, comm);
      });
}

int handle_Gather(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, int recvcount,
                  MPI_Datatype recvtype, int root, MPI_Comm comm) {
  return gather_like(
      FunctionId::kGather, sendbuf, sendcount, sendtype, recvbuf, root, comm,
      [&](const CommShape& shape, Extent* e) {
        return extent_of(static_cast<std::int64_t>(recvcount) * shape.peers, recvtype, e);
      },
      [&](const void* s, void* r) {
        return PMPI_Gather(s, sendcount, sendtype, r, recvcount, recvtype, root, comm);
      });
}

int handle_Gatherv(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, const int* recvcounts,
                   const int* displs, MPI_Datatype recvtype, int root, MPI_Comm comm) {
  return gather_like(
      FunctionId::kGatherv, sendbuf, sendcount, sendtype, recvbuf, root, comm,
      [&](const CommShape& shape, Extent* e) {
        return displs && extent_of_blocks(shape.peers, recvcounts, displs, recvtype, e);
      },
      [&](const void* s, void* r) {
        return PMPI_Gatherv(s, sendcount, sendtype, r, recvcounts, displs, recvtype, root, comm);
      });
}

int handle_Scatter(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, int recvcount,
                   MPI_Datatype recvtype, int root, MPI_Comm comm) {
  return scatter_like(
      FunctionId::kScatter, sendbuf, recvbuf, recvcount, recvtype, root, comm,
      [&](const CommShape& shape, Extent* e) {
        return extent_of(static_cast<std::int64_t>(sendcount) * shape.peers, sendtype, e);
      },
      [&](const void* s, void* r) {
        return PMPI_Scatter(s, sendcount, sendtype, r, recvcount, recvtype, root, comm);
      });
}

int handle_Scatterv(const void* sendbuf, const int* sendcounts, const int* displs, MPI_Datatype sendtype,
                    void* recvbuf, int recvcount, MPI_Datatype recvtype, int root, MPI_Comm comm) {
  return scatter_like(
      FunctionId::kScatterv, sendbuf, recvbuf, recvcount, recvtype, root, comm,
      [&](const CommShape& shape, Extent* e) {
        return displs && extent_of_blocks(shape.peers, sendcounts, displs, sendtype, e);
      },
      [&](const void* s, void* r) {
        return PMPI_Scatterv(s, sendcounts, displs, sendtype, r, recvcount, recvtype, root, comm);
      });
}

int handle_Alltoall(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, int recvcount,
                    MPI_Datatype recvtype, MPI_Comm comm) {
  count_bytes(FunctionId::kAlltoall, sendcount, sendtype);
  return exchange_like(
      FunctionId::kAlltoall, sendbuf, recvbuf, comm,
      [&](const CommShape& shape, Extent* e) {
        return extent_of(static_cast<std::int64_t>(sendcount) * shape.peers, sendtype, e);
      },
      [&](const CommShape& shape, Extent* e) {
        return extent_of(static_cast<std::int64_t>(recvcount) * shape.peers, recvtype, e);
      },
      [&](const void* s, void* r) { return PMPI_Alltoall(s, sendcount, sendtype, r, recvcount, recvtype, comm); });
}

int handle_Alltoallv(const void* sendbuf, const int* sendcounts, const int* sdispls, MPI_Datatype sendtype,
                     void* recvbuf, const int* recvcounts, const int* rdispls, MPI_Datatype recvtype, MPI_Comm comm) {
  const FunctionId id = FunctionId::kAlltoallv;
  auto pmpi = [&](const void* s, void* r) {
    return PMPI_Alltoallv(s, sendcounts, sdispls, sendtype, r, recvcounts, rdispls, recvtype, comm);
  };
  RouteDecision route = decide_route(id, {sendbuf, recvbuf}, true);
  AlltoallvLayout layout;
  if (route.route == Route::kEngine &&
      !alltoallv_layout(sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls, recvtype, comm,
                        &layout))
    route = {Route::kStaged, "the engine copies only contiguous types of one size, not in place"};
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
  return exchange_like(
      id, sendbuf, recvbuf, comm,
      [&](const CommShape& shape, Extent* e) {
        if (!sdispls || !extent_of_blocks(shape.peers, sendcounts, sdispls, sendtype, e)) return false;
        count_bytes(id, sum(sendcounts, shape.peers), sendtype);
        return true;
      },
      [&](const CommShape& shape, Extent* e) {
        return rdispls && extent_of_blocks(shape.peers, recvcounts, rdispls, recvtype, e);
      },
      pmpi, &route);
}

int handle_Alltoallw(const void* sendbuf, const int* sendcounts, const int* sdispls, const MPI_Datatype* sendtypes,
                     void* recvbuf, const int* recvcounts, const int* rdispls, const MPI_Datatype* recvtypes,
                     MPI_Comm comm) {
  const FunctionId id = FunctionId::kAlltoallw;
  return exchange_like(
      id, sendbuf, recvbuf, comm,
      [&](const CommShape& shape, Extent* e) {
        if (!extent_of_typed_blocks(shape.peers, sendcounts, sdispls, sendtypes, e)) return false;
        for (int p = 0; p < shape.peers; ++p) count_bytes(id, sendcounts[p], sendtypes[p]);
        return true;
      },
      [&](const CommShape& shape, Extent* e) {
        return extent_of_typed_blocks(shape.peers, recvcounts, rdispls, recvtypes, e);
      },
      [&](const void* s, void* r) {
        return PMPI_Alltoallw(s, sendcounts, sdispls, sendtypes, r, recvcounts, rdispls, recvtypes, comm);
      });
}

int handle_Reduce_scatter(const void* sendbuf, void* recvbuf, const int* recvcounts, MPI_Datatype datatype,
                          MPI_Op op, MPI_Comm comm) {
  const FunctionId id = FunctionId::kReduce_scatter;
  auto pmpi = [&](const void* s, void* r) { return PMPI_Reduce_scatter(s, r, recvcounts, datatype, op, comm); };
  if (route_call(id, {sendbuf, recvbuf}).route == Route::kPmpi) return pmpi(sendbuf, recvbuf);
  CommShape shape;
  if (op == MPI_OP_NULL || !comm_shape(comm, &shape) || !recvcounts) return pmpi(sendbuf, recvbuf);
  // recvcounts is indexed by the local group, also on an intercommunicator.
  for (int i = 0; i < shape.size; ++i)
    if (recvcounts[i] < 0) return pmpi(sendbuf, recvbuf);
  return reduce_scatter_like(id, sendbuf, recvbuf, sum(recvcounts, shape.size), recvcounts[shape.rank], datatype,
                             comm, pmpi);
}

int handle_Reduce_scatter_block(const void* sendbuf, void* recvbuf, int recvcount, MPI_Datatype datatype,
                                MPI_Op op, MPI_Comm comm) {
  const FunctionId id = FunctionId::kReduce_scatter_block;
  auto pmpi = [&](const void* s, void* r) {
    return PMPI_Reduce_scatter_block(s, r, recvcount, datatype, op, comm);
  };
  if (route_call(id, {sendbuf, recvbuf}).route == Route::kPmpi) return pmpi(sendbuf, recvbuf);
  CommShape shape;
  if (op == MPI_OP_NULL || recvcount < 0 || !comm_shape(comm, &shape)) return pmpi(sendbuf, recvbuf);
  return reduce_scatter_like(id, sendbuf, recvbuf, static_cast<std::int64_t>(recvcount) * shape.size, recvcount,
                             datatype, comm, pmpi);
}

}  // namespace ferry::shim

// The staged route of the collectives, shared by the blocking calls
// (collectives.cc) and the nonblocking ones (nonblocking_collectives.cc).
// Each helper works out which buffers are significant on this rank and how
// many bytes each touches, stages them and calls pmpi(send, recv) on the
// copies. request is null for a blocking call, which copies outputs back
// before it returns; a nonblocking call leaves them to the call that
// completes *request, and a persistent one copies inputs again at every
// MPI_Start (staged_requests.h). Arguments the real MPI would reject go to
// it unchanged, so users get the real MPI's error class through their error
// handler.
#pragma once

#include <mpi.h>

#include <cstdint>

#include "mpi_shim/comm_shape.h"
#include "mpi_shim/staged_requests.h"
#include "mpi_shim/route.h"
#include "mpi_shim/staging.h"
#include "mpi_shim/stats.h"

namespace ferry::shim {

// The request a staged call returns, if any, and how long it lives.
struct CallRequest {
  CallRequest(MPI_Request* request, Lifetime lifetime = Lifetime::kOnce) : request(request), lifetime(lifetime) {}
  MPI_Request* request;
  Lifetime lifetime;
};

inline int end_staged(Staging& staging, int mpi_result, const CallRequest& call) {
  return end_staged(staging, mpi_result, call.request, call.lifetime);
}

inline std::int64_t sum(const int counts[], int n) {
  std::int64_t total = 0;
  for (int i = 0; i < n; ++i) total += counts[i];
  return total;
}

// The extents of the send or receive side of a call, by its rules:
// count elements of type.
inline auto elements(int count, MPI_Datatype type) {
  return [=](const CommShape&, Extent* e) { return extent_of(count, type, e); };
}
// count elements for each peer (Allgather, Alltoall, Gather, Scatter).
inline auto per_peer(int count, MPI_Datatype type) {
  return [=](const CommShape& shape, Extent* e) {
    return extent_of(static_cast<std::int64_t>(count) * shape.peers, type, e);
  };
}
// counts[p] elements at displs[p] for each peer (the v-calls).
inline auto blocks(const int* counts, const int* displs, MPI_Datatype type) {
  return [=](const CommShape& shape, Extent* e) {
    return displs && extent_of_blocks(shape.peers, counts, displs, type, e);
  };
}
// per_peer() of a send side, counted in the stats.
inline auto counted_per_peer(FunctionId id, int count, MPI_Datatype type) {
  return [=](const CommShape& shape, Extent* e) {
    if (!per_peer(count, type)(shape, e)) return false;
    count_bytes(id, static_cast<std::int64_t>(count) * shape.peers, type);
    return true;
  };
}
// blocks() of a send side, counted in the stats.
inline auto counted_blocks(FunctionId id, const int* counts, const int* displs, MPI_Datatype type) {
  return [=](const CommShape& shape, Extent* e) {
    if (!blocks(counts, displs, type)(shape, e)) return false;
    count_bytes(id, sum(counts, shape.peers), type);
    return true;
  };
}

// Allreduce, Scan and Exscan share their buffer rules. A route already
// decided and recorded (Allreduce after the engine handshake) is passed in.
template <typename PmpiCall>
int reduce_like(FunctionId id, const void* sendbuf, void* recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
                MPI_Comm comm, CallRequest request, bool preserve_recv, PmpiCall pmpi,
                const RouteDecision* decided = nullptr) {
  count_bytes(id, count, datatype);
  const Route route = decided ? decided->route : route_call(id, {sendbuf, recvbuf}, true).route;
  if (route == Route::kPmpi) return pmpi(sendbuf, recvbuf);
  Extent extent;
  if (op == MPI_OP_NULL || comm == MPI_COMM_NULL || !extent_of(count, datatype, &extent))
    return pmpi(sendbuf, recvbuf);
  Staging staging(id, comm);
  const void* send = staging.in(sendbuf, extent);
  void* recv = sendbuf == MPI_IN_PLACE || preserve_recv ? staging.inout(recvbuf, extent)
                                                         : staging.out(recvbuf, extent);
  if (staging.failed()) return staging.raise();
  return end_staged(staging, pmpi(send, recv), request);
}

// Reduce: every rank sends (on an intercommunicator, the remote group); the
// root receives.
template <typename PmpiCall>
int rooted_reduce_like(FunctionId id, const void* sendbuf, void* recvbuf, int count, MPI_Datatype datatype,
                       MPI_Op op, int root, MPI_Comm comm, CallRequest request, PmpiCall pmpi) {
  count_bytes(id, count, datatype);
  if (route_call(id, {sendbuf, recvbuf}, true).route == Route::kPmpi) return pmpi(sendbuf, recvbuf);
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
  return end_staged(staging, pmpi(send, recv), request);
}

// Bcast on a route already decided: the root's buffer is the input, every
// other rank's the output. pmpi(buffer) makes the real call.
template <typename PmpiCall>
int bcast_like(FunctionId id, Route route, void* buffer, int count, MPI_Datatype datatype, int root, MPI_Comm comm,
               CallRequest request, PmpiCall pmpi) {
  if (route == Route::kPmpi) return pmpi(buffer);
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
  return end_staged(staging, pmpi(staged), request);
}

// Calls in which every rank sends and receives (Allgather(v), Alltoall(v,w)):
// the extents come from the call's own rules; MPI_IN_PLACE means the receive
// buffer is also the input.
template <typename SendExtent, typename RecvExtent, typename PmpiCall>
int exchange_like(FunctionId id, const void* sendbuf, void* recvbuf, MPI_Comm comm, CallRequest request,
                  SendExtent send_extent_of, RecvExtent recv_extent_of, PmpiCall pmpi,
                  const RouteDecision* decided = nullptr) {
  const Route route = decided ? decided->route : route_call(id, {sendbuf, recvbuf}, true).route;
  CommShape shape;
  Extent send_extent, recv_extent;
  const bool in_place = sendbuf == MPI_IN_PLACE;
  if (route == Route::kPmpi) {
    // The send side still counts its bytes (counted_*) under FERRY_STATS.
    if (stats_enabled() && !in_place && comm_shape(comm, &shape)) send_extent_of(shape, &send_extent);
    return pmpi(sendbuf, recvbuf);
  }
  if (!comm_shape(comm, &shape) || (!in_place && !send_extent_of(shape, &send_extent)) ||
      !recv_extent_of(shape, &recv_extent))
    return pmpi(sendbuf, recvbuf);
  Staging staging(id, comm);
  const void* send = staging.in(sendbuf, send_extent);
  void* recv = in_place ? staging.inout(recvbuf, recv_extent) : staging.out(recvbuf, recv_extent);
  if (staging.failed()) return staging.raise();
  return end_staged(staging, pmpi(send, recv), request);
}

// Gather(v): every rank but an in-place root sends; the root receives.
template <typename RootRecvExtent, typename PmpiCall>
int gather_like(FunctionId id, const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, int root,
                MPI_Comm comm, CallRequest request, RootRecvExtent root_recv_extent_of, PmpiCall pmpi) {
  count_bytes(id, sendcount, sendtype);
  if (route_call(id, {sendbuf, recvbuf}, true).route == Route::kPmpi) return pmpi(sendbuf, recvbuf);
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
  return end_staged(staging, pmpi(send, recv), request);
}

// Scatter(v): the root sends; every rank but an in-place root receives.
template <typename RootSendExtent, typename PmpiCall>
int scatter_like(FunctionId id, const void* sendbuf, void* recvbuf, int recvcount, MPI_Datatype recvtype, int root,
                 MPI_Comm comm, CallRequest request, RootSendExtent root_send_extent_of, PmpiCall pmpi) {
  count_bytes(id, recvcount, recvtype);
  if (route_call(id, {sendbuf, recvbuf}, true).route == Route::kPmpi) return pmpi(sendbuf, recvbuf);
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
  return end_staged(staging, pmpi(send, recv), request);
}

// Reduce_scatter(_block): the input is the whole vector, the output this
// rank's block; in place, the receive buffer holds the whole vector.
template <typename PmpiCall>
int reduce_scatter_like(FunctionId id, const void* sendbuf, void* recvbuf, std::int64_t total, int own,
                        MPI_Datatype datatype, MPI_Comm comm, CallRequest request, PmpiCall pmpi) {
  count_bytes(id, total, datatype);
  Extent full_extent, own_extent;
  if (!extent_of(total, datatype, &full_extent) || !extent_of(own, datatype, &own_extent))
    return pmpi(sendbuf, recvbuf);
  Staging staging(id, comm);
  const void* send = staging.in(sendbuf, full_extent);
  void* recv = sendbuf == MPI_IN_PLACE ? staging.inout(recvbuf, full_extent) : staging.out(recvbuf, own_extent);
  if (staging.failed()) return staging.raise();
  return end_staged(staging, pmpi(send, recv), request);
}

// Reduce_scatter_block on a communicator of shape.size ranks.
template <typename PmpiCall>
int reduce_scatter_block_like(FunctionId id, const void* sendbuf, void* recvbuf, int recvcount,
                              MPI_Datatype datatype, MPI_Op op, MPI_Comm comm, CallRequest request,
                              PmpiCall pmpi) {
  if (route_call(id, {sendbuf, recvbuf}, true).route == Route::kPmpi) return pmpi(sendbuf, recvbuf);
  CommShape shape;
  if (op == MPI_OP_NULL || recvcount < 0 || !comm_shape(comm, &shape)) return pmpi(sendbuf, recvbuf);
  return reduce_scatter_like(id, sendbuf, recvbuf, static_cast<std::int64_t>(recvcount) * shape.size, recvcount,
                             datatype, comm, request, pmpi);
}

// Reduce_scatter: recvcounts is indexed by the local group, also on an
// intercommunicator.
template <typename PmpiCall>
int reduce_scatter_counts_like(FunctionId id, const void* sendbuf, void* recvbuf, const int* recvcounts,
                               MPI_Datatype datatype, MPI_Op op, MPI_Comm comm, CallRequest request,
                               PmpiCall pmpi) {
  if (route_call(id, {sendbuf, recvbuf}, true).route == Route::kPmpi) return pmpi(sendbuf, recvbuf);
  CommShape shape;
  if (op == MPI_OP_NULL || !comm_shape(comm, &shape) || !recvcounts) return pmpi(sendbuf, recvbuf);
  for (int i = 0; i < shape.size; ++i)
    if (recvcounts[i] < 0) return pmpi(sendbuf, recvbuf);
  return reduce_scatter_like(id, sendbuf, recvbuf, sum(recvcounts, shape.size), recvcounts[shape.rank], datatype,
                             comm, request, pmpi);
}

// Blocks of their own types at byte displacements, one per peer (Alltoallw;
// the neighbourhood form's displacements are MPI_Aint).
template <typename Displacement>
auto typed_blocks(FunctionId id, const int* counts, const Displacement* byte_displs, const MPI_Datatype* types,
                  bool counted) {
  return [=](const CommShape& shape, Extent* e) {
    if (!extent_of_typed_blocks(shape.peers, counts, byte_displs, types, e)) return false;
    if (counted)
      for (int p = 0; p < shape.peers; ++p) count_bytes(id, counts[p], types[p]);
    return true;
  };
}

}  // namespace ferry::shim

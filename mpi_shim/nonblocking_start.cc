// The entry points of the nonblocking collectives on the engine
// (nonblocking_engine.h): each fills its call and its board entry, and
// starts it (start_call).
#include <algorithm>
#include <cstdint>
#include <memory>
#include <utility>

#include "engine/collectives/agreement.h"
#include "engine/collectives/collectives.h"
#include "mpi_shim/engine_route.h"
#include "mpi_shim/nonblocking_engine.h"
#include "mpi_shim/nonblocking_state.h"
#include "mpi_shim/route.h"
#include "mpi_shim/staging.h"
#include "mpi_shim/translate.h"
#include "mpi_shim/wrapper_support.h"

namespace ferry::shim::nbc {

bool start_allreduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
                     MPI_Comm comm, MPI_Request* request, int* result) {
  DataType type = DataType::kFloat32;
  ReduceOp reduce = ReduceOp::kSum;
  // The type and op are the same on every rank (MPI requires it).
  if (!request || count <= 0 || !engine_data_type(datatype, &type) || !engine_reduce_op(op, &reduce) ||
      !reduction_defined(type, reduce))
    return false;
  RouteDecision route;
  CommState* state = taking(FunctionId::kIallreduce, comm, {sendbuf, recvbuf}, &route);
  if (!state || !(state->board->allreduce_ready() || state->board->by_leaders())) return false;
  count_bytes(FunctionId::kIallreduce, count, datatype);
  auto call = std::make_unique<Op>();
  call->work.kind = Kind::kAllreduce;
  call->work.send = sendbuf == MPI_IN_PLACE ? nullptr : sendbuf;
  call->work.recv = recvbuf;
  call->work.count = static_cast<std::size_t>(count);
  call->count = count;
  call->datatype = datatype;
  call->mpi_op = op;
  call->work.type = type;
  call->work.reduce = reduce;
  // With GPU leaders, one of them reads the input and writes the output.
  EntryFields entry;
  CallBoard& board = *state->board;
  call->eligible = route.route == Route::kEngine &&
                   (board.by_leaders() ? board.export_buffer(call->work.send ? call->work.send : recvbuf,
                                                             &entry.buffer) &&
                                             board.export_buffer(recvbuf, &entry.received)
                                       : nonblocking_allreduce_possible(*state->engine, call->work.send, recvbuf,
                                                                        count, type, reduce));
  entry.signature = reduction_signature(static_cast<std::size_t>(count), type, reduce);
  *result = start_call(
      *state, std::move(call), route.route == Route::kPmpi, entry,
      [&](MPI_Comm fallback) { return PMPI_Iallreduce(sendbuf, recvbuf, count, datatype, op, fallback, request); },
      request);
  return true;
}

bool start_bcast(void* buffer, int count, MPI_Datatype datatype, int root, MPI_Comm comm, MPI_Request* request,
                 int* result) {
  if (!request) return false;
  RouteDecision route;
  CommState* state = taking(FunctionId::kIbcast, comm, {buffer}, &route);
  if (!state) return false;
  count_bytes(FunctionId::kIbcast, count, datatype);
  auto call = std::make_unique<Op>();
  call->work.kind = Kind::kBcast;
  call->work.recv = buffer;
  call->count = count;
  call->datatype = datatype;
  call->work.root = root;
  int element = 0;
  EntryFields entry;
  const bool root_valid = root >= 0 && root < state->engine->size();
  const gpu::PointerInfo info = gpu::classify(buffer);
  // The root's buffer is pulled; with GPU leaders, every rank's is written
  // by one.
  call->eligible = route.route == Route::kEngine && root_valid && count > 0 && dense_data_type(datatype, &element) &&
                   (state->engine->rank() == root || state->board->by_leaders()
                        ? state->board->export_buffer(buffer, &entry.buffer)
                        : info.kind == gpu::MemoryKind::kDevice && info.device == state->board->device());
  call->work.bytes = static_cast<std::size_t>(count) * element;
  // Packed bytes on every rank, whatever its route.
  entry.signature = rooted_signature(static_cast<std::size_t>(std::max(count, 0)) * packed_size(datatype), root);
  *result = start_call(
      *state, std::move(call), route.route == Route::kPmpi, entry,
      [&](MPI_Comm fallback) { return PMPI_Ibcast(buffer, count, datatype, root, fallback, request); }, request);
  return true;
}

bool start_alltoallv(const void* sendbuf, const int* sendcounts, const int* sdispls, MPI_Datatype sendtype,
                     void* recvbuf, const int* recvcounts, const int* rdispls, MPI_Datatype recvtype, MPI_Comm comm,
                     MPI_Request* request, int* result) {
  if (!request || sendbuf == MPI_IN_PLACE || !sendcounts || !sdispls || !recvcounts || !rdispls) return false;
  RouteDecision route;
  CommState* state = taking(FunctionId::kIalltoallv, comm, {sendbuf, recvbuf}, &route);
  if (!state) return false;
  const int n = state->engine->size();
  auto call = std::make_unique<Op>();
  call->work.kind = Kind::kAlltoallv;
  call->work.send = sendbuf;
  call->work.recv = recvbuf;
  call->datatype = sendtype;
  call->recv_type = recvtype;
  call->send_counts.assign(sendcounts, sendcounts + n);
  call->send_displs.assign(sdispls, sdispls + n);
  call->recv_counts.assign(recvcounts, recvcounts + n);
  call->recv_displs.assign(rdispls, rdispls + n);
  std::uint64_t sent = 0;
  for (int p = 0; p < n; ++p) sent += static_cast<std::uint64_t>(std::max(0, sendcounts[p]));
  count_bytes(FunctionId::kIalltoallv, static_cast<int>(std::min<std::uint64_t>(sent, INT32_MAX)), sendtype);
  int send_size = 0, recv_size = 0;
  bool layout_ok = dense_data_type(sendtype, &send_size) && dense_data_type(recvtype, &recv_size) &&
                   send_size == recv_size;
  EntryFields entry;
  entry.offsets.assign(n, 0);
  std::vector<std::size_t>& recv_bytes = call->work.recv_bytes;
  std::vector<std::size_t>& recv_offsets = call->work.recv_offsets;
  for (int p = 0; layout_ok && p < n; ++p) {
    layout_ok = sendcounts[p] >= 0 && sdispls[p] >= 0 && recvcounts[p] >= 0 && rdispls[p] >= 0;
    entry.offsets[p] = static_cast<std::uint64_t>(sdispls[p]) * send_size;
    recv_bytes.push_back(static_cast<std::size_t>(recvcounts[p]) * recv_size);
    recv_offsets.push_back(static_cast<std::size_t>(rdispls[p]) * recv_size);
  }
  entry.recv_offsets.assign(recv_offsets.begin(), recv_offsets.end());
  entry.recv_bytes.assign(recv_bytes.begin(), recv_bytes.end());
  // Packed bytes per peer on every rank, whatever its route.
  entry.signature = exchange_signature(state->engine->rank(), n, packed_block_bytes(n, sendcounts, sendtype).data(),
                                       packed_block_bytes(n, recvcounts, recvtype).data());
  const gpu::PointerInfo recv_info = gpu::classify(recvbuf);
  CallBoard& board = *state->board;
  // With GPU leaders, one of them writes the receive buffer.
  const auto receive_ready = [&] {
    return board.by_leaders() ? board.export_buffer(recvbuf, &entry.received)
                              : recv_info.kind == gpu::MemoryKind::kDevice && recv_info.device == board.device();
  };
  call->eligible =
      route.route == Route::kEngine && layout_ok && board.export_buffer(sendbuf, &entry.buffer) && receive_ready();
  *result = start_call(
      *state, std::move(call), route.route == Route::kPmpi, entry,
      [&](MPI_Comm fallback) {
        return PMPI_Ialltoallv(sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls, recvtype,
                               fallback, request);
      },
      request);
  return true;
}

}  // namespace ferry::shim::nbc

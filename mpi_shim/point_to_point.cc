// Blocking point-to-point on the staged route.
#include "mpi_shim/point_to_point.h"

#include <algorithm>

#include "engine/gpu/gpu.h"
#include "handlers.h"
#include "mpi_shim/staged_requests.h"
#include "mpi_shim/route.h"
#include "mpi_shim/staging.h"
#include "mpi_shim/stats.h"

namespace ferry::shim {
namespace {

template <typename PmpiCall>
int send_like(FunctionId id, const void* buf, int count, MPI_Datatype datatype, MPI_Comm comm, PmpiCall pmpi) {
  count_bytes(id, count, datatype);
  if (route_call(id, {buf}, true).route == Route::kPmpi) return pmpi(buf);
  Extent extent;
  if (comm == MPI_COMM_NULL || !extent_of(count, datatype, &extent)) return pmpi(buf);
  Staging staging(id, comm);
  const void* send = staging.in(buf, extent);
  if (staging.failed()) return staging.raise();
  return staging.finish(pmpi(send));
}

// A send through peer memory: the send as MPI_Isend would make it, the
// receive as MPI_Recv, and the wait. MPI_Sendrecv guarantees no more.
int sendrecv_with_peers(const void* sendbuf, int sendcount, MPI_Datatype sendtype, int dest, int sendtag,
                        void* recvbuf, int recvcount, MPI_Datatype recvtype, int source, int recvtag, MPI_Comm comm,
                        MPI_Status* status) {
  bool offered = false;
  const int exchanged = peer::sendrecv(
      sendbuf, sendcount, sendtype, dest, sendtag,
      [&] { return handle_Recv(recvbuf, recvcount, recvtype, source, recvtag, comm, status); }, comm, &offered);
  if (offered) return exchanged;
  MPI_Request send = MPI_REQUEST_NULL;
  int result = send_through(
      FunctionId::kSendrecv, peer::Mode::kStandard, sendbuf, sendcount, sendtype, dest, sendtag, comm, &send, [&] {
        return post_staged(FunctionId::kIsend, const_cast<void*>(sendbuf), sendcount, sendtype, comm, &send, false,
                           Lifetime::kOnce,
                           [&](void* b) { return PMPI_Isend(b, sendcount, sendtype, dest, sendtag, comm, &send); });
      });
  if (result != MPI_SUCCESS) return result;
  const int received = handle_Recv(recvbuf, recvcount, recvtype, source, recvtag, comm, status);
  result = handle_Wait(&send, MPI_STATUS_IGNORE);
  return received != MPI_SUCCESS ? received : result;
}

// The message goes out of a copy of the buffer, so the receive may fill it.
int sendrecv_replace_with_peers(void* buf, int count, MPI_Datatype datatype, int dest, int sendtag, int source,
                                int recvtag, MPI_Comm comm, MPI_Status* status) {
  Extent extent;
  if (comm == MPI_COMM_NULL || !extent_of(count, datatype, &extent))
    return PMPI_Sendrecv_replace(buf, count, datatype, dest, sendtag, source, recvtag, comm, status);
  const gpu::PointerInfo info = gpu::classify(static_cast<char*>(buf) + extent.lb);
  if (info.kind != gpu::MemoryKind::kDevice) {
    const int announced = peer::before_send(count, datatype, dest, sendtag, comm);
    if (announced != MPI_SUCCESS) return raise_error(comm, announced);
    MPI_Status local;
    MPI_Status* st = status == MPI_STATUS_IGNORE ? &local : status;
    int result = PMPI_Sendrecv_replace(buf, count, datatype, dest, sendtag, source, recvtag, comm, st);
    if (result == MPI_SUCCESS && peer::checks_receives(comm))
      result = peer::after_receive(comm, buf, count, datatype, st);
    return result == MPI_SUCCESS ? result : raise_error(comm, result);
  }
  // A device buffer: the message goes out of a copy of it (through peer
  // memory, its bounce buffer; else a staged one), then the receive fills it.
  Staging staging(FunctionId::kSendrecv_replace, comm);
  MPI_Request send = MPI_REQUEST_NULL;
  int result = send_through(FunctionId::kSendrecv_replace, peer::Mode::kStandard, buf, count, datatype, dest, sendtag,
                            comm, &send, [&] {
                              const void* copy = staging.in(buf, extent);
                              if (staging.failed()) return staging.raise();
                              return PMPI_Isend(copy, count, datatype, dest, sendtag, comm, &send);
                            });
  if (result != MPI_SUCCESS) return result;
  // Through peer memory the send completes without its receive, once the
  // copy out of buf is done, which must come before the receive fills buf.
  const bool staged = staging.staged_any();
  if (!staged) result = handle_Wait(&send, MPI_STATUS_IGNORE);
  const int received = handle_Recv(buf, count, datatype, source, recvtag, comm, status);
  if (staged) result = handle_Wait(&send, MPI_STATUS_IGNORE);
  return received != MPI_SUCCESS ? received : staging.finish(result);
}

}  // namespace

int handle_Send(const void* buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm) {
  return send_through(FunctionId::kSend, peer::Mode::kStandard, buf, count, datatype, dest, tag, comm, nullptr, [&] {
    return send_like(FunctionId::kSend, buf, count, datatype, comm,
                     [&](const void* b) { return PMPI_Send(b, count, datatype, dest, tag, comm); });
  });
}

int handle_Ssend(const void* buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm) {
  return send_through(FunctionId::kSsend, peer::Mode::kSynchronous, buf, count, datatype, dest, tag, comm, nullptr, [&] {
    return send_like(FunctionId::kSsend, buf, count, datatype, comm,
                     [&](const void* b) { return PMPI_Ssend(b, count, datatype, dest, tag, comm); });
  });
}

int handle_Bsend(const void* buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm) {
  // The real MPI copies into the attached buffer before returning, so the
  // staging copy can go back to the pool at once.
  return send_through(FunctionId::kBsend, peer::Mode::kNone, buf, count, datatype, dest, tag, comm, nullptr, [&] {
    return send_like(FunctionId::kBsend, buf, count, datatype, comm,
                     [&](const void* b) { return PMPI_Bsend(b, count, datatype, dest, tag, comm); });
  });
}

int handle_Rsend(const void* buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm) {
  return send_through(FunctionId::kRsend, peer::Mode::kReady, buf, count, datatype, dest, tag, comm, nullptr, [&] {
    return send_like(FunctionId::kRsend, buf, count, datatype, comm,
                     [&](const void* b) { return PMPI_Rsend(b, count, datatype, dest, tag, comm); });
  });
}

int handle_Recv(void* buf, int count, MPI_Datatype datatype, int source, int tag, MPI_Comm comm, MPI_Status* status) {
  // A device buffer on a communicator with peers: the message is matched
  // first, so a marker's data goes straight into buf and only a message
  // that carries its data is staged, at its own size. (Invalid arguments go
  // to the real MPI as they are, for its error.)
  Extent extent;
  gpu::CallBuffers classified;  // buf's copy asks again
  if (peer::checks_receives(comm) && extent_of(count, datatype, &extent) &&
      gpu::CallBuffers::remember(buf).kind == gpu::MemoryKind::kDevice) {
    MPI_Status local;
    MPI_Status* st = status == MPI_STATUS_IGNORE ? &local : status;
    MPI_Message message = MPI_MESSAGE_NULL;
    int result = PMPI_Mprobe(source, tag, comm, &message, st);
    peer::TakenEnvelope* taken = nullptr;
    if (result == MPI_SUCCESS && message != MPI_MESSAGE_NO_PROC) result = peer::after_matched_probe(comm, st, &taken);
    if (result != MPI_SUCCESS) return raise_error(comm, result);
    if (taken) {
      count_bytes(FunctionId::kRecv, count, datatype);
      record_route(FunctionId::kRecv, RouteDecision{Route::kEngine, "peer memory"});
      result = PMPI_Mrecv(nullptr, 0, MPI_BYTE, &message, st);
      if (result == MPI_SUCCESS) result = peer::receive_taken(comm, taken, buf, count, datatype, st);
      return result == MPI_SUCCESS ? result : raise_error(comm, result);
    }
    int received = 0;
    PMPI_Get_count(st, datatype, &received);
    const int size = received == MPI_UNDEFINED ? count : std::min(count, received + 1);
    return receive_staged(
        FunctionId::kRecv, buf, size, datatype, comm, status,
        [&](void* b, MPI_Status* s) { return PMPI_Mrecv(b, size, datatype, &message, s); }, false);
  }
  return receive_staged(FunctionId::kRecv, buf, count, datatype, comm, status, [&](void* b, MPI_Status* st) {
    return PMPI_Recv(b, count, datatype, source, tag, comm, st);
  });
}

int handle_Sendrecv(const void* sendbuf, int sendcount, MPI_Datatype sendtype, int dest, int sendtag, void* recvbuf,
                    int recvcount, MPI_Datatype recvtype, int source, int recvtag, MPI_Comm comm, MPI_Status* status) {
  const FunctionId id = FunctionId::kSendrecv;
  if (peer::takes(sendbuf, sendcount, sendtype, dest, sendtag, comm))
    return sendrecv_with_peers(sendbuf, sendcount, sendtype, dest, sendtag, recvbuf, recvcount, recvtype, source,
                               recvtag, comm, status);
  const int announced = peer::before_send(sendcount, sendtype, dest, sendtag, comm);
  if (announced != MPI_SUCCESS) return raise_error(comm, announced);
  count_bytes(id, sendcount, sendtype);
  auto pmpi = [&](const void* s, void* r, MPI_Status* st) {
    return PMPI_Sendrecv(s, sendcount, sendtype, dest, sendtag, r, recvcount, recvtype, source, recvtag, comm, st);
  };
  // A receive that matched a marker gets its data.
  const bool checked = peer::checks_receives(comm);
  MPI_Status local;
  MPI_Status* st = status == MPI_STATUS_IGNORE ? &local : status;
  auto check = [&](int result) {
    if (result != MPI_SUCCESS || !checked) return result;
    const int received = peer::after_receive(comm, recvbuf, recvcount, recvtype, st);
    return received == MPI_SUCCESS ? received : raise_error(comm, received);
  };
  if (route_call(id, {sendbuf, recvbuf}, true).route == Route::kPmpi)
    return check(pmpi(sendbuf, recvbuf, checked ? st : status));
  Extent send_extent, recv_extent;
  if (comm == MPI_COMM_NULL || !extent_of(sendcount, sendtype, &send_extent) ||
      !extent_of(recvcount, recvtype, &recv_extent))
    return check(pmpi(sendbuf, recvbuf, checked ? st : status));
  Staging staging(id, comm);
  const void* send = staging.in(sendbuf, send_extent);
  void* recv = staging.receive(recvbuf, recv_extent, recvtype);
  if (staging.failed()) return staging.raise();
  const int result = pmpi(send, recv, st);
  if (result == MPI_SUCCESS) staging.received(*st);
  return check(staging.finish(result));
}

int handle_Sendrecv_replace(void* buf, int count, MPI_Datatype datatype, int dest, int sendtag, int source,
                            int recvtag, MPI_Comm comm, MPI_Status* status) {
  const FunctionId id = FunctionId::kSendrecv_replace;
  if (peer::active()) return sendrecv_replace_with_peers(buf, count, datatype, dest, sendtag, source, recvtag, comm,
                                                         status);
  count_bytes(id, count, datatype);
  auto pmpi = [&](void* b) {
    return PMPI_Sendrecv_replace(b, count, datatype, dest, sendtag, source, recvtag, comm, status);
  };
  if (route_call(id, {buf}, true).route == Route::kPmpi) return pmpi(buf);
  Extent extent;
  if (comm == MPI_COMM_NULL || !extent_of(count, datatype, &extent)) return pmpi(buf);
  Staging staging(id, comm);
  void* staged = staging.inout(buf, extent);
  if (staging.failed()) return staging.raise();
  return staging.finish(pmpi(staged));
}

}  // namespace ferry::shim

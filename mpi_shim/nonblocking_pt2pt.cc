// The nonblocking point-to-point calls: through peer memory where the send
// can go there (point_to_point.h), else staged (staged_requests.h), else the
// real MPI's as they are. MPI 4.0's MPI_Isendrecv(_replace) are staged, their
// send announced to a peer that checks receives (peer_pt2pt.h), and not
// cancellable: MPICH leaves their statuses unwritten, so a staged one's
// copies never depend on a status, and one whose receive is checked is
// posted as a receive and a send apart (track_apart).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "handlers.h"
#include "mpi_shim/point_to_point.h"
#include "mpi_shim/staged_requests.h"

namespace ferry::shim {
namespace {

#if defined(FERRY_MPI_40)
// An MPI_Isendrecv(_replace) posted apart: post_receive(request), then
// post_send(&send); staging (may be null) and send_copy go with the request.
template <typename PostReceive, typename PostSend>
int post_apart(Staging* staging, MPI_Request* request, const CheckedReceive& checked, std::vector<std::byte> send_copy,
               PostReceive post_receive, PostSend post_send) {
  int result = post_receive(request);
  if (result != MPI_SUCCESS) return result;
  MPI_Request send = MPI_REQUEST_NULL;
  result = post_send(&send);
  if (result != MPI_SUCCESS) {
    // Nothing of the call is left behind: the receive completes (cancelled
    // or matched) before its buffers are released.
    PMPI_Cancel(request);
    PMPI_Wait(request, MPI_STATUS_IGNORE);
    return result;
  }
  track_apart(*request, send, staging ? std::make_unique<Staging>(std::move(*staging)) : nullptr,
              std::move(send_copy), checked);
  return MPI_SUCCESS;
}
#endif  // FERRY_MPI_40

}  // namespace

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
    auto apart = [&](const void* send, void* recv, Staging* staging) {
      return post_apart(
          staging, request, checked, {},
          [&](MPI_Request* r) { return PMPI_Irecv(recv, recvcount, recvtype, source, recvtag, comm, r); },
          [&](MPI_Request* r) { return PMPI_Isend(send, sendcount, sendtype, dest, sendtag, comm, r); });
    };
    auto unstaged = [&] { return unstaged_result(pmpi(sendbuf, recvbuf), request, checked, Lifetime::kOnce); };
    const bool valid = comm != MPI_COMM_NULL && request;
    if (route_call(id, {sendbuf, recvbuf}, true).route == Route::kPmpi)
      return checked.on() && valid ? apart(sendbuf, recvbuf, nullptr) : unstaged();
    Extent send_extent, recv_extent;
    if (!valid || !extent_of(sendcount, sendtype, &send_extent) || !extent_of(recvcount, recvtype, &recv_extent))
      return unstaged();
    // The receive buffer goes both ways whole, never cut to the status's
    // count: MPICH leaves the status of this request as it was.
    Staging staging(id, comm);
    const void* send = staging.in(sendbuf, send_extent);
    void* recv = staging.inout(recvbuf, recv_extent);
    if (staging.failed()) return staging.raise();
    if (checked.on()) return apart(send, recv, &staging);
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
    Extent extent;
    const bool valid = comm != MPI_COMM_NULL && request && extent_of(count, datatype, &extent);
    // Apart, the message sent is a copy of the buffer taken now, and the
    // receive lands in the buffer itself.
    auto apart = [&](void* target, Staging* staging) {
      // Addresses as integers: MPI_BOTTOM is a null pointer.
      const auto at = [&](const void* p, std::ptrdiff_t offset) {
        return reinterpret_cast<std::byte*>(reinterpret_cast<std::uintptr_t>(p) + offset);
      };
      std::vector<std::byte> copy(extent.bytes);
      if (extent.bytes > 0 && !ok(gpu::copy(copy.data(), at(target, extent.lb), extent.bytes)))
        return raise_error(comm, MPI_ERR_OTHER);
      const std::byte* send = at(copy.data(), -extent.lb);
      return post_apart(
          staging, request, checked, std::move(copy),
          [&](MPI_Request* r) { return PMPI_Irecv(target, count, datatype, source, recvtag, comm, r); },
          [&](MPI_Request* r) { return PMPI_Isend(send, count, datatype, dest, sendtag, comm, r); });
    };
    auto unstaged = [&] { return unstaged_result(pmpi(buf), request, checked, Lifetime::kOnce); };
    if (route_call(id, {buf}, true).route == Route::kPmpi)
      return checked.on() && valid ? apart(buf, nullptr) : unstaged();
    if (!valid) return unstaged();
    Staging staging(id, comm);
    void* staged = staging.inout(buf, extent);
    if (staging.failed()) return staging.raise();
    if (checked.on()) return apart(staged, &staging);
    return end_staged(staging, pmpi(staged), request, Lifetime::kOnce, false, checked, false);
  });
}
#endif  // FERRY_MPI_40

}  // namespace ferry::shim

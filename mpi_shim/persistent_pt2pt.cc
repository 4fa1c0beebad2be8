// The persistent point-to-point inits (MPI_Send_init and its kin,
// MPI_Recv_init): a send through peer memory where it can go there
// (peer::send_init), else staged, the copy taken again at every MPI_Start
// (staged_requests.h). MPI_Start itself is request_registry.cc's.
#include <cstdint>
#include <functional>
#include <memory>
#include <utility>

#include "handlers.h"
#include "mpi_shim/point_to_point.h"
#include "mpi_shim/staged_requests.h"

namespace ferry::shim {
namespace {

// A persistent send of an empty message to a peer of this machine: its
// envelope goes before every MPI_Start of it; not cancellable.
class EmptyPersistentSend final : public TrackedRequest {
 public:
  explicit EmptyPersistentSend(std::function<int()> announce)
      : TrackedRequest(Lifetime::kPersistent), announce_(std::move(announce)) {
    make_uncancellable();
  }

 private:
  int on_restart() override { return announce_(); }
  std::function<int()> announce_;
};

// A persistent send of an empty message to a peer of this machine sends its
// envelope at every MPI_Start.
int announce_at_every_start(int result, MPI_Request* request, int count, MPI_Datatype type, int dest, int tag,
                            MPI_Comm comm) {
  if (result != MPI_SUCCESS || !peer::active() || !peer::checks_receives(comm)) return result;
  int size = 0;
  if (PMPI_Type_size(type, &size) != MPI_SUCCESS || static_cast<std::int64_t>(count) * size != 0) return result;
  track(*request,
        std::make_unique<EmptyPersistentSend>([=] { return peer::before_send(count, type, dest, tag, comm); }));
  return result;
}

using PmpiSendInit = int (*)(const void*, int, MPI_Datatype, int, int, MPI_Comm, MPI_Request*);

// MPI_Send_init and its kin: through peer memory where the send can go
// there (peer::send_init), else staged by the real call pmpi_init.
int persistent_send(FunctionId id, peer::Mode mode, PmpiSendInit pmpi_init, const void* buf, int count,
                    MPI_Datatype datatype, int dest, int tag, MPI_Comm comm, MPI_Request* request) {
  bool handled = false;
  const int through_peer =
      peer::active() ? peer::send_init(id, mode, buf, count, datatype, dest, tag, comm, request, &handled) : MPI_SUCCESS;
  if (handled) {
    count_bytes(id, count, datatype);
    return through_peer;
  }
  const int result = post_staged(id, const_cast<void*>(buf), count, datatype, comm, request, false,
                                 Lifetime::kPersistent,
                                 [&](void* b) { return pmpi_init(b, count, datatype, dest, tag, comm, request); });
  return announce_at_every_start(result, request, count, datatype, dest, tag, comm);
}

}  // namespace

int handle_Send_init(const void* buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm,
                     MPI_Request* request) {
  return persistent_send(FunctionId::kSend_init, peer::Mode::kStandard, PMPI_Send_init, buf, count, datatype, dest,
                         tag, comm, request);
}

int handle_Ssend_init(const void* buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm,
                      MPI_Request* request) {
  return persistent_send(FunctionId::kSsend_init, peer::Mode::kSynchronous, PMPI_Ssend_init, buf, count, datatype,
                         dest, tag, comm, request);
}

int handle_Bsend_init(const void* buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm,
                      MPI_Request* request) {
  return persistent_send(FunctionId::kBsend_init, peer::Mode::kNone, PMPI_Bsend_init, buf, count, datatype, dest,
                         tag, comm, request);
}

int handle_Rsend_init(const void* buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm,
                      MPI_Request* request) {
  return persistent_send(FunctionId::kRsend_init, peer::Mode::kReady, PMPI_Rsend_init, buf, count, datatype, dest,
                         tag, comm, request);
}

int handle_Recv_init(void* buf, int count, MPI_Datatype datatype, int source, int tag, MPI_Comm comm,
                     MPI_Request* request) {
  return post_staged(
      FunctionId::kRecv_init, buf, count, datatype, comm, request, true, Lifetime::kPersistent,
      [&](void* b) { return PMPI_Recv_init(b, count, datatype, source, tag, comm, request); },
      source != MPI_PROC_NULL);
}

}  // namespace ferry::shim

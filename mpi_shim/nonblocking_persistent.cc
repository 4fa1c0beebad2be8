// Persistent collectives (nonblocking_engine.h): the handle is a real
// persistent request of the MPI's standing for the call's arguments, tracked
// in the request registry; each MPI_Start makes the nonblocking call behind
// it. The handle is a persistent receive the real MPI completes as soon as
// it is started: from MPI_PROC_NULL; under MPICH, whose MPI_Testany,
// MPI_Waitany and MPI_Testsome take a started one from MPI_PROC_NULL for
// inactive, one on a private duplicate of MPI_COMM_SELF that a zero-byte
// send completes at each start.
#include <memory>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include "handlers.h"
#include "mpi_shim/nonblocking_engine.h"
#include "mpi_shim/nonblocking_state.h"
#include "mpi_shim/request_registry.h"
#include "mpi_shim/wrapper_support.h"

namespace ferry::shim::nbc {
namespace {

// A persistent collective: its arguments, and the call running behind the
// handle since its last MPI_Start.
struct Persistent {
  Kind kind = Kind::kAllreduce;
  MPI_Comm comm = MPI_COMM_NULL;
  const void* send = nullptr;
  void* recv = nullptr;
  int count = 0;
  MPI_Datatype datatype = MPI_DATATYPE_NULL, recv_type = MPI_DATATYPE_NULL;
  MPI_Op op = MPI_OP_NULL;
  int root = 0;
  std::vector<int> send_counts, send_displs, recv_counts, recv_displs;
  MPI_Request running = MPI_REQUEST_NULL;  // the nonblocking call's, until it is done
};

std::mutex g_persistent_mutex;
std::unordered_map<MPI_Request, Persistent>& persistents() {
  static auto* map = new std::unordered_map<MPI_Request, Persistent>;
  return *map;
}

#if defined(FERRY_MPI_MPICH)
MPI_Comm placeholder_comm() {
  static const MPI_Comm comm = [] {
    MPI_Comm dup = MPI_COMM_NULL;
    PMPI_Comm_dup(MPI_COMM_SELF, &dup);
    return dup;
  }();
  return comm;
}
int make_placeholder(MPI_Comm, MPI_Request* request) {
  return PMPI_Recv_init(nullptr, 0, MPI_BYTE, 0, 0, placeholder_comm(), request);
}
// After the real MPI started the handle.
int complete_placeholder() { return PMPI_Send(nullptr, 0, MPI_BYTE, 0, 0, placeholder_comm()); }
#else
int make_placeholder(MPI_Comm comm, MPI_Request* request) {
  return PMPI_Recv_init(nullptr, 0, MPI_BYTE, MPI_PROC_NULL, 0, comm, request);
}
int complete_placeholder() { return MPI_SUCCESS; }
#endif

// The call running behind handle; MPI_REQUEST_NULL when none is.
MPI_Request running_call(MPI_Request handle) {
  if (handle == MPI_REQUEST_NULL) return MPI_REQUEST_NULL;
  std::lock_guard<std::mutex> lock(g_persistent_mutex);
  auto it = persistents().find(handle);
  return it == persistents().end() ? MPI_REQUEST_NULL : it->second.running;
}

// Finishes handle's running call (wait) or looks once; true when it is done.
bool finish_running(MPI_Request handle, bool wait, int* error) {
  MPI_Request running = running_call(handle);
  if (running == MPI_REQUEST_NULL) return true;
  int done = 1;
  // The completion calls (request_completion.cc): staged copies delivered,
  // engine calls settled.
  const int result = wait ? handle_Wait(&running, MPI_STATUS_IGNORE) : handle_Test(&running, &done, MPI_STATUS_IGNORE);
  if (result == MPI_SUCCESS && !done) return false;
  std::lock_guard<std::mutex> lock(g_persistent_mutex);
  persistents().at(handle).running = MPI_REQUEST_NULL;
  if (error && *error == MPI_SUCCESS) *error = result;
  return true;
}

int start_persistent(MPI_Request* request) {
  Persistent call;
  {
    std::lock_guard<std::mutex> lock(g_persistent_mutex);
    call = persistents().at(*request);
  }
  // The real MPI refuses to start an active handle; once it started it,
  // the handle stays complete for it until the call behind it is done.
  int result = PMPI_Start(request);
  if (result == MPI_SUCCESS) result = complete_placeholder();
  if (result != MPI_SUCCESS) return result;
  MPI_Request running = MPI_REQUEST_NULL;
  switch (call.kind) {
    case Kind::kAllreduce:
      result = handle_Iallreduce(call.send, call.recv, call.count, call.datatype, call.op, call.comm, &running);
      break;
    case Kind::kBcast:
      result = handle_Ibcast(call.recv, call.count, call.datatype, call.root, call.comm, &running);
      break;
    case Kind::kAlltoallv:
      result = handle_Ialltoallv(call.send, call.send_counts.data(), call.send_displs.data(), call.datatype,
                                 call.recv, call.recv_counts.data(), call.recv_displs.data(), call.recv_type,
                                 call.comm, &running);
      break;
  }
  if (result != MPI_SUCCESS) return result;
  std::lock_guard<std::mutex> lock(g_persistent_mutex);
  persistents().at(*request).running = running;
  return MPI_SUCCESS;
}

int free_persistent(MPI_Request* request) {
  {
    std::lock_guard<std::mutex> lock(g_persistent_mutex);
    auto it = persistents().find(*request);
    if (it->second.running != MPI_REQUEST_NULL) return raise_error(it->second.comm, MPI_ERR_REQUEST);
    persistents().erase(it);
  }
  return PMPI_Request_free(request);
}

// A persistent collective's handle: the call behind it is finished before
// the real MPI sees the handle, which it would report complete; each
// MPI_Start makes the call anew.
class PersistentCollective final : public TrackedRequest {
 public:
  PersistentCollective() : TrackedRequest(Lifetime::kPersistent) {}
  bool settles(MPI_Request) const override { return true; }
  Settled settle(MPI_Request handle, bool wait) override {
    Settled settled;
    settled.running = !finish_running(handle, wait, &settled.error);
    return settled;
  }
  bool starts_alone() const override { return true; }
  int start(MPI_Request* handle) override { return start_persistent(handle); }
  int free(MPI_Request* handle) override { return free_persistent(handle); }

 private:
  // A collective's status says nothing of a message: the empty one, not
  // the placeholder receive's.
  int complete(MPI_Status& status) override {
    status.MPI_SOURCE = MPI_ANY_SOURCE;
    status.MPI_TAG = MPI_ANY_TAG;
    PMPI_Status_set_elements(&status, MPI_BYTE, 0);
    PMPI_Status_set_cancelled(&status, 0);
    return MPI_SUCCESS;
  }
};

int make_persistent(Persistent call, MPI_Request* request) {
  if (!request) return raise_error(call.comm, MPI_ERR_REQUEST);
  const int result = make_placeholder(call.comm, request);
  if (result != MPI_SUCCESS) return result;
  {
    std::lock_guard<std::mutex> lock(g_persistent_mutex);
    persistents()[*request] = std::move(call);
  }
  track(*request, std::make_unique<PersistentCollective>());
  return MPI_SUCCESS;
}

}  // namespace

int init_allreduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype datatype, MPI_Op op, MPI_Comm comm,
                   MPI_Request* request) {
  Persistent call;
  call.kind = Kind::kAllreduce;
  call.comm = comm;
  call.send = sendbuf;
  call.recv = recvbuf;
  call.count = count;
  call.datatype = datatype;
  call.op = op;
  return make_persistent(std::move(call), request);
}

int init_bcast(void* buffer, int count, MPI_Datatype datatype, int root, MPI_Comm comm, MPI_Request* request) {
  Persistent call;
  call.kind = Kind::kBcast;
  call.comm = comm;
  call.recv = buffer;
  call.count = count;
  call.datatype = datatype;
  call.root = root;
  return make_persistent(std::move(call), request);
}

int init_alltoallv(const void* sendbuf, const int* sendcounts, const int* sdispls, MPI_Datatype sendtype,
                   void* recvbuf, const int* recvcounts, const int* rdispls, MPI_Datatype recvtype, MPI_Comm comm,
                   MPI_Request* request) {
  int inter = 0, size = 0;
  if (comm == MPI_COMM_NULL || PMPI_Comm_test_inter(comm, &inter) != MPI_SUCCESS)
    return raise_error(MPI_COMM_WORLD, MPI_ERR_COMM);
  // An intercommunicator's counts are per rank of the remote group.
  if (inter) {
    PMPI_Comm_remote_size(comm, &size);
  } else {
    PMPI_Comm_size(comm, &size);
  }
  if (!sendcounts || !sdispls || !recvcounts || !rdispls) return raise_error(comm, MPI_ERR_ARG);
  Persistent call;
  call.kind = Kind::kAlltoallv;
  call.comm = comm;
  call.send = sendbuf;
  call.recv = recvbuf;
  call.datatype = sendtype;
  call.recv_type = recvtype;
  call.send_counts.assign(sendcounts, sendcounts + size);
  call.send_displs.assign(sdispls, sdispls + size);
  call.recv_counts.assign(recvcounts, recvcounts + size);
  call.recv_displs.assign(rdispls, rdispls + size);
  return make_persistent(std::move(call), request);
}

}  // namespace ferry::shim::nbc

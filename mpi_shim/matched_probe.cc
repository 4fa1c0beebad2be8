// Matched probes: MPI_Mprobe and MPI_Improbe take a message off the queue;
// MPI_Mrecv and MPI_Imrecv receive it, into a device buffer through staging.
// A message handle does not tell its communicator, whose error handler a
// staging failure must go through, so the probes remember it.
#include <mutex>
#include <unordered_map>

#include "handlers.h"
#include "mpi_shim/point_to_point.h"
#include "mpi_shim/requests.h"

namespace ferry::shim {
namespace {

std::mutex messages_mutex;
std::unordered_map<MPI_Message, MPI_Comm>& message_comms() {
  static auto* table = new std::unordered_map<MPI_Message, MPI_Comm>;
  return *table;
}

void remember(MPI_Message message, MPI_Comm comm) {
  if (message == MPI_MESSAGE_NULL || message == MPI_MESSAGE_NO_PROC) return;
  std::lock_guard<std::mutex> lock(messages_mutex);
  message_comms()[message] = comm;
}

// The communicator a message was probed on, forgotten as it is received;
// MPI_COMM_WORLD for MPI_MESSAGE_NO_PROC and handles the probes did not see.
MPI_Comm take_comm(const MPI_Message* message) {
  if (!message) return MPI_COMM_WORLD;
  std::lock_guard<std::mutex> lock(messages_mutex);
  auto it = message_comms().find(*message);
  if (it == message_comms().end()) return MPI_COMM_WORLD;
  const MPI_Comm comm = it->second;
  message_comms().erase(it);
  return comm;
}

}  // namespace

int handle_Mprobe(int source, int tag, MPI_Comm comm, MPI_Message* message, MPI_Status* status) {
  const int result = PMPI_Mprobe(source, tag, comm, message, status);
  if (result == MPI_SUCCESS) remember(*message, comm);
  return result;
}

int handle_Improbe(int source, int tag, MPI_Comm comm, int* flag, MPI_Message* message, MPI_Status* status) {
  const int result = PMPI_Improbe(source, tag, comm, flag, message, status);
  if (result == MPI_SUCCESS && *flag) remember(*message, comm);
  return result;
}

int handle_Mrecv(void* buf, int count, MPI_Datatype datatype, MPI_Message* message, MPI_Status* status) {
  return receive_staged(FunctionId::kMrecv, buf, count, datatype, take_comm(message), status,
                        [&](void* b, MPI_Status* st) { return PMPI_Mrecv(b, count, datatype, message, st); });
}

int handle_Imrecv(void* buf, int count, MPI_Datatype datatype, MPI_Message* message, MPI_Request* request) {
  return post_staged(FunctionId::kImrecv, buf, count, datatype, take_comm(message), request, true, Lifetime::kOnce,
                     [&](void* b) { return PMPI_Imrecv(b, count, datatype, message, request); });
}

}  // namespace ferry::shim

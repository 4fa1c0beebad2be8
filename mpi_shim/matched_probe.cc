// Matched probes: MPI_Mprobe and MPI_Improbe take a message off the queue;
// MPI_Mrecv and MPI_Imrecv receive it, into a device buffer through staging.
// A message handle does not tell its communicator, whose error handler a
// staging failure must go through, so the probes remember it -- and, for a
// marker of a send through peer memory, the envelope they took with it.
#include <mutex>
#include <unordered_map>

#include "handlers.h"
#include "mpi_shim/point_to_point.h"
#include "mpi_shim/staged_requests.h"

namespace ferry::shim {
namespace {

// What a probe learned about a message: its communicator, and the envelope
// it took if the message is a marker (peer_pt2pt.h).
struct Probed {
  MPI_Comm comm;
  peer::TakenEnvelope* taken;
};

std::mutex messages_mutex;
std::unordered_map<MPI_Message, Probed>& probed_messages() {
  static auto* table = new std::unordered_map<MPI_Message, Probed>;
  return *table;
}

void remember(MPI_Message message, MPI_Comm comm, peer::TakenEnvelope* taken) {
  if (message == MPI_MESSAGE_NULL || message == MPI_MESSAGE_NO_PROC) return;
  std::lock_guard<std::mutex> lock(messages_mutex);
  probed_messages()[message] = Probed{comm, taken};
}

// What the probe remembered, forgotten as the message is received;
// MPI_COMM_WORLD for MPI_MESSAGE_NO_PROC and handles the probes did not see.
Probed take_probed(const MPI_Message* message) {
  if (!message) return {MPI_COMM_WORLD, nullptr};
  std::lock_guard<std::mutex> lock(messages_mutex);
  auto it = probed_messages().find(*message);
  if (it == probed_messages().end()) return {MPI_COMM_WORLD, nullptr};
  const Probed probed = it->second;
  probed_messages().erase(it);
  return probed;
}

// A matched probe found a message: a marker's envelope goes with it. On a
// checked communicator, status is never MPI_STATUS_IGNORE.
int after_probe(MPI_Comm comm, MPI_Message* message, MPI_Status* status) {
  peer::TakenEnvelope* taken = nullptr;
  if (peer::checks_receives(comm) && *message != MPI_MESSAGE_NO_PROC) {
    const int rc = peer::after_matched_probe(comm, status, &taken);
    if (rc != MPI_SUCCESS) return raise_error(comm, rc);
  }
  remember(*message, comm, taken);
  return MPI_SUCCESS;
}

// A request that is complete already and reports status: MPI_Imrecv of a
// marker, whose data is received before the call returns.
int marker_status_request(const MPI_Status& status, MPI_Request* request) {
  auto* copy = new MPI_Status(status);
  copy->MPI_ERROR = MPI_SUCCESS;
  auto query = [](void* state, MPI_Status* out) -> int {
    *out = *static_cast<MPI_Status*>(state);
    return MPI_SUCCESS;
  };
  auto release = [](void* state) -> int {
    delete static_cast<MPI_Status*>(state);
    return MPI_SUCCESS;
  };
  auto cancel = [](void*, int) -> int { return MPI_SUCCESS; };
  int rc = PMPI_Grequest_start(query, release, cancel, copy, request);
  if (rc != MPI_SUCCESS) {
    delete copy;
    return rc;
  }
  return PMPI_Grequest_complete(*request);
}

}  // namespace

int handle_Mprobe(int source, int tag, MPI_Comm comm, MPI_Message* message, MPI_Status* status) {
  MPI_Status local;
  MPI_Status* st = status == MPI_STATUS_IGNORE && peer::checks_receives(comm) ? &local : status;
  const int result = PMPI_Mprobe(source, tag, comm, message, st);
  return result == MPI_SUCCESS ? after_probe(comm, message, st) : result;
}

int handle_Improbe(int source, int tag, MPI_Comm comm, int* flag, MPI_Message* message, MPI_Status* status) {
  MPI_Status local;
  MPI_Status* st = status == MPI_STATUS_IGNORE && peer::checks_receives(comm) ? &local : status;
  const int result = PMPI_Improbe(source, tag, comm, flag, message, st);
  return result == MPI_SUCCESS && *flag ? after_probe(comm, message, st) : result;
}

int handle_Mrecv(void* buf, int count, MPI_Datatype datatype, MPI_Message* message, MPI_Status* status) {
  const Probed probed = take_probed(message);
  if (probed.taken) {
    MPI_Status local;
    MPI_Status* st = status == MPI_STATUS_IGNORE ? &local : status;
    int result = PMPI_Mrecv(nullptr, 0, MPI_BYTE, message, st);
    if (result == MPI_SUCCESS) result = peer::receive_taken(probed.comm, probed.taken, buf, count, datatype, st);
    return result == MPI_SUCCESS ? result : raise_error(probed.comm, result);
  }
  return receive_staged(
      FunctionId::kMrecv, buf, count, datatype, probed.comm, status,
      [&](void* b, MPI_Status* st) { return PMPI_Mrecv(b, count, datatype, message, st); }, false);
}

int handle_Imrecv(void* buf, int count, MPI_Datatype datatype, MPI_Message* message, MPI_Request* request) {
  const Probed probed = take_probed(message);
  if (probed.taken) {
    // The marker is here already: its data is received now, and the request
    // comes back complete.
    MPI_Status status{};
    int result = PMPI_Mrecv(nullptr, 0, MPI_BYTE, message, &status);
    if (result == MPI_SUCCESS)
      result = peer::receive_taken(probed.comm, probed.taken, buf, count, datatype, &status);
    if (result != MPI_SUCCESS) return raise_error(probed.comm, result);
    return marker_status_request(status, request);
  }
  return post_staged(
      FunctionId::kImrecv, buf, count, datatype, probed.comm, request, true, Lifetime::kOnce,
      [&](void* b) { return PMPI_Imrecv(b, count, datatype, message, request); }, false);
}

// MPI_Probe and MPI_Iprobe: a marker reports the count of its data.
int handle_Probe(int source, int tag, MPI_Comm comm, MPI_Status* status) {
  if (!peer::checks_receives(comm)) return PMPI_Probe(source, tag, comm, status);
  MPI_Status local;
  MPI_Status* st = status == MPI_STATUS_IGNORE ? &local : status;
  const int result = PMPI_Probe(source, tag, comm, st);
  if (result != MPI_SUCCESS) return result;
  const int checked = peer::after_probe(comm, st);
  return checked == MPI_SUCCESS ? checked : raise_error(comm, checked);
}

int handle_Iprobe(int source, int tag, MPI_Comm comm, int* flag, MPI_Status* status) {
  if (!peer::checks_receives(comm)) return PMPI_Iprobe(source, tag, comm, flag, status);
  MPI_Status local;
  MPI_Status* st = status == MPI_STATUS_IGNORE ? &local : status;
  const int result = PMPI_Iprobe(source, tag, comm, flag, st);
  if (result != MPI_SUCCESS || !*flag) return result;
  const int checked = peer::after_probe(comm, st);
  return checked == MPI_SUCCESS ? checked : raise_error(comm, checked);
}

}  // namespace ferry::shim

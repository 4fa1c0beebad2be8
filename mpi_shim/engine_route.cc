#include "mpi_shim/engine_route.h"

#include <map>
#include <mutex>
#include <string>

#include "engine/bootstrap/mpi_bootstrap.h"
#include "engine/common/liveness.h"
#include "engine/common/params.h"
#include "mpi_shim/nonblocking_engine.h"
#include "mpi_shim/route.h"
#include "mpi_shim/wrapper_support.h"

namespace ferry::shim {
namespace {

std::mutex engines_mutex;
// Every live engine communicator by the application communicator it serves.
std::map<MPI_Comm, Communicator*>& engines() {
  static auto* map = new std::map<MPI_Comm, Communicator*>;
  return *map;
}

// Marks a communicator whose engine could not be created, so later calls do
// not retry a collective set-up the peers are not in.
Communicator* const kEngineOff = reinterpret_cast<Communicator*>(1);

int delete_engine(MPI_Comm comm, int, void* value, void*) {
  nbc::forget(comm);
  std::lock_guard<std::mutex> lock(engines_mutex);
  engines().erase(comm);
  if (value != kEngineOff) delete static_cast<Communicator*>(value);
  return MPI_SUCCESS;
}

int engine_keyval() {
  static const int keyval = [] {
    int k = MPI_KEYVAL_INVALID;
    PMPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, delete_engine, &k, nullptr);
    return k;
  }();
  return keyval;
}

}  // namespace

bool engine_participates(MPI_Comm comm, const RouteDecision& decided) {
  static const bool route_auto = forced_route() == ForcedRoute::kAuto;
  if (!route_auto || !decided.device_runtime || comm == MPI_COMM_NULL) return false;
  int inter = 0;
  return PMPI_Comm_test_inter(comm, &inter) == MPI_SUCCESS && !inter;
}

Communicator* engine_communicator(MPI_Comm comm) {
  void* value = nullptr;
  int found = 0;
  if (PMPI_Comm_get_attr(comm, engine_keyval(), &value, &found) != MPI_SUCCESS) return nullptr;
  if (found) return value == kEngineOff ? nullptr : static_cast<Communicator*>(value);

  std::unique_ptr<Communicator> created;
  const Status status = Communicator::create(make_mpi_bootstrap(comm), &created);
  Communicator* engine = ok(status) ? created.release() : kEngineOff;
  if (!ok(status)) FERRY_WARN(Init, "engine set-up failed (%s); device buffers will be staged", status_name(status));
  PMPI_Comm_set_attr(comm, engine_keyval(), engine);
  std::lock_guard<std::mutex> lock(engines_mutex);
  engines()[comm] = engine;
  return engine == kEngineOff ? nullptr : engine;
}

void release_engine_communicators() {
  std::map<MPI_Comm, Communicator*> live;
  {
    std::lock_guard<std::mutex> lock(engines_mutex);
    live = engines();
  }
  // Deleting the attribute runs delete_engine, which frees it.
  for (auto& [comm, engine] : live) PMPI_Comm_delete_attr(comm, engine_keyval());
}

int mpi_error_class(Status status) {
  switch (status) {
    case Status::kOutOfMemory: return MPI_ERR_NO_MEM;
    case Status::kCountMismatch: return MPI_ERR_COUNT;
    case Status::kRootMismatch: return MPI_ERR_ROOT;
    case Status::kTypeMismatch: return MPI_ERR_TYPE;
    case Status::kOpMismatch: return MPI_ERR_OP;
    default: return MPI_ERR_OTHER;
  }
}

int peer_ended_error() {
  const std::string text = "ferry: a peer process has ended: " + last_ended_peer();
  return error_code_saying(MPI_ERR_OTHER, text.c_str());
}

int report_engine_failure(FunctionId id, MPI_Comm comm, Status status) {
  FERRY_WARN(Coll, "%s on the engine failed: %s", function_name(id), status_name(status));
  return raise_error(comm, status == Status::kPeerEnded ? peer_ended_error() : mpi_error_class(status));
}

}  // namespace ferry::shim

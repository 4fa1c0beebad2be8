// What the files of the nonblocking collectives on the engine share
// (nonblocking_engine.h): a call with its MPI arguments, a communicator's
// state, and how a call is started. Private to nonblocking_engine.cc,
// nonblocking_start.cc and nonblocking_persistent.cc.
#pragma once

#include <mpi.h>

#include <chrono>
#include <deque>
#include <functional>
#include <initializer_list>
#include <memory>
#include <vector>

#include "engine/collectives/call_board.h"
#include "mpi_shim/route.h"
#include "mpi_shim/staging.h"

namespace ferry::shim::nbc {

using Kind = NonblockingKind;

enum class Stage {
  kUndecided,    // waiting for the peers' entries
  kQueued,       // on the GPU (engine), until done_event
  kAwaitPeers,   // this rank's part done; the peers still read its buffers
  kFallbackDue,  // every rank takes the real MPI: to be posted by an MPI thread
  kPosted,       // the real MPI's request is posted
  kDone,
};

struct CommState;

struct Op {
  CommState* state = nullptr;  // nullptr once done
  NonblockingCall work;        // what the engine runs
  MPI_Request request = MPI_REQUEST_NULL;  // generalized: the handle the user holds
  int count = 0;                           // as passed, for a fallback
  MPI_Datatype datatype = MPI_DATATYPE_NULL;
  MPI_Op mpi_op = MPI_OP_NULL;
  // Ialltoallv: the call's arguments, kept for a fallback.
  std::vector<int> send_counts, send_displs, recv_counts, recv_displs;
  MPI_Datatype recv_type = MPI_DATATYPE_NULL;
  bool eligible = false;
  Stage stage = Stage::kUndecided;
  gpu::Backend* backend = nullptr;
  std::chrono::steady_clock::time_point deadline;
  MPI_Request posted = MPI_REQUEST_NULL;  // the real MPI's, on the fallback communicator
  std::unique_ptr<Staging> staging;
  int error = MPI_SUCCESS;
  bool completed = false;  // MPI_Grequest_complete called
};

struct CommState {
  MPI_Comm comm = MPI_COMM_NULL;
  MPI_Comm fallback = MPI_COMM_NULL;  // a duplicate: fallback calls post there in call order
  Communicator* engine = nullptr;
  std::unique_ptr<CallBoard> board;
  std::uint64_t calls = 0;
  std::deque<Op*> unissued;  // in call order
  std::vector<Op*> ops;      // not yet done
};

FunctionId function_of(Kind kind);

// The state of comm when this path takes a call there: FERRY_NBC=engine,
// FERRY_ROUTE=auto, a process with a device runtime, an intracommunicator
// whose engine runs nonblocking collectives. The same answer on every rank.
CommState* taking(FunctionId id, MPI_Comm comm, std::initializer_list<const void*> buffers, RouteDecision* route);

// What every nonblocking collective of this path does once this rank has
// filled op (kind, buffers, eligible): publishes its board entry (entry,
// with op's eligibility and kind) and returns the request.
// A rank that cannot take the engine and has only host buffers, with no
// call queued before this one, posts the real MPI's call at once on the
// user's buffers (post_host) and returns its request: every rank takes the
// real MPI for the call.
int start_call(CommState& state, std::unique_ptr<Op> op, bool host_only, EntryFields entry,
               const std::function<int(MPI_Comm)>& post_host, MPI_Request* request);

}  // namespace ferry::shim::nbc

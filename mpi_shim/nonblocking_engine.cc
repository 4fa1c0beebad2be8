#include "mpi_shim/nonblocking_engine.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "engine/collectives/collectives.h"
#include "engine/common/params.h"
#include "engine/transport/shm.h"
#include "mpi_shim/engine_route.h"
#include "mpi_shim/staging.h"
#include "mpi_shim/translate.h"
#include "mpi_shim/wrapper_support.h"

namespace ferry::shim::nbc {
namespace {

// The board: per rank, one entry per call (a ring), and how far that rank
// has read everyone's entries, which says when a slot may be written again.
constexpr std::uint64_t kBoardEntries = 4096;
struct BoardEntry {
  std::atomic<std::uint64_t> call;  // the call this entry is for (1, 2, ...)
  std::atomic<std::uint32_t> eligible;
  std::uint32_t reserved;
};
static_assert(sizeof(BoardEntry) == 16, "BoardEntry is shared between processes; keep its layout fixed");
struct BoardPart {
  BoardEntry entries[kBoardEntries];
  alignas(64) std::atomic<std::uint64_t> read_through;
};

enum class Stage {
  kUndecided,    // waiting for the peers' entries
  kQueued,       // on the GPU (engine), until done_event
  kFallbackDue,  // every rank takes the real MPI: to be posted by an MPI thread
  kPosted,       // the real MPI's request is posted
  kDone,
};

struct CommState;

struct Op {
  CommState* state = nullptr;  // nullptr once done
  std::uint64_t call = 0;
  MPI_Request request = MPI_REQUEST_NULL;  // generalized: the handle the user holds
  const void* send = nullptr;              // nullptr: in place
  void* recv = nullptr;
  int count = 0;
  MPI_Datatype datatype = MPI_DATATYPE_NULL;
  MPI_Op mpi_op = MPI_OP_NULL;
  DataType type = DataType::kFloat32;
  ReduceOp reduce = ReduceOp::kSum;
  bool eligible = false;
  Stage stage = Stage::kUndecided;
  gpu::Backend* backend = nullptr;
  gpu::Event done_event = nullptr;
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
  gpu::Backend* backend = nullptr;
  int device = 0;
  std::unique_ptr<SharedSegments> board;
  std::uint64_t calls = 0;
  std::deque<Op*> unissued;  // in call order
  std::vector<Op*> ops;      // not yet done

  BoardPart& part(int rank) { return *reinterpret_cast<BoardPart*>(board->segment(rank)); }
};

// Everything below is guarded by g_mutex, taken by MPI threads and the
// progress thread; no MPI call that can run a generalized request's
// callbacks is made while it is held.
std::mutex g_mutex;
std::condition_variable g_wake;
std::map<MPI_Comm, std::unique_ptr<CommState>>& states() {
  static auto* map = new std::map<MPI_Comm, std::unique_ptr<CommState>>;
  return *map;
}
// Communicators where the set-up found the engine unable: calls stage.
std::map<MPI_Comm, bool>& unable() {
  static auto* map = new std::map<MPI_Comm, bool>;
  return *map;
}
std::unordered_map<MPI_Request, Op*>& by_request() {
  static auto* map = new std::unordered_map<MPI_Request, Op*>;
  return *map;
}
std::atomic<int> g_live{0};  // by_request().size(), read without the lock
std::thread* g_thread = nullptr;
bool g_stopping = false;

bool enabled() {
  static const bool on = params().nbc == "engine" && params().route == "auto";
  return on;
}

// FERRY_HANDSHAKE_TIMEOUT from now; 0 is no limit.
std::chrono::steady_clock::time_point deadline_from_now() {
  if (params().handshake_timeout <= 0) return std::chrono::steady_clock::time_point::max();
  return std::chrono::steady_clock::now() + std::chrono::seconds(params().handshake_timeout);
}

// --- the generalized request's callbacks -----------------------------------

int query_op(void* extra, MPI_Status* status) {
  const Op* op = static_cast<Op*>(extra);
  PMPI_Status_set_elements(status, MPI_BYTE, 0);
  PMPI_Status_set_cancelled(status, 0);
  status->MPI_SOURCE = MPI_UNDEFINED;
  status->MPI_TAG = MPI_UNDEFINED;
  status->MPI_ERROR = op->error;
  return op->error;
}

int free_op(void* extra) {
  Op* op = static_cast<Op*>(extra);
  std::lock_guard<std::mutex> lock(g_mutex);
  by_request().erase(op->request);
  g_live.store(static_cast<int>(by_request().size()), std::memory_order_release);
  if (op->backend && op->done_event) op->backend->event_destroy(op->done_event);
  delete op;
  return MPI_SUCCESS;
}

// A nonblocking collective cannot be cancelled (MPI makes it erroneous).
int cancel_op(void*, int) { return MPI_SUCCESS; }

// --- deciding and issuing ---------------------------------------------------

void finish_locked(Op& op, int error) {
  if (op.error == MPI_SUCCESS) op.error = error;
  op.stage = Stage::kDone;
  if (CommState* state = op.state) {
    for (auto it = state->ops.begin(); it != state->ops.end(); ++it)
      if (*it == &op) {
        state->ops.erase(it);
        break;
      }
  }
  op.state = nullptr;
}

void queue_on_engine_locked(CommState& state, Op& op) {
  record_route(FunctionId::kIallreduce, {Route::kEngine, "every rank's buffers on the engine's device"});
  op.backend = state.backend;
  const Status status = [&] {
    FERRY_CHECK(state.backend->set_device(state.device));
    FERRY_CHECK(state.backend->event_create(&op.done_event));
    return queue_nonblocking_allreduce(*state.engine, op.send, op.recv, static_cast<std::size_t>(op.count), op.type,
                                       op.reduce, op.done_event);
  }();
  if (!ok(status)) {
    FERRY_WARN(Coll, "MPI_Iallreduce on the engine failed: %s", status_name(status));
    abandon_nonblocking_allreduces(*state.engine, op.recv, status);
    finish_locked(op, status == Status::kOutOfMemory ? MPI_ERR_NO_MEM : MPI_ERR_OTHER);
    return;
  }
  op.stage = Stage::kQueued;
  op.deadline = deadline_from_now();
}

// The real MPI's Iallreduce on the fallback communicator, device buffers
// staged through host copies.
void post_fallback_locked(CommState& state, Op& op) {
  Staging staging(FunctionId::kIallreduce, state.comm);
  Extent extent;
  if (!extent_of(op.count, op.datatype, &extent)) {
    finish_locked(op, MPI_ERR_TYPE);
    return;
  }
  const void* send = op.send ? staging.in(op.send, extent) : MPI_IN_PLACE;
  void* recv = op.send ? staging.out(op.recv, extent) : staging.inout(op.recv, extent);
  if (staging.failed()) {
    finish_locked(op, staging.raise());
    return;
  }
  record_route(FunctionId::kIallreduce, staging.staged_any() ? RouteDecision{Route::kStaged, "a rank's buffers are not on the engine's device"}
                                                            : RouteDecision{Route::kPmpi, "no device buffer"});
  const int result = PMPI_Iallreduce(send, recv, op.count, op.datatype, op.mpi_op, state.fallback, &op.posted);
  if (result != MPI_SUCCESS) {
    finish_locked(op, result);
    return;
  }
  op.staging = std::make_unique<Staging>(std::move(staging));
  op.stage = Stage::kPosted;
}

// Decides the calls at the head of state's queue whose entries are all on
// the board, and issues them in call order: engine calls from any thread,
// fallback calls only from an MPI thread (later calls wait behind one).
void issue_locked(CommState& state, bool mpi_thread) {
  const int n = state.engine->size();
  const int me = state.engine->rank();
  while (!state.unissued.empty()) {
    Op& op = *state.unissued.front();
    if (op.stage == Stage::kUndecided) {
      bool everyone = true;
      for (int r = 0; r < n; ++r) {
        const BoardEntry& entry = state.part(r).entries[op.call % kBoardEntries];
        if (entry.call.load(std::memory_order_acquire) != op.call) return;
        everyone = everyone && entry.eligible.load(std::memory_order_relaxed) != 0;
      }
      state.part(me).read_through.store(op.call, std::memory_order_release);
      if (everyone) {
        queue_on_engine_locked(state, op);
      } else {
        op.stage = Stage::kFallbackDue;
      }
    }
    if (op.stage == Stage::kFallbackDue) {
      if (!mpi_thread) return;
      post_fallback_locked(state, op);
    }
    state.unissued.pop_front();
  }
}

// Looks once at each issued call of state; true when any finished.
bool poll_locked(CommState& state, bool mpi_thread) {
  bool finished = false;
  for (std::size_t i = 0; i < state.ops.size();) {
    Op& op = *state.ops[i];
    if (op.stage == Stage::kQueued) {
      bool done = false;
      const Status status = op.backend->event_done(op.done_event, &done);
      if (!ok(status) || (!done && std::chrono::steady_clock::now() > op.deadline)) {
        FERRY_WARN(Coll, "MPI_Iallreduce on the engine %s", ok(status) ? "timed out" : status_name(status));
        abandon_nonblocking_allreduces(*state.engine, op.recv, ok(status) ? Status::kTimeout : status);
        done = true;
        op.error = MPI_ERR_OTHER;
      }
      if (done) {
        finish_locked(op, MPI_SUCCESS);
        finished = true;
        continue;  // finish_locked removed it
      }
    } else if (op.stage == Stage::kPosted && mpi_thread) {
      int flag = 0;
      MPI_Status status;
      const int result = PMPI_Test(&op.posted, &flag, &status);
      if (result != MPI_SUCCESS || flag) {
        finish_locked(op, op.staging->finish(result));
        finished = true;
        continue;
      }
    }
    ++i;
  }
  return finished;
}

bool advance_locked(bool mpi_thread) {
  bool finished = false;
  for (auto& [comm, state] : states()) {
    issue_locked(*state, mpi_thread);
    finished = poll_locked(*state, mpi_thread) || finished;
  }
  return finished;
}

// Whether the progress thread has anything to do.
bool busy_locked() {
  for (auto& [comm, state] : states())
    for (const Op* op : state->ops)
      if (op->stage == Stage::kUndecided || op->stage == Stage::kQueued) return true;
  return false;
}

// Decides and queues engine calls, and notices their end, while the
// application computes. Idle (asleep) while no call waits for either.
void progress_loop() {
  std::unique_lock<std::mutex> lock(g_mutex);
  int idle_polls = 0;
  while (!g_stopping) {
    if (!busy_locked()) {
      idle_polls = 0;
      g_wake.wait(lock);
      continue;
    }
    const bool finished = advance_locked(false);
    lock.unlock();
    // Polls without sleeping for a while after a call finished (the next
    // often follows), then every ~50 us: a core spinning for microseconds
    // per GPU call is taken from the application.
    idle_polls = finished ? 0 : idle_polls + 1;
    if (idle_polls < 256) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
    lock.lock();
  }
}

// The communicator's state, made at its first call (collective); nullptr
// when the engine cannot take its nonblocking allreduces (on every rank).
CommState* state_for(MPI_Comm comm) {
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    auto it = states().find(comm);
    if (it != states().end()) return it->second.get();
    if (unable().count(comm)) return nullptr;
  }
  Communicator* engine = engine_communicator(comm);
  auto state = std::make_unique<CommState>();
  state->comm = comm;
  state->engine = engine;
  state->backend = gpu::active_backend();
  bool ready = false;
  const Status status = [&] {
    if (!engine) return Status::kOk;  // the same on every rank
    if (state->backend) FERRY_CHECK(state->backend->current_device(&state->device));
    FERRY_CHECK(prepare_nonblocking_allreduce(*engine, state->backend, state->device, &ready));
    if (!ready) return Status::kOk;
    FERRY_CHECK(SharedSegments::create(engine->bootstrap(), nullptr, sizeof(BoardPart), &state->board));
    return PMPI_Comm_dup(comm, &state->fallback) == MPI_SUCCESS ? Status::kOk : Status::kInternal;
  }();
  std::lock_guard<std::mutex> lock(g_mutex);
  if (!ok(status) || !ready) {
    if (!ok(status)) FERRY_WARN(Coll, "nonblocking allreduce set-up failed (%s); such calls are staged", status_name(status));
    unable()[comm] = true;
    return nullptr;
  }
  if (!g_thread) g_thread = new std::thread(progress_loop);
  CommState* made = state.get();
  states()[comm] = std::move(state);
  return made;
}

// Writes this rank's entry for call; waits while the ring's slot still
// holds a call some rank has not read.
bool publish(CommState& state, std::uint64_t call, bool eligible) {
  const int n = state.engine->size();
  const auto deadline = deadline_from_now();
  for (int r = 0; r < n; ++r) {
    while (call > kBoardEntries && state.part(r).read_through.load(std::memory_order_acquire) < call - kBoardEntries) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::yield();
    }
  }
  BoardEntry& entry = state.part(state.engine->rank()).entries[call % kBoardEntries];
  entry.eligible.store(eligible ? 1 : 0, std::memory_order_relaxed);
  entry.call.store(call, std::memory_order_release);
  return true;
}

Op* find_locked(MPI_Request request) {
  auto it = by_request().find(request);
  return it == by_request().end() ? nullptr : it->second;
}

}  // namespace

bool start_allreduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
                     MPI_Comm comm, MPI_Request* request, int* result) {
  if (!enabled() || !request) return false;
  const RouteDecision route = decide_route(FunctionId::kIallreduce, {sendbuf, recvbuf}, true);
  DataType type = DataType::kFloat32;
  ReduceOp reduce = ReduceOp::kSum;
  if (route.route == Route::kPmpi && !route.device_runtime) return false;
  if (route.route == Route::kStaged || count <= 0 || !engine_data_type(datatype, &type) ||
      !engine_reduce_op(op, &reduce) || !reduction_defined(type, reduce) || !engine_participates(comm, route))
    return false;
  CommState* state = state_for(comm);
  if (!state) return false;
  count_bytes(FunctionId::kIallreduce, count, datatype);

  const void* send = sendbuf == MPI_IN_PLACE ? nullptr : sendbuf;
  const bool eligible = route.route == Route::kEngine &&
                        nonblocking_allreduce_possible(*state->engine, send, recvbuf, count, type, reduce);
  std::unique_lock<std::mutex> lock(g_mutex);
  const std::uint64_t call = ++state->calls;
  if (!publish(*state, call, eligible)) {
    FERRY_WARN(Coll, "a peer is %llu nonblocking allreduces behind", static_cast<unsigned long long>(kBoardEntries));
    *result = raise_error(comm, MPI_ERR_OTHER);
    return true;
  }
  // This rank's buffers are host memory and no call is queued before this
  // one: every rank takes the real MPI for it (this one cannot take the
  // engine), on the user's buffers as they are, with the real MPI's request.
  if (route.route == Route::kPmpi && state->unissued.empty()) {
    // Nothing of this call's to read: the peers may reuse its entry.
    state->part(state->engine->rank()).read_through.store(call, std::memory_order_release);
    record_route(FunctionId::kIallreduce, {Route::kPmpi, "no device buffer"});
    lock.unlock();
    *result = PMPI_Iallreduce(sendbuf, recvbuf, count, datatype, op, state->fallback, request);
    return true;
  }

  auto* made = new Op;
  made->state = state;
  made->call = call;
  made->send = send;
  made->recv = recvbuf;
  made->count = count;
  made->datatype = datatype;
  made->mpi_op = op;
  made->type = type;
  made->reduce = reduce;
  made->eligible = eligible;
  lock.unlock();
  *result = PMPI_Grequest_start(query_op, free_op, cancel_op, made, request);
  lock.lock();
  if (*result != MPI_SUCCESS) {
    delete made;
    return true;
  }
  made->request = *request;
  by_request()[*request] = made;
  g_live.store(static_cast<int>(by_request().size()), std::memory_order_release);
  state->unissued.push_back(made);
  state->ops.push_back(made);
  issue_locked(*state, true);
  g_wake.notify_one();
  return true;
}

bool owns(MPI_Request request) {
  if (g_live.load(std::memory_order_acquire) == 0 || request == MPI_REQUEST_NULL) return false;
  std::lock_guard<std::mutex> lock(g_mutex);
  return find_locked(request) != nullptr;
}

bool owns_any(int count, const MPI_Request* requests) {
  if (g_live.load(std::memory_order_acquire) == 0 || !requests || count <= 0) return false;
  std::lock_guard<std::mutex> lock(g_mutex);
  for (int i = 0; i < count; ++i)
    if (requests[i] != MPI_REQUEST_NULL && find_locked(requests[i])) return true;
  return false;
}

void settle(int count, const MPI_Request* requests, bool wait) {
  if (g_live.load(std::memory_order_acquire) == 0 || !requests) return;
  for (int i = 0; i < count; ++i) {
    if (requests[i] == MPI_REQUEST_NULL) continue;
    for (int polls = 0;; ++polls) {
      std::unique_lock<std::mutex> lock(g_mutex);
      Op* op = find_locked(requests[i]);
      if (!op || op->completed) break;
      if (op->stage != Stage::kDone) advance_locked(true);
      if (op->stage == Stage::kDone) {
        op->completed = true;
        lock.unlock();
        PMPI_Grequest_complete(requests[i]);
        break;
      }
      if (!wait) break;
      lock.unlock();
      if (polls > 1000) std::this_thread::sleep_for(std::chrono::microseconds(2));
    }
  }
  progress();
}

void progress() {
  if (g_live.load(std::memory_order_acquire) == 0) return;
  std::lock_guard<std::mutex> lock(g_mutex);
  advance_locked(true);
}

int refuse_free(MPI_Request request) {
  MPI_Comm comm = MPI_COMM_WORLD;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    if (Op* op = find_locked(request); op && op->state) comm = op->state->comm;
  }
  return raise_error(comm, MPI_ERR_REQUEST);
}

void issue_all(MPI_Comm comm) {
  if (g_live.load(std::memory_order_acquire) == 0) return;
  for (int polls = 0;; ++polls) {
    {
      std::lock_guard<std::mutex> lock(g_mutex);
      auto it = states().find(comm);
      if (it == states().end()) return;
      issue_locked(*it->second, true);
      if (it->second->unissued.empty()) return;
    }
    if (polls > 1000) std::this_thread::sleep_for(std::chrono::microseconds(2));
  }
}

void forget(MPI_Comm comm) {
  std::unique_ptr<CommState> state;
  for (int polls = 0;; ++polls) {
    {
      std::lock_guard<std::mutex> lock(g_mutex);
      unable().erase(comm);
      auto it = states().find(comm);
      if (it == states().end()) return;
      advance_locked(true);
      if (it->second->ops.empty()) {
        state = std::move(it->second);
        states().erase(it);
        break;
      }
    }
    if (polls > 1000) std::this_thread::sleep_for(std::chrono::microseconds(2));
  }
  PMPI_Comm_free(&state->fallback);
}

void finalize() {
  std::vector<MPI_Comm> comms;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    for (auto& [comm, state] : states()) comms.push_back(comm);
  }
  for (MPI_Comm comm : comms) forget(comm);
  progress();
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    g_stopping = true;
  }
  g_wake.notify_all();
  if (g_thread) {
    g_thread->join();
    delete g_thread;
    g_thread = nullptr;
  }
}

}  // namespace ferry::shim::nbc

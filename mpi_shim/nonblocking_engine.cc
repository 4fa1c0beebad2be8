#include "mpi_shim/nonblocking_engine.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <unordered_map>
#include <vector>

#include "engine/collectives/agreement.h"
#include "engine/collectives/call_board.h"
#include "engine/collectives/collectives.h"
#include "engine/common/params.h"
#include "engine/core/peer_watch.h"
#include "mpi_shim/engine_route.h"
#include "mpi_shim/nonblocking_state.h"
#include "mpi_shim/request_registry.h"
#include "mpi_shim/route.h"
#include "mpi_shim/staging.h"
#include "mpi_shim/translate.h"
#include "mpi_shim/wrapper_support.h"

namespace ferry::shim::nbc {
namespace {

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
std::set<MPI_Comm>& unable() {
  static auto* set = new std::set<MPI_Comm>;
  return *set;
}
std::unordered_map<MPI_Request, Op*>& by_request() {
  static auto* map = new std::unordered_map<MPI_Request, Op*>;
  return *map;
}
std::atomic<int> g_live{0};  // by_request().size(), read without the lock
std::thread* g_thread = nullptr;
bool g_stopping = false;

bool enabled() {
  static const bool on = params().nbc == "engine" && forced_route() == ForcedRoute::kAuto;
  return on;
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
  if (op->backend && op->work.done_event) FERRY_LOG_IF_FAILED(op->backend->event_destroy(op->work.done_event));
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
    state->board->unpin_all(op.work);
    for (auto it = state->ops.begin(); it != state->ops.end(); ++it)
      if (*it == &op) {
        state->ops.erase(it);
        break;
      }
  }
  op.state = nullptr;
}

void queue_on_engine_locked(CommState& state, Op& op) {
  record_route(function_of(op.work.kind), {Route::kEngine, "every rank's buffers on the engine's device"});
  op.backend = state.board->backend();
  if (state.board->by_leaders() && !state.board->leads()) {
    // Its GPU's leader does the work; this rank waits for the leaders.
    op.deadline = handshake_deadline();
    op.stage = Stage::kAwaitPeers;
    return;
  }
  const Status status = state.board->queue(op.work);
  op.deadline = handshake_deadline();
  if (!ok(status)) {
    FERRY_WARN(Coll, "%s on the engine failed: %s", function_name(function_of(op.work.kind)), status_name(status));
    state.board->mark_failed(op.work, status);
    finish_locked(op, status == Status::kOutOfMemory ? MPI_ERR_NO_MEM : MPI_ERR_OTHER);
    return;
  }
  op.stage = Stage::kQueued;
}

// The real MPI's call on the fallback communicator, device buffers staged
// through host copies.
void post_fallback_locked(CommState& state, Op& op) {
  Staging staging(function_of(op.work.kind), state.comm);
  const int me = state.engine->rank();
  int result = MPI_SUCCESS;
  if (op.work.kind == Kind::kAllreduce) {
    Extent extent;
    if (!extent_of(op.count, op.datatype, &extent)) return finish_locked(op, MPI_ERR_TYPE);
    const void* send = op.work.send ? staging.in(op.work.send, extent) : MPI_IN_PLACE;
    void* recv = op.work.send ? staging.out(op.work.recv, extent) : staging.inout(op.work.recv, extent);
    if (staging.failed()) return finish_locked(op, staging.raise());
    result = PMPI_Iallreduce(send, recv, op.count, op.datatype, op.mpi_op, state.fallback, &op.posted);
  } else if (op.work.kind == Kind::kBcast) {
    Extent extent;
    if (!extent_of(op.count, op.datatype, &extent)) return finish_locked(op, MPI_ERR_TYPE);
    void* buffer =
        me == op.work.root ? const_cast<void*>(staging.in(op.work.recv, extent)) : staging.out(op.work.recv, extent);
    if (staging.failed()) return finish_locked(op, staging.raise());
    result = PMPI_Ibcast(buffer, op.count, op.datatype, op.work.root, state.fallback, &op.posted);
  } else {
    const int n = state.engine->size();
    Extent send_extent, recv_extent;
    if (!extent_of_blocks(n, op.send_counts.data(), op.send_displs.data(), op.datatype, &send_extent) ||
        !extent_of_blocks(n, op.recv_counts.data(), op.recv_displs.data(), op.recv_type, &recv_extent))
      return finish_locked(op, MPI_ERR_ARG);
    const void* send = staging.in(op.work.send, send_extent);
    void* recv = staging.out(op.work.recv, recv_extent);
    if (staging.failed()) return finish_locked(op, staging.raise());
    result = PMPI_Ialltoallv(send, op.send_counts.data(), op.send_displs.data(), op.datatype, recv,
                             op.recv_counts.data(), op.recv_displs.data(), op.recv_type, state.fallback, &op.posted);
  }
  record_route(function_of(op.work.kind),
               staging.staged_any() ? RouteDecision{Route::kStaged, "a rank cannot take the engine for the call"}
                                    : RouteDecision{Route::kPmpi, "no device buffer"});
  if (result != MPI_SUCCESS) return finish_locked(op, result);
  op.staging = std::make_unique<Staging>(std::move(staging));
  op.stage = Stage::kPosted;
}

// Decides the calls at the head of state's queue whose entries are all on
// the board, and issues them in call order: engine calls from any thread,
// fallback calls only from an MPI thread (later calls wait behind one).
void issue_locked(CommState& state, bool mpi_thread) {
  while (!state.unissued.empty()) {
    Op& op = *state.unissued.front();
    if (op.stage == Stage::kUndecided) {
      bool everyone = true, same_call = true;
      std::vector<CallSignature> signatures;
      if (!state.board->read_entries(op.work.call, op.work.kind, &everyone, &same_call, &signatures)) {
        // A live peer may make its part of the call at any later time; one
        // whose process ended never will (peer_watch.h).
        if (!device_waits_abandoned()) return;
        FERRY_WARN(Coll, "%s: a peer process has ended", function_name(function_of(op.work.kind)));
        finish_locked(op, peer_ended_error());
        state.unissued.pop_front();
        continue;
      }
      state.board->mark_read(op.work.call);
      // Where some rank may have posted the real MPI's call already (host
      // buffers), a disagreement is left to the real MPI, as without Ferry.
      const Status agreed = everyone ? compare_signatures(signatures, function_name(function_of(op.work.kind)))
                                     : Status::kOk;
      if (!same_call) {
        FERRY_WARN(Coll, "ranks made different nonblocking collectives on one communicator");
        finish_locked(op, MPI_ERR_OTHER);
      } else if (!ok(agreed)) {
        finish_locked(op, mpi_error_class(agreed));
      } else if (everyone) {
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
    // A peer process that ended is waited for no longer (peer_watch.h).
    const bool abandoned = device_waits_abandoned();
    const bool timed_out = abandoned || std::chrono::steady_clock::now() > op.deadline;
    auto gave_up = [&] { return abandoned ? peer_ended_error() : MPI_ERR_OTHER; };
    if (op.stage == Stage::kQueued) {
      bool done = false;
      const Status status = op.backend->event_done(op.work.done_event, &done);
      if (!ok(status) || (!done && timed_out)) {
        const Status why = !ok(status) ? status : abandoned ? Status::kPeerEnded : Status::kTimeout;
        FERRY_WARN(Coll, "%s on the engine: %s", function_name(function_of(op.work.kind)), status_name(why));
        state.board->mark_failed(op.work, why);
        finish_locked(op, ok(status) ? gave_up() : MPI_ERR_OTHER);
        finished = true;
        continue;  // finish_locked removed it
      }
      if (done) {
        state.board->trace_device_work(op.work);
        if (op.work.kind == Kind::kAllreduce && !state.board->by_leaders()) {
          finish_locked(op, MPI_SUCCESS);
          finished = true;
          continue;
        }
        state.board->raise_through(op.work.call);
        op.stage = Stage::kAwaitPeers;
      }
    }
    if (op.stage == Stage::kAwaitPeers && state.board->by_leaders()) {
      const bool through = state.board->leaders_through(op.work.call);
      if (state.board->leader_failed(op.work.call) || (!through && timed_out)) {
        FERRY_WARN(Coll, "%s: %s", function_name(function_of(op.work.kind)),
                   through || !timed_out ? "a GPU leader failed its part"
                   : abandoned           ? "a peer process has ended"
                                         : "GPU leaders did not finish within FERRY_HANDSHAKE_TIMEOUT");
        finish_locked(op, through || !timed_out ? MPI_ERR_OTHER : gave_up());
        finished = true;
        continue;
      }
      if (through) {
        finish_locked(op, MPI_SUCCESS);
        finished = true;
        continue;
      }
    } else if (op.stage == Stage::kAwaitPeers) {
      const bool others_read =
          (op.work.kind == Kind::kBcast && state.engine->rank() != op.work.root) ||
          state.board->peers_pulled(op.work.call);
      if (others_read || timed_out) {
        if (!others_read)
          FERRY_WARN(Coll, "%s: peers did not finish reading: %s", function_name(function_of(op.work.kind)),
                     abandoned ? "a peer process has ended" : "FERRY_HANDSHAKE_TIMEOUT passed");
        finish_locked(op, others_read ? MPI_SUCCESS : gave_up());
        finished = true;
        continue;
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
      if (op->stage == Stage::kUndecided || op->stage == Stage::kQueued || op->stage == Stage::kAwaitPeers)
        return true;
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
    // often follows), then every ~20 us: a core spinning for microseconds
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
// when the engine cannot take its nonblocking collectives (on every rank).
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
  gpu::Backend* backend = gpu::active_backend();
  // Every peer's memory mapped here: the same answer on every rank.
  const bool ready = engine && backend && engine->all_peers_mapped();
  const Status status = [&] {
    if (!ready) return Status::kOk;
    FERRY_CHECK(CallBoard::create(*engine, backend, &state->board));
    return PMPI_Comm_dup(comm, &state->fallback) == MPI_SUCCESS ? Status::kOk : Status::kInternal;
  }();
  std::lock_guard<std::mutex> lock(g_mutex);
  if (!ok(status) || !ready) {
    if (!ok(status))
      FERRY_WARN(Coll, "nonblocking collective set-up failed (%s); such calls are staged", status_name(status));
    unable().insert(comm);
    return nullptr;
  }
  if (!g_thread) {
    g_thread = new std::thread(progress_loop);
    add_completion_progress(progress);
  }
  CommState* made = state.get();
  states()[comm] = std::move(state);
  return made;
}

Op* find_locked(MPI_Request request) {
  auto it = by_request().find(request);
  return it == by_request().end() ? nullptr : it->second;
}

// Waits until request's work is done (wait) or looks once (!wait), and
// completes the generalized request once it is, so that the real MPI's
// completion call sees it complete.
void settle_call(MPI_Request request, bool wait) {
  for (int polls = 0;; ++polls) {
    std::unique_lock<std::mutex> lock(g_mutex);
    Op* op = find_locked(request);
    if (!op || op->completed) return;
    if (op->stage != Stage::kDone) advance_locked(true);
    if (op->stage == Stage::kDone) {
      op->completed = true;
      lock.unlock();
      PMPI_Grequest_complete(request);
      return;
    }
    if (!wait) return;
    lock.unlock();
    if (polls > 1000) std::this_thread::sleep_for(std::chrono::microseconds(2));
  }
}

// A call's generalized request: settled before every completion call.
// MPI_Request_free of it is erroneous for a nonblocking collective, and
// refused with MPI_ERR_REQUEST as Open MPI does.
class EngineCollective final : public TrackedRequest {
 public:
  bool settles(MPI_Request) const override { return true; }
  Settled settle(MPI_Request handle, bool wait) override {
    settle_call(handle, wait);
    return {};
  }
  int free(MPI_Request* handle) override {
    MPI_Comm comm = MPI_COMM_WORLD;
    {
      std::lock_guard<std::mutex> lock(g_mutex);
      if (Op* op = find_locked(*handle); op && op->state) comm = op->state->comm;
    }
    return raise_error(comm, MPI_ERR_REQUEST);
  }
};

}  // namespace

FunctionId function_of(Kind kind) {
  switch (kind) {
    case Kind::kAllreduce: return FunctionId::kIallreduce;
    case Kind::kBcast: return FunctionId::kIbcast;
    case Kind::kAlltoallv: return FunctionId::kIalltoallv;
  }
  return FunctionId::kIallreduce;
}

int start_call(CommState& state, std::unique_ptr<Op> op, bool host_only, EntryFields entry,
               const std::function<int(MPI_Comm)>& post_host, MPI_Request* request) {
  std::unique_lock<std::mutex> lock(g_mutex);
  const std::uint64_t call = ++state.calls;
  entry.eligible = op->eligible;
  entry.kind = op->work.kind;
  const Status published = state.board->publish(call, entry, handshake_deadline(), [&] {
    lock.unlock();
    std::this_thread::yield();
    lock.lock();
  });
  if (!ok(published)) return raise_error(state.comm, MPI_ERR_OTHER);

  if (!op->eligible && host_only && state.unissued.empty()) {
    // Nothing of this call's to read: the peers may reuse its entry.
    state.board->mark_read(call);
    record_route(function_of(op->work.kind), {Route::kPmpi, "no device buffer"});
    lock.unlock();
    return post_host(state.fallback);
  }
  Op* made = op.release();
  made->state = &state;
  made->work.call = call;
  lock.unlock();
  const int result = PMPI_Grequest_start(query_op, free_op, cancel_op, made, request);
  if (result == MPI_SUCCESS) track(*request, std::make_unique<EngineCollective>());
  lock.lock();
  if (result != MPI_SUCCESS) {
    // Published, so it is still issued (and its outcome dropped).
    made->request = MPI_REQUEST_NULL;
    state.unissued.push_back(made);
    state.ops.push_back(made);
    return result;
  }
  made->request = *request;
  by_request()[*request] = made;
  g_live.store(static_cast<int>(by_request().size()), std::memory_order_release);
  state.unissued.push_back(made);
  state.ops.push_back(made);
  issue_locked(state, true);
  g_wake.notify_one();
  return MPI_SUCCESS;
}

CommState* taking(FunctionId id, MPI_Comm comm, std::initializer_list<const void*> buffers, RouteDecision* route) {
  if (!enabled()) return nullptr;
  *route = decide_route(id, buffers, true);
  if (!route->device_runtime || !engine_participates(comm, *route)) return nullptr;
  return state_for(comm);
}

void progress() {
  if (g_live.load(std::memory_order_acquire) == 0) return;
  std::lock_guard<std::mutex> lock(g_mutex);
  advance_locked(true);
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
  const auto deadline = handshake_deadline();
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
      if (std::chrono::steady_clock::now() > deadline) {
        // A peer never made its part of these calls: they fail, and what
        // they may still use (mappings, streams, the board) is left alone.
        FERRY_WARN(Coll, "%zu nonblocking collectives unfinished after FERRY_HANDSHAKE_TIMEOUT when their "
                   "communicator was freed", it->second->ops.size());
        while (!it->second->ops.empty()) finish_locked(*it->second->ops.front(), MPI_ERR_OTHER);
        it->second->unissued.clear();
        it->second.release();
        states().erase(it);
        return;
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

#include "mpi_shim/nonblocking_engine.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <unordered_map>
#include <vector>

#include "engine/collectives/agreement.h"
#include "engine/collectives/collectives.h"
#include "engine/core/executor.h"
#include "engine/collectives/schedule.h"
#include "engine/common/params.h"
#include "engine/transport/p2p.h"
#include "engine/transport/shm.h"
#include "handlers.h"
#include "mpi_shim/engine_route.h"
#include "mpi_shim/route.h"
#include "mpi_shim/staging.h"
#include "mpi_shim/translate.h"
#include "mpi_shim/wrapper_support.h"

namespace ferry::shim::nbc {
namespace {

enum class Kind : std::uint32_t { kAllreduce = 1, kBcast = 2, kAlltoallv = 3 };

// The board: per rank, one entry per call (a ring); how far that rank has
// read everyone's entries, which says when a slot may be written again; and
// how far it has finished reading its peers' buffers (bcast and alltoallv
// pull from the root's or senders' buffers, which those ranks must keep
// until then); and, where ranks share a GPU and its leader does the device
// work of all of them (Communicator::gpu_leader), how far a leader has
// finished it: a call is done on every rank once every leader is through it.
constexpr std::uint64_t kBoardEntries = 1024;
struct BoardEntry {
  std::atomic<std::uint64_t> call;  // the call this entry is for (1, 2, ...); written last
  std::uint32_t eligible;
  Kind kind;
  // Ibcast: the root's (with GPU leaders: every rank's); Ialltoallv: the
  // send buffer; Iallreduce with GPU leaders: the input.
  ExportedBuffer buffer;
  std::uint64_t offsets[kMaxDirectRanks];  // Ialltoallv: where the block for each rank starts
  // With GPU leaders, what a leader writes for this rank: Ialltoallv's
  // receive buffer and its blocks; Iallreduce's output.
  ExportedBuffer received;
  std::uint64_t recv_offsets[kMaxDirectRanks];
  std::uint64_t recv_bytes[kMaxDirectRanks];
  // Set by a GPU leader whose device work for the call failed.
  std::atomic<std::uint32_t> led_failed;
  std::uint32_t reserved;
  // What the rank called with: ranks on the engine that disagree all end
  // the call with the same error (engine/collectives/agreement.h).
  CallSignature signature;
};
static_assert(sizeof(BoardEntry) == 664, "BoardEntry is shared between processes; keep its layout fixed");
struct BoardPart {
  BoardEntry entries[kBoardEntries];
  alignas(64) std::atomic<std::uint64_t> read_through;
  alignas(64) std::atomic<std::uint64_t> pulled_through;
  alignas(64) std::atomic<std::uint64_t> led_through;
};

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
  Kind kind = Kind::kAllreduce;
  std::uint64_t call = 0;
  MPI_Request request = MPI_REQUEST_NULL;  // generalized: the handle the user holds
  const void* send = nullptr;              // allreduce: nullptr in place
  void* recv = nullptr;                    // Ibcast: the buffer
  int count = 0;
  MPI_Datatype datatype = MPI_DATATYPE_NULL;
  MPI_Op mpi_op = MPI_OP_NULL;
  DataType type = DataType::kFloat32;
  ReduceOp reduce = ReduceOp::kSum;
  int root = 0;
  std::size_t bytes = 0;  // Ibcast
  // Ialltoallv: the call's arguments, kept for a fallback, and in bytes.
  std::vector<int> send_counts, send_displs, recv_counts, recv_displs;
  MPI_Datatype recv_type = MPI_DATATYPE_NULL;
  std::vector<std::size_t> recv_bytes, recv_offsets;
  bool eligible = false;
  std::vector<ExportedBuffer> pinned;  // peers' buffers mapped for the call
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
  // The copy-engine push's landing slots are made (not where ranks share a
  // GPU): the same on every rank. Without them MPI_Iallreduce is staged,
  // unless GPU leaders do the work.
  bool allreduce_ready = false;
  bool by_leaders = false;  // Communicator::by_gpu_leaders: the same on every rank
  std::unique_ptr<SharedSegments> board;
  PeerMemory peers{true};
  gpu::Stream pull_stream = nullptr;  // Ibcast's and Ialltoallv's copies, in call order
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
  if (op->backend && op->done_event) FERRY_LOG_IF_FAILED(op->backend->event_destroy(op->done_event));
  delete op;
  return MPI_SUCCESS;
}

// A nonblocking collective cannot be cancelled (MPI makes it erroneous).
int cancel_op(void*, int) { return MPI_SUCCESS; }

// --- deciding and issuing ---------------------------------------------------

FunctionId function_of(Kind kind) {
  switch (kind) {
    case Kind::kAllreduce: return FunctionId::kIallreduce;
    case Kind::kBcast: return FunctionId::kIbcast;
    case Kind::kAlltoallv: return FunctionId::kIalltoallv;
  }
  return FunctionId::kIallreduce;
}

void finish_locked(Op& op, int error) {
  if (op.error == MPI_SUCCESS) op.error = error;
  op.stage = Stage::kDone;
  if (CommState* state = op.state) {
    for (const ExportedBuffer& buffer : op.pinned) state->peers.unpin_buffer(buffer);
    for (auto it = state->ops.begin(); it != state->ops.end(); ++it)
      if (*it == &op) {
        state->ops.erase(it);
        break;
      }
  }
  op.pinned.clear();
  op.state = nullptr;
}

// A peer's buffer of call, mapped here until the call ends.
Status map_peer_locked(CommState& state, Op& op, const ExportedBuffer& buffer, void** mapped) {
  FERRY_CHECK(state.peers.pin_buffer(buffer, mapped));
  op.pinned.push_back(buffer);
  return Status::kOk;
}

// Ibcast's non-roots pull the root's buffer; Ialltoallv's ranks pull their
// block from every sender (their own from their send buffer); one stream
// per communicator keeps the pulls in call order.
Status queue_pulls_locked(CommState& state, Op& op) {
  const int n = state.engine->size();
  const int me = state.engine->rank();
  FERRY_CHECK(state.backend->set_device(state.device));
  if (op.kind == Kind::kBcast) {
    if (me == op.root) return Status::kOk;
    void* root = nullptr;
    FERRY_CHECK(map_peer_locked(state, op, state.part(op.root).entries[op.call % kBoardEntries].buffer, &root));
    FERRY_CHECK(state.backend->copy_async(op.recv, root, op.bytes, state.pull_stream));
  } else {
    for (int step = 0; step < n; ++step) {
      // Each rank starts with the next one, so that not all read one rank at once.
      const int peer = (me + step) % n;
      if (op.recv_bytes[peer] == 0) continue;
      const BoardEntry& entry = state.part(peer).entries[op.call % kBoardEntries];
      const void* source = op.send;
      if (peer != me) {
        void* mapped = nullptr;
        FERRY_CHECK(map_peer_locked(state, op, entry.buffer, &mapped));
        source = mapped;
      }
      FERRY_CHECK(state.backend->copy_async(static_cast<char*>(op.recv) + op.recv_offsets[peer],
                                            static_cast<const char*>(source) + entry.offsets[me], op.recv_bytes[peer],
                                            state.pull_stream));
    }
  }
  return state.backend->event_record(op.done_event, state.pull_stream);
}

// With GPU leaders, this leader's device work for the ranks of its GPU:
// Ibcast's copies of the root's buffer into theirs, Ialltoallv's blocks into
// their receive buffers (copy-list kernels), Iallreduce's slice of every
// rank's input into every rank's output (a slice a leader).
Status queue_led_work_locked(CommState& state, Op& op) {
  Communicator& engine = *state.engine;
  const int n = engine.size();
  const int me = engine.rank();
  const auto entry = [&](int rank) -> const BoardEntry& { return state.part(rank).entries[op.call % kBoardEntries]; };
  // This rank's buffers as they are, a peer's mapped here.
  const auto buffer_of = [&](int rank, const ExportedBuffer& exported, void* own, void** out) {
    if (rank == me) {
      *out = own;
      return Status::kOk;
    }
    return map_peer_locked(state, op, exported, out);
  };
  FERRY_TRACE(Coll, "%s, call %llu: the device work of its GPU's ranks, as their leader",
              function_name(function_of(op.kind)), static_cast<unsigned long long>(op.call));
  FERRY_CHECK(state.backend->set_device(state.device));
  if (op.kind == Kind::kAllreduce) {
    DirectReduceArgs args{};
    const ElementRange slice = direct_part(engine.gpu_leaders_before_me(), engine.gpu_leader_count(),
                                           static_cast<std::size_t>(op.count), op.type);
    const std::size_t offset = slice.begin * data_type_size(op.type);
    void* own_input = const_cast<void*>(op.send ? op.send : op.recv);
    for (int r = 0; r < n; ++r) {
      void* input = nullptr;
      void* output = nullptr;
      FERRY_CHECK(buffer_of(r, entry(r).buffer, own_input, &input));
      FERRY_CHECK(buffer_of(r, entry(r).received, op.recv, &output));
      args.inputs[r] = static_cast<char*>(input) + offset;
      args.outputs[r] = static_cast<char*>(output) + offset;
    }
    args.ninputs = args.noutputs = n;
    args.count = slice.size();
    args.type = op.type;
    args.op = op.reduce;
    FERRY_CHECK(launch_direct_reduce(state.backend, args, state.pull_stream));
  } else if (op.kind == Kind::kBcast) {
    CopyListLauncher copies(state.backend, state.pull_stream);
    void* source = nullptr;  // the root's, mapped at the first receiver
    for (int receiver = 0; receiver < n; ++receiver) {
      if (receiver == op.root || engine.gpu_leader(receiver) != me) continue;
      if (!source) FERRY_CHECK(buffer_of(op.root, entry(op.root).buffer, op.recv, &source));
      void* destination = nullptr;
      FERRY_CHECK(buffer_of(receiver, entry(receiver).buffer, op.recv, &destination));
      FERRY_CHECK(copies.add(destination, source, op.bytes));
    }
    FERRY_CHECK(copies.finish());
  } else {
    // Each sender's buffer, mapped at its first block for this GPU's ranks.
    std::vector<void*> sent(n, nullptr);
    CopyListLauncher blocks(state.backend, state.pull_stream);
    for (int receiver = 0; receiver < n; ++receiver) {
      if (engine.gpu_leader(receiver) != me) continue;
      void* received = nullptr;
      FERRY_CHECK(buffer_of(receiver, entry(receiver).received, op.recv, &received));
      for (int sender = 0; sender < n; ++sender) {
        const std::uint64_t bytes = entry(receiver).recv_bytes[sender];
        if (bytes == 0) continue;
        if (!sent[sender])
          FERRY_CHECK(buffer_of(sender, entry(sender).buffer, const_cast<void*>(op.send), &sent[sender]));
        FERRY_CHECK(blocks.add(static_cast<char*>(received) + entry(receiver).recv_offsets[sender],
                               static_cast<const char*>(sent[sender]) + entry(sender).offsets[receiver], bytes));
      }
    }
    FERRY_CHECK(blocks.finish());
  }
  return state.backend->event_record(op.done_event, state.pull_stream);
}

// Whether this rank is a GPU leader of state's communicator.
bool leads(CommState& state) {
  return state.by_leaders && state.engine->gpu_leader(state.engine->rank()) == state.engine->rank();
}

// A leader's device work for op failed: the ranks waiting for it see so.
void mark_led_failure_locked(CommState& state, const Op& op) {
  if (leads(state))
    state.part(state.engine->rank()).entries[op.call % kBoardEntries].led_failed.store(1, std::memory_order_release);
}

void queue_on_engine_locked(CommState& state, Op& op) {
  record_route(function_of(op.kind), {Route::kEngine, "every rank's buffers on the engine's device"});
  op.backend = state.backend;
  if (state.by_leaders && !leads(state)) {
    // Its GPU's leader does the work; this rank waits for the leaders.
    op.deadline = handshake_deadline();
    op.stage = Stage::kAwaitPeers;
    return;
  }
  const Status status = [&] {
    FERRY_CHECK(state.backend->set_device(state.device));
    FERRY_CHECK(state.backend->event_create(&op.done_event));
    if (state.by_leaders) return queue_led_work_locked(state, op);
    if (op.kind != Kind::kAllreduce) return queue_pulls_locked(state, op);
    return queue_nonblocking_allreduce(*state.engine, op.send, op.recv, static_cast<std::size_t>(op.count), op.type,
                                       op.reduce, op.done_event);
  }();
  op.deadline = handshake_deadline();
  if (!ok(status)) {
    FERRY_WARN(Coll, "%s on the engine failed: %s", function_name(function_of(op.kind)), status_name(status));
    if (op.kind == Kind::kAllreduce && !state.by_leaders)
      abandon_nonblocking_allreduces(*state.engine, op.recv, status);
    mark_led_failure_locked(state, op);
    finish_locked(op, status == Status::kOutOfMemory ? MPI_ERR_NO_MEM : MPI_ERR_OTHER);
    return;
  }
  op.stage = Stage::kQueued;
}

// The real MPI's call on the fallback communicator, device buffers staged
// through host copies.
void post_fallback_locked(CommState& state, Op& op) {
  Staging staging(function_of(op.kind), state.comm);
  const int me = state.engine->rank();
  int result = MPI_SUCCESS;
  if (op.kind == Kind::kAllreduce) {
    Extent extent;
    if (!extent_of(op.count, op.datatype, &extent)) return finish_locked(op, MPI_ERR_TYPE);
    const void* send = op.send ? staging.in(op.send, extent) : MPI_IN_PLACE;
    void* recv = op.send ? staging.out(op.recv, extent) : staging.inout(op.recv, extent);
    if (staging.failed()) return finish_locked(op, staging.raise());
    result = PMPI_Iallreduce(send, recv, op.count, op.datatype, op.mpi_op, state.fallback, &op.posted);
  } else if (op.kind == Kind::kBcast) {
    Extent extent;
    if (!extent_of(op.count, op.datatype, &extent)) return finish_locked(op, MPI_ERR_TYPE);
    void* buffer = me == op.root ? const_cast<void*>(staging.in(op.recv, extent)) : staging.out(op.recv, extent);
    if (staging.failed()) return finish_locked(op, staging.raise());
    result = PMPI_Ibcast(buffer, op.count, op.datatype, op.root, state.fallback, &op.posted);
  } else {
    const int n = state.engine->size();
    Extent send_extent, recv_extent;
    if (!extent_of_blocks(n, op.send_counts.data(), op.send_displs.data(), op.datatype, &send_extent) ||
        !extent_of_blocks(n, op.recv_counts.data(), op.recv_displs.data(), op.recv_type, &recv_extent))
      return finish_locked(op, MPI_ERR_ARG);
    const void* send = staging.in(op.send, send_extent);
    void* recv = staging.out(op.recv, recv_extent);
    if (staging.failed()) return finish_locked(op, staging.raise());
    result = PMPI_Ialltoallv(send, op.send_counts.data(), op.send_displs.data(), op.datatype, recv,
                             op.recv_counts.data(), op.recv_displs.data(), op.recv_type, state.fallback, &op.posted);
  }
  record_route(function_of(op.kind), staging.staged_any()
                                         ? RouteDecision{Route::kStaged, "a rank cannot take the engine for the call"}
                                         : RouteDecision{Route::kPmpi, "no device buffer"});
  if (result != MPI_SUCCESS) return finish_locked(op, result);
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
      bool everyone = true, same_call = true;
      std::vector<CallSignature> signatures(n);
      for (int r = 0; r < n; ++r) {
        const BoardEntry& entry = state.part(r).entries[op.call % kBoardEntries];
        if (entry.call.load(std::memory_order_acquire) != op.call) return;
        everyone = everyone && entry.eligible != 0;
        same_call = same_call && entry.kind == op.kind;
        signatures[r] = entry.signature;
      }
      state.part(me).read_through.store(op.call, std::memory_order_release);
      // Where some rank may have posted the real MPI's call already (host
      // buffers), a disagreement is left to the real MPI, as without Ferry.
      const Status agreed = everyone ? compare_signatures(signatures, function_name(function_of(op.kind)))
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

// Whether every peer has finished reading this rank's buffers for call.
bool peers_pulled(CommState& state, std::uint64_t call) {
  for (int r = 0; r < state.engine->size(); ++r)
    if (r != state.engine->rank() && state.part(r).pulled_through.load(std::memory_order_acquire) < call) return false;
  return true;
}

// With GPU leaders: whether every leader is through call (so every buffer of
// it is read and written).
bool leaders_through(CommState& state, std::uint64_t call) {
  for (int r = 0; r < state.engine->size(); ++r)
    if (state.engine->gpu_leader(r) == r && state.part(r).led_through.load(std::memory_order_acquire) < call)
      return false;
  return true;
}

// With GPU leaders: whether a leader failed its device work for call (its
// board entry says so; one that no longer holds call cannot tell, and counts
// as failed). Asked after leaders_through, which a leader raises later.
bool leader_failed(CommState& state, std::uint64_t call) {
  for (int r = 0; r < state.engine->size(); ++r) {
    if (state.engine->gpu_leader(r) != r) continue;
    const BoardEntry& entry = state.part(r).entries[call % kBoardEntries];
    if (entry.call.load(std::memory_order_acquire) != call || entry.led_failed.load(std::memory_order_acquire))
      return true;
  }
  return false;
}

// Raises a mark of this rank's on the board to call: calls finish in call
// order on one stream, but an earlier call's event may be seen done after a
// later one's, so the mark only grows.
void raise_mark(std::atomic<std::uint64_t>& mark, std::uint64_t call) {
  if (mark.load(std::memory_order_relaxed) < call) mark.store(call, std::memory_order_release);
}

// Looks once at each issued call of state; true when any finished.
bool poll_locked(CommState& state, bool mpi_thread) {
  bool finished = false;
  for (std::size_t i = 0; i < state.ops.size();) {
    Op& op = *state.ops[i];
    const bool timed_out = std::chrono::steady_clock::now() > op.deadline;
    if (op.stage == Stage::kQueued) {
      bool done = false;
      const Status status = op.backend->event_done(op.done_event, &done);
      if (!ok(status) || (!done && timed_out)) {
        FERRY_WARN(Coll, "%s on the engine %s", function_name(function_of(op.kind)),
                   ok(status) ? "timed out" : status_name(status));
        if (op.kind == Kind::kAllreduce && !state.by_leaders)
          abandon_nonblocking_allreduces(*state.engine, op.recv, ok(status) ? Status::kTimeout : status);
        mark_led_failure_locked(state, op);
        finish_locked(op, MPI_ERR_OTHER);
        finished = true;
        continue;  // finish_locked removed it
      }
      if (done) {
        if (op.kind == Kind::kAllreduce && !state.by_leaders) {
          finish_locked(op, MPI_SUCCESS);
          finished = true;
          continue;
        }
        BoardPart& mine = state.part(state.engine->rank());
        raise_mark(state.by_leaders ? mine.led_through : mine.pulled_through, op.call);
        op.stage = Stage::kAwaitPeers;
      }
    }
    if (op.stage == Stage::kAwaitPeers && state.by_leaders) {
      const bool through = leaders_through(state, op.call);
      if (leader_failed(state, op.call) || (!through && timed_out)) {
        FERRY_WARN(Coll, "%s: %s", function_name(function_of(op.kind)),
                   through || !timed_out ? "a GPU leader failed its part"
                                         : "GPU leaders did not finish within FERRY_HANDSHAKE_TIMEOUT");
        finish_locked(op, MPI_ERR_OTHER);
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
          (op.kind == Kind::kBcast && state.engine->rank() != op.root) || peers_pulled(state, op.call);
      if (others_read || timed_out) {
        if (!others_read) FERRY_WARN(Coll, "%s: peers did not finish reading within FERRY_HANDSHAKE_TIMEOUT",
                                     function_name(function_of(op.kind)));
        finish_locked(op, others_read ? MPI_SUCCESS : MPI_ERR_OTHER);
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
  state->backend = gpu::active_backend();
  // Every peer's memory mapped here: the same answer on every rank.
  const bool ready = engine && state->backend && engine->size() <= kMaxDirectRanks && engine->all_peers_mapped();
  const Status status = [&] {
    if (!ready) return Status::kOk;
    FERRY_CHECK(state->backend->current_device(&state->device));
    state->by_leaders = engine->by_gpu_leaders();
    FERRY_CHECK(
        prepare_nonblocking_allreduce(*engine, state->backend, state->device, &state->allreduce_ready));
    FERRY_CHECK(SharedSegments::create(engine->bootstrap(), nullptr, sizeof(BoardPart), &state->board));
    FERRY_CHECK(state->backend->stream_create(&state->pull_stream));
    return PMPI_Comm_dup(comm, &state->fallback) == MPI_SUCCESS ? Status::kOk : Status::kInternal;
  }();
  std::lock_guard<std::mutex> lock(g_mutex);
  if (!ok(status) || !ready) {
    if (!ok(status))
      FERRY_WARN(Coll, "nonblocking collective set-up failed (%s); such calls are staged", status_name(status));
    unable().insert(comm);
    return nullptr;
  }
  if (!g_thread) g_thread = new std::thread(progress_loop);
  CommState* made = state.get();
  states()[comm] = std::move(state);
  return made;
}

Op* find_locked(MPI_Request request) {
  auto it = by_request().find(request);
  return it == by_request().end() ? nullptr : it->second;
}

// What every nonblocking collective of this path does once this rank has
// filled op (kind, buffers, eligible): publishes its board entry (with what
// fill_entry adds for the peers) and returns the request.
// A rank that cannot take the engine and has only host buffers, with no
// call queued before this one, posts the real MPI's call at once on the
// user's buffers (post_host) and returns its request: every rank takes the
// real MPI for the call.
template <typename FillEntry, typename PostHost>
int start_call(CommState& state, std::unique_ptr<Op> op, bool host_only, FillEntry fill_entry, PostHost post_host,
               MPI_Request* request) {
  std::unique_lock<std::mutex> lock(g_mutex);
  const std::uint64_t call = ++state.calls;
  const int n = state.engine->size();
  const auto deadline = handshake_deadline();
  // The ring's slot is free once every rank has read the call it held.
  for (int r = 0; r < n; ++r) {
    while (call > kBoardEntries && state.part(r).read_through.load(std::memory_order_acquire) < call - kBoardEntries) {
      if (std::chrono::steady_clock::now() > deadline) {
        FERRY_WARN(Coll, "rank %d is %llu nonblocking collectives behind", r,
                   static_cast<unsigned long long>(kBoardEntries));
        return raise_error(state.comm, MPI_ERR_OTHER);
      }
      lock.unlock();
      std::this_thread::yield();
      lock.lock();
    }
  }
  BoardEntry& entry = state.part(state.engine->rank()).entries[call % kBoardEntries];
  entry.eligible = op->eligible ? 1 : 0;
  entry.kind = op->kind;
  fill_entry(entry);
  entry.led_failed.store(0, std::memory_order_relaxed);
  entry.call.store(call, std::memory_order_release);

  if (!op->eligible && host_only && state.unissued.empty()) {
    // Nothing of this call's to read: the peers may reuse its entry.
    state.part(state.engine->rank()).read_through.store(call, std::memory_order_release);
    record_route(function_of(op->kind), {Route::kPmpi, "no device buffer"});
    lock.unlock();
    return post_host(state.fallback);
  }
  Op* made = op.release();
  made->state = &state;
  made->call = call;
  lock.unlock();
  const int result = PMPI_Grequest_start(query_op, free_op, cancel_op, made, request);
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

// The state of comm when this path takes a call there: FERRY_NBC=engine,
// FERRY_ROUTE=auto, a process with a device runtime, an intracommunicator
// whose engine runs nonblocking collectives. The same answer on every rank.
CommState* taking(FunctionId id, MPI_Comm comm, std::initializer_list<const void*> buffers, RouteDecision* route) {
  if (!enabled()) return nullptr;
  *route = decide_route(id, buffers, true);
  if (!route->device_runtime || !engine_participates(comm, *route)) return nullptr;
  return state_for(comm);
}

// A rank's buffer, exported for the peers to pull from, if it is device
// memory on the state's device.
bool exported(CommState& state, const void* buffer, ExportedBuffer* out) {
  const gpu::PointerInfo info = gpu::classify(buffer);
  return info.kind == gpu::MemoryKind::kDevice && gpu::owner_backend(info) == state.backend &&
         info.device == state.device && ok(state.peers.export_buffer(buffer, info, out));
}

}  // namespace

bool start_allreduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
                     MPI_Comm comm, MPI_Request* request, int* result) {
  DataType type = DataType::kFloat32;
  ReduceOp reduce = ReduceOp::kSum;
  // The type and op are the same on every rank (MPI requires it).
  if (!request || count <= 0 || !engine_data_type(datatype, &type) || !engine_reduce_op(op, &reduce) ||
      !reduction_defined(type, reduce))
    return false;
  RouteDecision route;
  CommState* state = taking(FunctionId::kIallreduce, comm, {sendbuf, recvbuf}, &route);
  if (!state || !(state->allreduce_ready || state->by_leaders)) return false;
  count_bytes(FunctionId::kIallreduce, count, datatype);
  auto call = std::make_unique<Op>();
  call->kind = Kind::kAllreduce;
  call->send = sendbuf == MPI_IN_PLACE ? nullptr : sendbuf;
  call->recv = recvbuf;
  call->count = count;
  call->datatype = datatype;
  call->mpi_op = op;
  call->type = type;
  call->reduce = reduce;
  // With GPU leaders, one of them reads the input and writes the output.
  ExportedBuffer input{}, output{};
  call->eligible = route.route == Route::kEngine &&
                   (state->by_leaders ? exported(*state, call->send ? call->send : recvbuf, &input) &&
                                            exported(*state, recvbuf, &output)
                                      : nonblocking_allreduce_possible(*state->engine, call->send, recvbuf, count,
                                                                       type, reduce));
  *result = start_call(
      *state, std::move(call), route.route == Route::kPmpi,
      [&](BoardEntry& entry) {
        entry.buffer = input;
        entry.received = output;
        entry.signature = reduction_signature(static_cast<std::size_t>(count), type, reduce);
      },
      [&](MPI_Comm fallback) { return PMPI_Iallreduce(sendbuf, recvbuf, count, datatype, op, fallback, request); },
      request);
  return true;
}

bool start_bcast(void* buffer, int count, MPI_Datatype datatype, int root, MPI_Comm comm, MPI_Request* request,
                 int* result) {
  if (!request) return false;
  RouteDecision route;
  CommState* state = taking(FunctionId::kIbcast, comm, {buffer}, &route);
  if (!state) return false;
  count_bytes(FunctionId::kIbcast, count, datatype);
  auto call = std::make_unique<Op>();
  call->kind = Kind::kBcast;
  call->recv = buffer;
  call->count = count;
  call->datatype = datatype;
  call->root = root;
  int element = 0;
  ExportedBuffer mine{};
  const bool root_valid = root >= 0 && root < state->engine->size();
  const gpu::PointerInfo info = gpu::classify(buffer);
  // The root's buffer is pulled; with GPU leaders, every rank's is written
  // by one.
  call->eligible = route.route == Route::kEngine && root_valid && count > 0 && dense_data_type(datatype, &element) &&
                   (state->engine->rank() == root || state->by_leaders
                        ? exported(*state, buffer, &mine)
                        : info.kind == gpu::MemoryKind::kDevice && info.device == state->device);
  call->bytes = static_cast<std::size_t>(count) * element;
  // Packed bytes on every rank, whatever its route.
  const CallSignature signature =
      rooted_signature(static_cast<std::size_t>(std::max(count, 0)) * packed_size(datatype), root);
  *result = start_call(
      *state, std::move(call), route.route == Route::kPmpi,
      [&](BoardEntry& entry) {
        entry.buffer = mine;
        entry.signature = signature;
      },
      [&](MPI_Comm fallback) { return PMPI_Ibcast(buffer, count, datatype, root, fallback, request); }, request);
  return true;
}

bool start_alltoallv(const void* sendbuf, const int* sendcounts, const int* sdispls, MPI_Datatype sendtype,
                     void* recvbuf, const int* recvcounts, const int* rdispls, MPI_Datatype recvtype, MPI_Comm comm,
                     MPI_Request* request, int* result) {
  if (!request || sendbuf == MPI_IN_PLACE || !sendcounts || !sdispls || !recvcounts || !rdispls) return false;
  RouteDecision route;
  CommState* state = taking(FunctionId::kIalltoallv, comm, {sendbuf, recvbuf}, &route);
  if (!state) return false;
  const int n = state->engine->size();
  auto call = std::make_unique<Op>();
  call->kind = Kind::kAlltoallv;
  call->send = sendbuf;
  call->recv = recvbuf;
  call->datatype = sendtype;
  call->recv_type = recvtype;
  call->send_counts.assign(sendcounts, sendcounts + n);
  call->send_displs.assign(sdispls, sdispls + n);
  call->recv_counts.assign(recvcounts, recvcounts + n);
  call->recv_displs.assign(rdispls, rdispls + n);
  std::uint64_t sent = 0;
  for (int p = 0; p < n; ++p) sent += static_cast<std::uint64_t>(std::max(0, sendcounts[p]));
  count_bytes(FunctionId::kIalltoallv, static_cast<int>(std::min<std::uint64_t>(sent, INT32_MAX)), sendtype);
  int send_size = 0, recv_size = 0;
  bool layout_ok = dense_data_type(sendtype, &send_size) && dense_data_type(recvtype, &recv_size) &&
                   send_size == recv_size && n <= kMaxDirectRanks;
  std::uint64_t offsets[kMaxDirectRanks] = {};
  for (int p = 0; layout_ok && p < n; ++p) {
    layout_ok = sendcounts[p] >= 0 && sdispls[p] >= 0 && recvcounts[p] >= 0 && rdispls[p] >= 0;
    offsets[p] = static_cast<std::uint64_t>(sdispls[p]) * send_size;
    call->recv_bytes.push_back(static_cast<std::size_t>(recvcounts[p]) * recv_size);
    call->recv_offsets.push_back(static_cast<std::size_t>(rdispls[p]) * recv_size);
  }
  // Packed bytes per peer on every rank, whatever its route.
  const CallSignature signature =
      exchange_signature(state->engine->rank(), n, packed_block_bytes(n, sendcounts, sendtype).data(),
                         packed_block_bytes(n, recvcounts, recvtype).data());
  ExportedBuffer mine{}, received{};
  const gpu::PointerInfo recv_info = gpu::classify(recvbuf);
  // With GPU leaders, one of them writes the receive buffer.
  const auto receive_ready = [&] {
    return state->by_leaders ? exported(*state, recvbuf, &received)
                             : recv_info.kind == gpu::MemoryKind::kDevice && recv_info.device == state->device;
  };
  call->eligible =
      route.route == Route::kEngine && layout_ok && exported(*state, sendbuf, &mine) && receive_ready();
  const Op& made = *call;
  *result = start_call(
      *state, std::move(call), route.route == Route::kPmpi,
      [&](BoardEntry& entry) {
        entry.buffer = mine;
        std::copy(offsets, offsets + kMaxDirectRanks, entry.offsets);
        entry.received = received;
        std::copy(made.recv_offsets.begin(), made.recv_offsets.end(), entry.recv_offsets);
        std::copy(made.recv_bytes.begin(), made.recv_bytes.end(), entry.recv_bytes);
        entry.signature = signature;
      },
      [&](MPI_Comm fallback) {
        return PMPI_Ialltoallv(sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls, recvtype,
                               fallback, request);
      },
      request);
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

// --- persistent collectives ------------------------------------------------

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
std::atomic<int> g_persistents{0};

int make_persistent(Persistent call, MPI_Request* request) {
  if (!request) return raise_error(call.comm, MPI_ERR_REQUEST);
  const int result = PMPI_Recv_init(nullptr, 0, MPI_BYTE, MPI_PROC_NULL, 0, call.comm, request);
  if (result != MPI_SUCCESS) return result;
  std::lock_guard<std::mutex> lock(g_persistent_mutex);
  persistents()[*request] = std::move(call);
  g_persistents.store(static_cast<int>(persistents().size()), std::memory_order_release);
  return MPI_SUCCESS;
}

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
  // The completion calls of requests.cc: staged copies delivered, engine
  // calls settled.
  const int result = wait ? handle_Wait(&running, MPI_STATUS_IGNORE) : handle_Test(&running, &done, MPI_STATUS_IGNORE);
  if (result == MPI_SUCCESS && !done) return false;
  std::lock_guard<std::mutex> lock(g_persistent_mutex);
  persistents().at(handle).running = MPI_REQUEST_NULL;
  if (error && *error == MPI_SUCCESS) *error = result;
  return true;
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

bool persistent_live() { return g_persistents.load(std::memory_order_acquire) != 0; }

bool is_persistent(MPI_Request request) {
  if (!persistent_live() || request == MPI_REQUEST_NULL) return false;
  std::lock_guard<std::mutex> lock(g_persistent_mutex);
  return persistents().count(request) != 0;
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

int settle_persistent(int count, const MPI_Request* requests, bool wait, bool* pending) {
  *pending = false;
  int error = MPI_SUCCESS;
  if (!persistent_live() || !requests) return error;
  for (int i = 0; i < count; ++i)
    if (!finish_running(requests[i], wait, &error)) *pending = true;
  return error;
}

void hold_running(int count, MPI_Request* requests, std::vector<std::pair<int, MPI_Request>>* held) {
  held->clear();
  if (!persistent_live() || !requests) return;
  for (int i = 0; i < count; ++i) {
    if (finish_running(requests[i], false, nullptr)) continue;
    held->push_back({i, requests[i]});
    requests[i] = MPI_REQUEST_NULL;
  }
}

int free_persistent(MPI_Request* request) {
  {
    std::lock_guard<std::mutex> lock(g_persistent_mutex);
    auto it = persistents().find(*request);
    if (it->second.running != MPI_REQUEST_NULL) return raise_error(it->second.comm, MPI_ERR_REQUEST);
    persistents().erase(it);
    g_persistents.store(static_cast<int>(persistents().size()), std::memory_order_release);
  }
  return PMPI_Request_free(request);
}

}  // namespace ferry::shim::nbc

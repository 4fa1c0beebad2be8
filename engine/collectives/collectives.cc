#include "engine/collectives/collectives.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "engine/collectives/agreement.h"
#include "engine/collectives/executor.h"
#include "engine/collectives/schedule.h"
#include "engine/collectives/simple_protocol.h"
#include "engine/collectives/tuner.h"
#include "engine/collectives/worker.h"
#include "engine/collectives/worker_common.h"
#include "engine/common/params.h"

namespace ferry {
namespace {

enum class CollectiveKind : std::uint16_t { kAllreduce = 1, kBcast = 2, kAlltoallv = 3 };

const char* collective_name(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::kAllreduce: return "MPI_Allreduce";
    case CollectiveKind::kBcast: return "MPI_Bcast";
    case CollectiveKind::kAlltoallv: return "MPI_Alltoallv";
  }
  return "?";
}

// What each rank says before a collective: whether it takes the engine
// route, with which algorithm (allreduce), the buffers its peers will map
// (none for the LL algorithm), and what it was called with.
struct Handshake {
  CollectiveKind kind;
  std::uint16_t algorithm;
  std::uint16_t eligible;
  std::uint16_t in_place;
  ExportedBuffer first;
  ExportedBuffer second;
  CallSignature signature;
};
static_assert(sizeof(Handshake) == 264, "Handshake travels between processes; keep its layout fixed");

// Where this rank's device work runs: the owner of its buffer.
struct Placement {
  gpu::Backend* backend = nullptr;
  int device = -1;
  gpu::PointerInfo info;  // the buffer's classification, for its export
};

Placement placement_of(const void* buffer) {
  const gpu::PointerInfo info = gpu::classify(buffer);
  if (info.kind != gpu::MemoryKind::kDevice) return {};
  return {gpu::owner_backend(info), info.device, info};
}

// The engine transport for this communicator, if any.
enum class EngineTransport { kNone, kP2p, kShm };

EngineTransport transport_of(Communicator& comm) {
  if (comm.size() > kMaxDirectRanks) return EngineTransport::kNone;
  if (comm.all_peers_mapped()) return EngineTransport::kP2p;
  return comm.shm() ? EngineTransport::kShm : EngineTransport::kNone;
}

struct PhaseTotals {
  std::atomic<std::uint64_t> calls{0};
  std::atomic<std::uint64_t> on_worker{0};
  std::atomic<std::uint64_t> nanoseconds[static_cast<int>(EnginePhase::kCount)] = {};
};
PhaseTotals g_phase_totals[static_cast<int>(EngineCollective::kCount)];
thread_local bool t_ran_on_worker = false;

// Adds each phase's time to the totals, with FERRY_STATS=1 only.
class PhaseClock {
 public:
  explicit PhaseClock(EngineCollective which)
      : totals_(params().stats ? &g_phase_totals[static_cast<int>(which)] : nullptr) {
    if (totals_) last_ = std::chrono::steady_clock::now();
    t_ran_on_worker = false;
  }
  // The time since the previous mark was spent in phase.
  void mark(EnginePhase phase) {
    if (!totals_) return;
    const auto now = std::chrono::steady_clock::now();
    totals_->nanoseconds[static_cast<int>(phase)] +=
        std::chrono::duration_cast<std::chrono::nanoseconds>(now - last_).count();
    last_ = now;
  }
  void count_call() {
    if (!totals_) return;
    ++totals_->calls;
    if (t_ran_on_worker) ++totals_->on_worker;
  }

 private:
  PhaseTotals* totals_;
  std::chrono::steady_clock::time_point last_;
};

// Exchanges handshakes; true when every rank is eligible. Ranks called
// with different arguments all return the same mismatch (agreement.h).
Status agree(Communicator& comm, Handshake& mine, std::vector<Handshake>* all, bool* everyone, PhaseClock& clock) {
  clock.mark(EnginePhase::kSetup);
  all->resize(comm.size());
  FERRY_CHECK(comm.bootstrap().allgather(&mine, all->data(), sizeof(Handshake)));
  *everyone = true;
  std::vector<CallSignature> signatures;
  signatures.reserve(all->size());
  for (const Handshake& h : *all) {
    if (h.kind != mine.kind) {
      FERRY_WARN(Coll, "ranks entered different collectives on one communicator");
      return Status::kInvalidArgument;
    }
    *everyone = *everyone && h.eligible;
    signatures.push_back(h.signature);
  }
  FERRY_CHECK(compare_signatures(signatures, collective_name(mine.kind)));
  clock.mark(EnginePhase::kHandshake);
  return Status::kOk;
}

// After the device work: every rank learns whether any rank failed, and no
// rank returns while a peer may still read or write its buffers.
Status finish_together(Communicator& comm, Status local, PhaseClock& clock) {
  clock.mark(EnginePhase::kRun);
  std::vector<std::int32_t> statuses(comm.size());
  const std::int32_t mine = static_cast<std::int32_t>(local);
  FERRY_CHECK(comm.bootstrap().allgather(&mine, statuses.data(), sizeof(mine)));
  for (int r = 0; r < comm.size(); ++r) {
    if (statuses[r] != 0) {
      if (r != comm.rank())
        FERRY_WARN(Coll, "rank %d failed its part of the collective: %s", r,
                   status_name(static_cast<Status>(statuses[r])));
      return local != Status::kOk ? local : Status::kGpuError;
    }
  }
  clock.mark(EnginePhase::kFinish);
  clock.count_call();
  return Status::kOk;
}

// The end of an LL call: no rank reads another's buffers, so no closing
// exchange; a failure is this rank's (a peer that failed leaves it waiting
// for data until its own wait times out).
Status finish_alone(Status local, PhaseClock& clock) {
  clock.mark(EnginePhase::kRun);
  if (ok(local)) clock.count_call();
  return local;
}

// This rank's pointer to every rank's input and output, mapping the peers'.
struct MappedBuffers {
  const void* inputs[kMaxDirectRanks];
  void* outputs[kMaxDirectRanks];
};

Status map_all(Communicator& comm, const std::vector<Handshake>& all, const void* input, void* output,
               bool need_outputs, MappedBuffers* mapped) {
  std::vector<ExportedBuffer> wanted;
  std::vector<std::pair<int, bool>> slots;  // (rank, is output) of each wanted buffer
  for (int r = 0; r < comm.size(); ++r) {
    mapped->inputs[r] = input;
    mapped->outputs[r] = output;
    if (r == comm.rank()) continue;
    wanted.push_back(all[r].first);
    slots.push_back({r, false});
    if (need_outputs) {
      wanted.push_back(all[r].second);
      slots.push_back({r, true});
    }
  }
  std::vector<void*> pointers(wanted.size());
  FERRY_CHECK(comm.peer_memory().import_buffers(wanted.data(), wanted.size(), pointers.data()));
  for (std::size_t i = 0; i < slots.size(); ++i) {
    if (slots[i].second) {
      mapped->outputs[slots[i].first] = pointers[i];
    } else {
      mapped->inputs[slots[i].first] = pointers[i];
    }
  }
  return Status::kOk;
}

const void* at(const void* base, std::size_t offset) { return static_cast<const char*>(base) + offset; }
void* at(void* base, std::size_t offset) { return static_cast<char*>(base) + offset; }

// The engine worker for a direct reduce or copy list of bytes per rank, or
// nullptr: such items run on the worker only while one of its blocks is
// enough (shared among blocks they measured slower than a launch on
// 2x H200, with the worker's earlier hand-off between blocks); larger ones
// launch their kernels and copies.
Worker* worker_for_call(Communicator& comm, const Placement& where, std::size_t bytes) {
  if (bytes > std::min(worker_max_bytes(), kWorkerOneBlockBytes)) return nullptr;
  return comm.worker_for(where.backend, where.device);
}

// Runs item (its kind and arguments filled in) on one worker block; bytes is
// the call's size per rank.
Status run_on_worker(Worker& worker, std::size_t bytes, WorkItem item) {
  item.blocks = 1;
  t_ran_on_worker = true;
  FERRY_TRACE(Coll, "%s of %zu bytes on the engine worker (%d blocks)",
              item.kind == WorkKind::kCopies ? "copies" : "direct reduce", bytes, item.blocks);
  return worker.run(item);
}

// One-shot and two-shot: SM loads straight from the peers' buffers. The
// elements of slice of every rank's input are reduced into this rank's
// output (one-shot: the whole range), or into every rank's (two-shot: a
// slice a rank).
Status run_direct_reduce(Communicator& comm, const MappedBuffers& buffers, const Placement& where,
                         std::size_t count, DataType type, ReduceOp op, ElementRange slice, bool one_shot) {
  const int n = comm.size();
  const std::size_t element = data_type_size(type);
  DirectReduceArgs args{};
  args.ninputs = n;
  args.noutputs = one_shot ? 1 : n;
  args.count = slice.size();
  args.type = type;
  args.op = op;
  const std::size_t offset = slice.begin * element;
  for (int r = 0; r < n; ++r) args.inputs[r] = at(buffers.inputs[r], offset);
  if (one_shot) {
    args.outputs[0] = at(buffers.outputs[comm.rank()], offset);
  } else {
    for (int r = 0; r < n; ++r) args.outputs[r] = at(buffers.outputs[r], offset);
  }
  FERRY_CHECK(where.backend->set_device(where.device));
  if (Worker* worker = worker_for_call(comm, where, count * element)) {
    WorkItem item{};
    item.kind = WorkKind::kDirectReduce;
    item.reduce = args;
    return run_on_worker(*worker, count * element, item);
  }
  gpu::Stream stream = nullptr;
  FERRY_CHECK(comm.stream_for(where.backend, where.device, &stream));
  FERRY_CHECK(launch_direct_reduce(where.backend, args, stream));
  return where.backend->stream_synchronize(stream);
}

// A reduce of ninputs inputs (the caller fills them in) into output.
DirectReduceArgs reduce_into_one(int ninputs, std::size_t count, DataType type, ReduceOp op, void* output) {
  DirectReduceArgs args{};
  args.ninputs = ninputs;
  args.noutputs = 1;
  args.count = count;
  args.type = type;
  args.op = op;
  args.outputs[0] = output;
  return args;
}

// Copy-engine two-shot: for each chunk of this rank's slice, the copy engines
// pull the peers' inputs into scratch, a kernel reduces them with the local
// input into the local output, and the copy engines push the result into the
// peers' outputs. Three streams overlap the stages of successive chunks; two
// scratch slots alternate.
Status run_copy_engine_reduce(Communicator& comm, const MappedBuffers& buffers, const Placement& where,
                              std::size_t count, DataType type, ReduceOp op) {
  constexpr std::size_t kMaxChunkBytes = std::size_t{16} << 20;
  constexpr int kSlots = 2;
  enum { kPull, kReduce, kPush, kStreams };
  const int n = comm.size();
  const int me = comm.rank();
  const std::size_t element = data_type_size(type);
  const ElementRange slice = direct_part(me, n, count, type);
  if (slice.size() == 0) return Status::kOk;
  const std::size_t chunk = pipeline_chunk_elements(slice.size(), element, kMaxChunkBytes);
  const std::size_t chunk_bytes = chunk * element;

  gpu::Backend* backend = where.backend;
  FERRY_CHECK(backend->set_device(where.device));
  gpu::Stream streams[kStreams];
  gpu::Event pulled[kSlots], reduced[kSlots];
  for (int i = 0; i < kStreams; ++i) FERRY_CHECK(comm.stream_for(backend, where.device, &streams[i], i));
  for (int i = 0; i < kSlots; ++i) {
    FERRY_CHECK(comm.event_for(backend, where.device, &pulled[i], 2 * i));
    FERRY_CHECK(comm.event_for(backend, where.device, &reduced[i], 2 * i + 1));
  }
  void* scratch = nullptr;
  FERRY_CHECK(comm.scratch_for(backend, where.device, kSlots * (n - 1) * chunk_bytes, &scratch));

  std::size_t c = 0;
  for (std::size_t begin = slice.begin; begin < slice.end; begin += chunk, ++c) {
    const std::size_t elements = std::min(chunk, slice.end - begin);
    const std::size_t offset = begin * element;
    const std::size_t bytes = elements * element;
    const int slot = static_cast<int>(c % kSlots);
    void* slot_base = at(scratch, slot * (n - 1) * chunk_bytes);

    // The slot is free once the reduce of chunk c - kSlots has read it.
    if (c >= kSlots) FERRY_CHECK(backend->stream_wait_event(streams[kPull], reduced[slot]));
    DirectReduceArgs args = reduce_into_one(n, elements, type, op, at(buffers.outputs[me], offset));
    args.inputs[0] = at(buffers.inputs[me], offset);
    for (int step = 1; step < n; ++step) {
      const int peer = (me + step) % n;
      void* landing = at(slot_base, (step - 1) * chunk_bytes);
      FERRY_CHECK(backend->copy_async(landing, at(buffers.inputs[peer], offset), bytes, streams[kPull]));
      args.inputs[step] = landing;
    }
    FERRY_CHECK(backend->event_record(pulled[slot], streams[kPull]));

    FERRY_CHECK(backend->stream_wait_event(streams[kReduce], pulled[slot]));
    FERRY_CHECK(launch_direct_reduce(backend, args, streams[kReduce]));
    FERRY_CHECK(backend->event_record(reduced[slot], streams[kReduce]));

    FERRY_CHECK(backend->stream_wait_event(streams[kPush], reduced[slot]));
    for (int step = 1; step < n; ++step) {
      const int peer = (me + step) % n;
      FERRY_CHECK(backend->copy_async(at(buffers.outputs[peer], offset), at(buffers.outputs[me], offset), bytes,
                                      streams[kPush]));
    }
  }
  for (gpu::Stream stream : streams) FERRY_CHECK(backend->stream_synchronize(stream));
  return Status::kOk;
}


// Copy-engine push (cepush). Chunk by chunk, the push stream copies this
// rank's input into its landing slot in every peer and raises that peer's
// arrived flag; the reduce stream waits for every peer's flag, reduces the
// chunk from the input and the slots in rank order (every rank gets the same
// bits) and raises each sender's consumed flag, which the sender waits for
// before it refills that slot two chunks later. Flags carry a sequence
// number that runs on from call to call, so a call needs no set-up; nothing
// of the application's is mapped and no rank reads another's buffers, so no
// closing exchange. A call that fails, or is unfinished after
// FERRY_HANDSHAKE_TIMEOUT, raises its own flags to free its streams, and the
// slots are not used again.
//
// Streams 0-2 and events 0-3 are the copy-engine two-shot's. The reduce
// stream is urgent: its kernels run as soon as the chunk has landed, not
// after every block of an application kernel queued meanwhile.
constexpr int kPushStream = 3, kReduceStream = 4, kPushedEvent = 4;

// Queues one call's chunks on the push and reduce streams (the caller holds
// the communicator's copy-push lock, so calls queue whole and in order).
Status queue_copy_push(Communicator& comm, const Placement& where, const void* input, void* output,
                       std::size_t count, DataType type, ReduceOp op) {
  gpu::Backend* backend = where.backend;
  FERRY_CHECK(backend->set_device(where.device));
  Communicator::CopyPushSlots* slots = nullptr;
  FERRY_CHECK(comm.copy_push_slots(backend, where.device, &slots));
  const int n = comm.size();
  const int me = comm.rank();
  const std::size_t element = data_type_size(type);
  gpu::Stream push = nullptr, reduce = nullptr;
  gpu::Event pushed[2];
  FERRY_CHECK(comm.stream_for(backend, where.device, &push, kPushStream));
  FERRY_CHECK(comm.stream_for(backend, where.device, &reduce, kReduceStream, true));
  for (int k = 0; k < 2; ++k) FERRY_CHECK(comm.event_for(backend, where.device, &pushed[k], kPushedEvent + k));
  void* own = slots->buffers[me];

  std::size_t begin = 0;
  for (const std::size_t elements : copy_push_chunks(count, element, slots->slot_bytes)) {
    const std::uint32_t sequence = ++slots->sequence;
    const int k = static_cast<int>(sequence % 2);
    const std::size_t offset = begin * element;
    DirectReduceArgs args = reduce_into_one(n, elements, type, op, at(output, offset));
    args.inputs[me] = at(input, offset);
    for (int r = 0; r < n; ++r) {
      if (r == me) continue;
      // The slot last held chunk sequence - 2: r must have reduced it.
      FERRY_CHECK(backend->stream_wait_value(push, Communicator::copy_push_consumed(own, r), sequence - 2));
      FERRY_CHECK(backend->copy_async(comm.copy_push_slot(r, me, k), at(input, offset), elements * element, push));
      FERRY_CHECK(backend->stream_write_value(push, Communicator::copy_push_arrived(slots->buffers[r], me), sequence));
      args.inputs[r] = comm.copy_push_slot(me, r, k);
    }
    FERRY_CHECK(backend->event_record(pushed[k], push));
    for (int r = 0; r < n; ++r)
      if (r != me) FERRY_CHECK(backend->stream_wait_value(reduce, Communicator::copy_push_arrived(own, r), sequence));
    // In place, the reduce overwrites what the push reads.
    FERRY_CHECK(backend->stream_wait_event(reduce, pushed[k]));
    FERRY_CHECK(launch_direct_reduce(backend, args, reduce));
    for (int r = 0; r < n; ++r)
      if (r != me)
        FERRY_CHECK(backend->stream_write_value(reduce, Communicator::copy_push_consumed(slots->buffers[r], me),
                                                sequence));
    begin += elements;
  }
  return Status::kOk;
}

// After a failed or unfinished cepush call: raises this rank's flags far
// enough ahead that every wait queued so far is satisfied, lets the streams
// drain, and retires the slots.
void abandon_copy_push(Communicator& comm, gpu::Backend* backend, int device, Status why) {
  Communicator::CopyPushSlots* slots = nullptr;
  // (Only where they are made: making them is collective.)
  if (!comm.copy_push_made(backend, device) || !ok(comm.copy_push_slots(backend, device, &slots))) return;
  const std::uint32_t release = slots->sequence + (1u << 30);
  void* own = slots->buffers[comm.rank()];
  for (int r = 0; r < comm.size(); ++r) {
    if (r == comm.rank()) continue;
    FERRY_LOG_IF_FAILED(backend->write_value_now(Communicator::copy_push_arrived(own, r), release));
    FERRY_LOG_IF_FAILED(backend->write_value_now(Communicator::copy_push_consumed(own, r), release));
  }
  for (const int index : {kPushStream, kReduceStream}) {
    gpu::Stream stream = nullptr;
    if (ok(comm.stream_for(backend, device, &stream, index))) FERRY_LOG_IF_FAILED(backend->stream_synchronize(stream));
  }
  FERRY_WARN(Coll, "copy-engine push allreduce failed (%s); this communicator's landing slots are not used again",
             status_name(why));
  slots->broken = true;
}

Status run_copy_push(Communicator& comm, const Placement& where, const void* input, void* output,
                     std::size_t count, DataType type, ReduceOp op) {
  const auto deadline = handshake_deadline();
  Status queued;
  {
    std::lock_guard<std::mutex> lock(comm.copy_push_mutex());
    queued = queue_copy_push(comm, where, input, output, count, type, op);
  }
  gpu::Stream push = nullptr, reduce = nullptr;
  FERRY_CHECK(comm.stream_for(where.backend, where.device, &push, kPushStream));
  FERRY_CHECK(comm.stream_for(where.backend, where.device, &reduce, kReduceStream, true));
  const Status status = ok(queued) ? wait_streams_until(where.backend, {push, reduce}, deadline) : queued;
  if (!ok(status)) {
    std::lock_guard<std::mutex> lock(comm.copy_push_mutex());
    abandon_copy_push(comm, where.backend, where.device, status);
  }
  return status;
}

// The handshake's algorithm field for bcast and alltoallv: the LL protocol
// (every rank able to), the chain over the Simple protocol (bcast), or the
// copy paths.
constexpr std::uint16_t kCopyPaths = 0, kLlPath = 1, kChainPath = 2;

// Bcast along a chain from three ranks and 1 MiB on: every pull of the
// root's buffer shares the root's links, (n-1) times its bytes, while a
// chain moves them over each link once. Two ranks pull (one reader).
constexpr int kChainMinRanks = 3;
constexpr std::size_t kChainMinBytes = std::size_t{1} << 20;

// True when every rank said algorithm; false when none did. Mixed answers
// (possible only when some rank has no worker) take the copy paths, which
// every rank prepared for.
bool all_chose(const std::vector<Handshake>& all, std::uint16_t algorithm) {
  for (const Handshake& h : all)
    if (h.algorithm != algorithm) return false;
  return true;
}

// Whether this rank can take the LL path for blocks of up to largest bytes:
// they fit the LL slots and FERRY_WORKER_MAX_BYTES.
bool ll_ready(Communicator& comm, EngineTransport transport, const Placement& where, std::size_t largest) {
  return transport == EngineTransport::kP2p && largest <= ll_call_max_bytes(comm.size()) && where.backend &&
         comm.ll_possible(where.backend, where.device);
}

// Bcast's default LL range, the pull beyond: as measured on 2x H200, and,
// with every rank on one GPU (MPS), up to 256 KiB (bench/RESULTS.md: 8.1-8.7
// against 13.3-13.4 us at 32-256 KiB on one H200, two ranks; 14.1 against
// 13.5 at 512 KiB).
constexpr std::size_t kLlBcastMaxBytes = 16 << 10;
constexpr std::size_t kLlBcastOneGpuMaxBytes = 256 << 10;

// Worker blocks for an LL call that moves bytes per rank: one block answers
// small calls without handing the item to the others; larger ones take a
// block per kLlBytesPerSharingBlock (worker.h; tuner.cc models both).
int ll_blocks(Communicator& comm, const Placement& where, std::size_t bytes) {
  return ll_share_blocks(bytes, comm.worker_for(where.backend, where.device)->blocks());
}

// Fills what the arguments of every LL call share (LlAllreduceArgs,
// LlBcastArgs, LlAlltoallvArgs): the call's flag and buffer half, the wait
// limit, every rank's receive buffer, and who is who.
template <typename LlArgs>
Status prepare_ll_call(Communicator& comm, const Placement& where, LlArgs* args) {
  Communicator::LlChannel* channel = nullptr;
  FERRY_CHECK(comm.ll_channel(where.backend, where.device, &channel));
  const std::uint64_t call = ++channel->calls;
  args->flag = doorbell_flag(call);
  args->parity = static_cast<std::uint32_t>(call % 2);
  args->timeout_ms = static_cast<std::uint32_t>(std::min<std::int64_t>(params().handshake_timeout, 1 << 20) * 1000);
  for (int r = 0; r < comm.size(); ++r) args->buffers[r] = channel->buffers[r];
  args->rank = comm.rank();
  args->nranks = comm.size();
  t_ran_on_worker = true;
  return Status::kOk;
}

// One-shot over LL or LL128 (kind) on the worker: nothing of the
// application's is mapped, and no rank reads another's buffers, so no
// closing exchange is needed.
Status run_ll_allreduce(Communicator& comm, const Placement& where, WorkKind kind, const void* input, void* output,
                        std::size_t count, DataType type, ReduceOp op) {
  WorkItem item{};
  item.kind = kind;
  item.blocks = ll_blocks(comm, where, count * data_type_size(type));
  FERRY_CHECK(prepare_ll_call(comm, where, &item.ll));
  item.ll.input = input;
  item.ll.output = output;
  item.ll.count = count;
  item.ll.type = type;
  item.ll.op = op;
  return comm.worker_for(where.backend, where.device)->run(item);
}

Status run_ll_bcast(Communicator& comm, const Placement& where, void* buffer, std::size_t bytes, int root) {
  WorkItem item{};
  item.kind = WorkKind::kLlBcast;
  item.blocks = ll_blocks(comm, where, bytes);
  FERRY_CHECK(prepare_ll_call(comm, where, &item.ll_bcast));
  item.ll_bcast.buffer = buffer;
  item.ll_bcast.bytes = bytes;
  item.ll_bcast.root = root;
  return comm.worker_for(where.backend, where.device)->run(item);
}

Status run_ll_alltoallv(Communicator& comm, const Placement& where, const void* send, const std::size_t* send_bytes,
                        const std::size_t* send_offsets, void* recv, const std::size_t* recv_bytes,
                        const std::size_t* recv_offsets) {
  WorkItem item{};
  item.kind = WorkKind::kLlAlltoallv;
  LlAlltoallvArgs& a = item.ll_alltoallv;
  FERRY_CHECK(prepare_ll_call(comm, where, &a));
  std::size_t sent = 0;
  for (int r = 0; r < comm.size(); ++r) {
    a.send[r] = at(send, send_offsets[r]);
    a.send_bytes[r] = send_bytes[r];
    a.recv[r] = at(recv, recv_offsets[r]);
    a.recv_bytes[r] = recv_bytes[r];
    sent += send_bytes[r];
  }
  item.blocks = ll_blocks(comm, where, sent);
  return comm.worker_for(where.backend, where.device)->run(item);
}

// At most one collective over the Simple protocol at a time per process and
// device. Its blocks wait for their peers' blocks, so concurrent ones (other
// communicators, MPI_THREAD_MULTIPLE) could fill the GPU with blocks that
// wait for blocks which cannot start. A call that finds the gate taken plans
// another algorithm; the ranks then disagree and stage, which is correct
// whatever order the ranks' threads arrive in.
class SimpleGate {
 public:
  SimpleGate() = default;
  SimpleGate(const SimpleGate&) = delete;
  SimpleGate& operator=(const SimpleGate&) = delete;
  ~SimpleGate() {
    if (!held_) return;
    std::lock_guard<std::mutex> lock(mutex());
    busy().erase(key_);
  }

  bool try_enter(gpu::Backend* backend, int device) {
    // The emulated device runs the steps on the calling thread: no blocks
    // to fill it with (and its tests run every rank in one process).
    if (backend->execution_site() == gpu::ExecutionSite::kHost) return true;
    std::lock_guard<std::mutex> lock(mutex());
    key_ = {backend, device};
    held_ = busy().insert(key_).second;
    return held_;
  }

 private:
  static std::mutex& mutex() {
    static std::mutex m;
    return m;
  }
  static std::set<std::pair<gpu::Backend*, int>>& busy() {
    static std::set<std::pair<gpu::Backend*, int>> devices;
    return devices;
  }
  std::pair<gpu::Backend*, int> key_{};
  bool held_ = false;
};

// Ring and tree run over the Simple protocol's FIFOs.
bool uses_fifos(AllreduceAlgorithm algorithm) {
  return algorithm == AllreduceAlgorithm::kRing || algorithm == AllreduceAlgorithm::kTree;
}

// The worker's one-shot allreduces, over LL or LL128.
bool on_worker(AllreduceAlgorithm algorithm) {
  return algorithm == AllreduceAlgorithm::kOneShotLl || algorithm == AllreduceAlgorithm::kOneShotLl128;
}

// Whether peers map this rank's buffers (LL, LL128, ring, tree and cepush
// never do).
bool maps_buffers(AllreduceAlgorithm algorithm) {
  return !on_worker(algorithm) && algorithm != AllreduceAlgorithm::kCopyPush && !uses_fifos(algorithm);
}

// Makes the channels at the first call that agreed on them (collective);
// false on every rank when they cannot be made, or must not be (ranks
// sharing a GPU): the call then takes another way.
bool simple_ready(Communicator& comm, const Placement& where) {
  Communicator::SimpleChannels* channels = nullptr;
  return ok(comm.simple_channels(where.backend, where.device, &channels));
}

// Makes the landing slots at the first cepush call (collective); false on
// every rank when they cannot be made.
bool copy_push_ready(Communicator& comm, const Placement& where) {
  Communicator::CopyPushSlots* slots = nullptr;
  return ok(comm.copy_push_slots(where.backend, where.device, &slots));
}

// A collective over the Simple protocol (ring, tree, chain): no rank touches
// another's buffers, so, as with LL, no closing exchange. A failure leaves
// the FIFO counters of the ranks out of step: the channels are not used
// again.
Status run_simple(Communicator& comm, const Placement& where, SimpleCollective collective, int root,
                  const void* input, void* output, std::size_t count, DataType type, ReduceOp op) {
  gpu::Backend* backend = where.backend;
  FERRY_CHECK(backend->set_device(where.device));
  Communicator::SimpleChannels* channels = nullptr;
  FERRY_CHECK(comm.simple_channels(backend, where.device, &channels));
  const Status status = [&] {
    const SimplePlan* plan = nullptr;
    SimpleArgs args{};
    FERRY_CHECK(comm.simple_plan(collective, root, count, data_type_size(type), &plan, &args.steps));
    args.full_steps = plan->full_steps;
    args.last_steps = plan->last_steps;
    args.region_elements = plan->region_elements;
    args.regions = plan->regions;
    args.input = input;
    args.output = output;
    args.type = type;
    args.op = op;
    args.rank = comm.rank();
    args.nranks = comm.size();
    args.channels = channels->channels;
    args.group = kSimpleRegionsInFlight;
    args.timeout_ms = static_cast<std::uint32_t>(std::min<std::int64_t>(params().handshake_timeout, 1 << 20) * 1000);
    args.failed = channels->failed;
    for (int r = 0; r < comm.size(); ++r) {
      args.buffers[r] = channels->buffers[r];
      args.nsenders[r] = channels->nsenders[r];
      args.fifo_at[r] = channels->fifo_at[r];
      args.own_fifo[r] = channels->own_fifo[r];
    }
    gpu::Stream stream = nullptr;
    FERRY_CHECK(comm.stream_for(backend, where.device, &stream));
    if (comm.size() == 1 && input != output)
      FERRY_CHECK(backend->copy_async(output, input, count * data_type_size(type), stream));
    FERRY_CHECK(launch_simple(backend, args, stream));
    FERRY_CHECK(backend->stream_synchronize(stream));
    const std::int32_t failed = *channels->failed;
    *channels->failed = 0;
    return failed ? static_cast<Status>(failed) : Status::kOk;
  }();
  if (!ok(status)) {
    static const char* const names[] = {"ring allreduce", "tree allreduce", "chain bcast"};
    FERRY_WARN(Coll, "%s failed (%s); this communicator's Simple protocol FIFOs are not used again",
               names[static_cast<int>(collective)], status_name(status));
    channels->broken = true;
  }
  return status;
}

// The leader of each GPU (Communicator::gpu_leader) reduces a slice of every
// rank's input into every rank's output, a slice a leader (two-shot among
// the leaders), so one process a GPU runs kernels and none waits out
// another's time slice; right in place too, each element being one
// leader's. The other ranks only wait (finish_together).
Status run_allreduce_by_gpu_leaders(Communicator& comm, const std::vector<Handshake>& all, const Placement& where,
                                    const void* input, void* output, std::size_t count, DataType type, ReduceOp op) {
  const int me = comm.rank();
  if (comm.gpu_leader(me) != me) return Status::kOk;
  const int part = comm.gpu_leaders_before_me(), leaders = comm.gpu_leader_count();
  FERRY_TRACE(Coll, "allreduce of %zu elements: slice %d of %d for every rank, as its GPU's leader", count, part,
              leaders);
  MappedBuffers buffers{};
  FERRY_CHECK(map_all(comm, all, input, output, /*need_outputs=*/true, &buffers));
  return run_direct_reduce(comm, buffers, where, count, type, op, direct_part(part, leaders, count, type),
                           /*one_shot=*/false);
}

// Bcast's pull where GPU leaders work for their GPU's ranks: each leader
// copies the root's buffer into every other rank's of its GPU.
Status run_bcast_by_gpu_leaders(Communicator& comm, const std::vector<Handshake>& all, const Placement& where,
                                void* buffer, std::size_t bytes, int root) {
  const int me = comm.rank();
  if (comm.gpu_leader(me) != me) return Status::kOk;
  std::vector<int> receivers;
  std::vector<ExportedBuffer> wanted;
  for (int r = 0; r < comm.size(); ++r) {
    if (r == root || comm.gpu_leader(r) != me) continue;
    receivers.push_back(r);
    if (r != me) wanted.push_back(all[r].first);
  }
  if (receivers.empty()) return Status::kOk;
  FERRY_TRACE(Coll, "bcast of %zu bytes into %zu ranks' buffers, as their GPU's leader", bytes, receivers.size());
  if (root != me) wanted.push_back(all[root].first);
  std::vector<void*> mapped(wanted.size());
  FERRY_CHECK(comm.peer_memory().import_buffers(wanted.data(), wanted.size(), mapped.data()));
  const void* source = root == me ? buffer : mapped.back();
  gpu::Stream stream = nullptr;
  FERRY_CHECK(where.backend->set_device(where.device));
  FERRY_CHECK(comm.stream_for(where.backend, where.device, &stream));
  CopyListLauncher copies(where.backend, stream);
  std::size_t next = 0;
  for (int r : receivers) FERRY_CHECK(copies.add(r == me ? buffer : mapped[next++], source, bytes));
  FERRY_CHECK(copies.finish());
  return where.backend->stream_synchronize(stream);
}

// Alltoallv's copies where GPU leaders work for their GPU's ranks: each
// leader copies every block its GPU's ranks receive. layouts holds, for
// each rank, its send offsets, receive offsets and receive bytes by peer.
Status run_alltoallv_by_gpu_leaders(Communicator& comm, const std::vector<Handshake>& all, const Placement& where,
                                    const void* send, void* recv, const std::vector<std::uint64_t>& layouts) {
  const int n = comm.size();
  const int me = comm.rank();
  if (comm.gpu_leader(me) != me) return Status::kOk;
  const auto layout = [&](int rank, int table, int peer) {
    return layouts[(static_cast<std::size_t>(rank) * 3 + table) * n + peer];
  };
  enum { kSendOffsets, kRecvOffsets, kRecvBytes };
  // Every peer's send buffer and the receive buffers of this GPU's ranks.
  std::vector<ExportedBuffer> wanted;
  for (int r = 0; r < n; ++r) {
    if (r == me) continue;
    wanted.push_back(all[r].first);
    if (comm.gpu_leader(r) == me) wanted.push_back(all[r].second);
  }
  std::vector<void*> mapped(wanted.size());
  FERRY_CHECK(comm.peer_memory().import_buffers(wanted.data(), wanted.size(), mapped.data()));
  std::vector<const void*> sends(n, send);
  std::vector<void*> recvs(n, recv);
  for (int r = 0, i = 0; r < n; ++r) {
    if (r == me) continue;
    sends[r] = mapped[i++];
    if (comm.gpu_leader(r) == me) recvs[r] = mapped[i++];
  }
  gpu::Stream stream = nullptr;
  FERRY_CHECK(where.backend->set_device(where.device));
  FERRY_CHECK(comm.stream_for(where.backend, where.device, &stream));
  // One kernel a list of blocks.
  CopyListLauncher blocks(where.backend, stream);
  for (int receiver = 0; receiver < n; ++receiver) {
    if (comm.gpu_leader(receiver) != me) continue;
    for (int sender = 0; sender < n; ++sender)
      FERRY_CHECK(blocks.add(at(recvs[receiver], layout(receiver, kRecvOffsets, sender)),
                             at(sends[sender], layout(sender, kSendOffsets, receiver)),
                             layout(receiver, kRecvBytes, sender)));
  }
  FERRY_CHECK(blocks.finish());
  FERRY_TRACE(Coll, "alltoallv: %d blocks into the buffers of its GPU's ranks, as their leader", blocks.copies());
  return where.backend->stream_synchronize(stream);
}

Status run_allreduce(Communicator& comm, const std::vector<Handshake>& all, const Placement& where,
                     const void* input, void* output, std::size_t count, DataType type, ReduceOp op) {
  // The ranks' choices differ only when FERRY_TUNE forced an algorithm that
  // cannot run in place on some of them: choose again, knowing that.
  bool any_in_place = false, agreed = true;
  for (const Handshake& h : all) {
    any_in_place = any_in_place || h.in_place;
    agreed = agreed && h.algorithm == all[0].algorithm;
  }
  AllreduceAlgorithm algorithm =
      agreed ? static_cast<AllreduceAlgorithm>(all[0].algorithm)
             : choose_allreduce(comm.size(), count * data_type_size(type), any_in_place);
  // LL, ring and tree need every rank to have skipped its exports: here
  // they did not.
  if (!maps_buffers(algorithm))
    algorithm = any_in_place ? AllreduceAlgorithm::kTwoShot : AllreduceAlgorithm::kOneShot;
  count_allreduce_run(algorithm);
  if (comm.by_gpu_leaders()) return run_allreduce_by_gpu_leaders(comm, all, where, input, output, count, type, op);
  MappedBuffers buffers{};
  FERRY_CHECK(map_all(comm, all, input, output, algorithm != AllreduceAlgorithm::kOneShot, &buffers));
  switch (algorithm) {
    case AllreduceAlgorithm::kOneShot:
      return run_direct_reduce(comm, buffers, where, count, type, op, {0, count}, /*one_shot=*/true);
    case AllreduceAlgorithm::kTwoShot:
      return run_direct_reduce(comm, buffers, where, count, type, op,
                               direct_part(comm.rank(), comm.size(), count, type), /*one_shot=*/false);
    case AllreduceAlgorithm::kCopyEngine:
      return run_copy_engine_reduce(comm, buffers, where, count, type, op);
    case AllreduceAlgorithm::kOneShotLl:  // taken above, as are LL128, ring, tree and cepush
    case AllreduceAlgorithm::kOneShotLl128:
    case AllreduceAlgorithm::kRing:
    case AllreduceAlgorithm::kTree:
    case AllreduceAlgorithm::kCopyPush:
    case AllreduceAlgorithm::kCount:
      break;
  }
  return Status::kInternal;
}

// The shm transport: data crosses between ranks through each rank's host
// shared-memory segment, in chunks that fit it; a barrier separates the
// steps, since no rank may read a segment before its owner filled it, nor
// refill it before every peer read it.
Status run_shm_allreduce(Communicator& comm, const Placement& where, const void* input, void* output,
                         std::size_t count, DataType type, ReduceOp op) {
  SharedSegments& shm = *comm.shm();
  const int n = comm.size();
  const int me = comm.rank();
  const std::size_t element = data_type_size(type);
  const std::size_t align = std::max<std::size_t>(1, 16 / element);
  // Each segment holds an input area and an output area.
  const std::size_t area = shm.bytes() / 2 / 16 * 16;
  const std::size_t chunk = std::max(align, area / element / align * align);
  gpu::Stream stream = nullptr;
  FERRY_CHECK(where.backend->set_device(where.device));
  FERRY_CHECK(comm.stream_for(where.backend, where.device, &stream));
  for (std::size_t begin = 0; begin < count; begin += chunk) {
    const std::size_t elements = std::min(chunk, count - begin);
    FERRY_CHECK(where.backend->copy(shm.segment(me), at(input, begin * element), elements * element));
    FERRY_CHECK(comm.bootstrap().barrier());
    const ElementRange slice = direct_slice(me, n, elements, align);
    DirectReduceArgs args{};
    args.ninputs = n;
    args.noutputs = n;
    args.count = slice.size();
    args.type = type;
    args.op = op;
    for (int r = 0; r < n; ++r) {
      args.inputs[r] = shm.segment(r) + slice.begin * element;
      args.outputs[r] = shm.segment(r) + area + slice.begin * element;
    }
    FERRY_CHECK(launch_direct_reduce(where.backend, args, stream));
    FERRY_CHECK(where.backend->stream_synchronize(stream));
    FERRY_CHECK(comm.bootstrap().barrier());
    FERRY_CHECK(where.backend->copy(at(output, begin * element), shm.segment(me) + area, elements * element));
    FERRY_CHECK(comm.bootstrap().barrier());
  }
  return Status::kOk;
}

Status run_shm_bcast(Communicator& comm, const Placement& where, void* buffer, std::size_t bytes, int root) {
  SharedSegments& shm = *comm.shm();
  for (std::size_t begin = 0; begin < bytes; begin += shm.bytes()) {
    const std::size_t length = std::min(shm.bytes(), bytes - begin);
    if (comm.rank() == root) FERRY_CHECK(where.backend->copy(shm.segment(root), at(buffer, begin), length));
    FERRY_CHECK(comm.bootstrap().barrier());
    if (comm.rank() != root) FERRY_CHECK(where.backend->copy(at(buffer, begin), shm.segment(root), length));
    FERRY_CHECK(comm.bootstrap().barrier());
  }
  return Status::kOk;
}

// Each rank's whole send span goes to its segment at once (eligible only when
// it fits); receivers then copy their blocks out.
Status run_shm_alltoallv(Communicator& comm, const Placement& where, const void* send, std::size_t send_span,
                         const std::vector<std::uint64_t>& offsets, void* recv, const std::size_t* recv_bytes,
                         const std::size_t* recv_offsets) {
  SharedSegments& shm = *comm.shm();
  const int n = comm.size();
  FERRY_CHECK(where.backend->copy(shm.segment(comm.rank()), send, send_span));
  FERRY_CHECK(comm.bootstrap().barrier());
  for (int peer = 0; peer < n; ++peer) {
    if (recv_bytes[peer] == 0) continue;
    const char* block = shm.segment(peer) + offsets[static_cast<std::size_t>(peer) * n + comm.rank()];
    FERRY_CHECK(where.backend->copy(at(recv, recv_offsets[peer]), block, recv_bytes[peer]));
  }
  return comm.bootstrap().barrier();
}


}  // namespace

Status allreduce(Communicator& comm, const void* send, void* recv, std::size_t count, DataType type, ReduceOp op,
                 bool eligible, bool* ran) {
  *ran = false;
  PhaseClock clock(EngineCollective::kAllreduce);
  const EngineTransport transport = transport_of(comm);
  const void* input = send ? send : recv;
  Placement where;
  SimpleGate gate;
  Handshake mine{CollectiveKind::kAllreduce, 0, 0, send == nullptr, {}, {}, reduction_signature(count, type, op)};
  // One rank in place: its input is the result.
  if (comm.size() == 1 && send == nullptr && eligible && count > 0 && reduction_defined(type, op) &&
      placement_of(recv).backend) {
    *ran = true;
    clock.count_call();
    return Status::kOk;
  }
  if (eligible && count > 0 && transport != EngineTransport::kNone && reduction_defined(type, op)) {
    where = placement_of(recv);
    const Placement in = placement_of(input);
    AllreduceAlgorithm planned = AllreduceAlgorithm::kOneShot;
    if (transport == EngineTransport::kP2p) {
      planned = choose_allreduce(comm.size(), count * data_type_size(type), send == nullptr);
      // LL128 reduces a few (type, op) pairs (worker_common.h); LL any.
      if (planned == AllreduceAlgorithm::kOneShotLl128 && !ll128_reduces(type, op))
        planned = count * data_type_size(type) <= ll_call_max_bytes(comm.size()) ? AllreduceAlgorithm::kOneShotLl
                  : send == nullptr                                          ? AllreduceAlgorithm::kTwoShot
                                                                             : AllreduceAlgorithm::kOneShot;
      // LL needs the worker, ring and tree their FIFOs; without them here,
      // one-shot (or two-shot in place).
      const bool possible =
          where.backend &&
          (on_worker(planned)                         ? comm.ll_possible(where.backend, where.device)
           : planned == AllreduceAlgorithm::kCopyPush ? comm.copy_push_possible(where.backend, where.device)
           : uses_fifos(planned)                      ? comm.simple_possible(where.backend, where.device) &&
                                                           gate.try_enter(where.backend, where.device)
                                                      : true);
      if (!possible) planned = send == nullptr ? AllreduceAlgorithm::kTwoShot : AllreduceAlgorithm::kOneShot;
    }
    mine.algorithm = static_cast<std::uint16_t>(planned);
    mine.eligible = where.backend && in.backend == where.backend && in.device == where.device &&
                    (transport != EngineTransport::kP2p || !maps_buffers(planned) ||
                     (ok(comm.peer_memory().export_buffer(input, in.info, &mine.first)) &&
                      ok(comm.peer_memory().export_buffer(recv, where.info, &mine.second))));
  }
  std::vector<Handshake> all;
  bool everyone = false;
  FERRY_CHECK(agree(comm, mine, &all, &everyone, clock));
  // Ranks on LL, ring or tree exported nothing: unless every rank takes the
  // same one of those, all stage.
  bool unanimous = true, any_unmapped = false;
  for (const Handshake& h : all) {
    unanimous = unanimous && h.algorithm == all[0].algorithm;
    any_unmapped = any_unmapped || !maps_buffers(static_cast<AllreduceAlgorithm>(h.algorithm));
  }
  if (!everyone || (any_unmapped && !unanimous)) return Status::kOk;
  const auto agreed = static_cast<AllreduceAlgorithm>(all[0].algorithm);
  if (uses_fifos(agreed) && !simple_ready(comm, where)) return Status::kOk;  // every rank stages
  if (agreed == AllreduceAlgorithm::kCopyPush && !copy_push_ready(comm, where)) return Status::kOk;
  *ran = true;
  if (any_unmapped && transport == EngineTransport::kP2p) {
    count_allreduce_run(agreed);
    if (on_worker(agreed)) {
      const WorkKind kind =
          agreed == AllreduceAlgorithm::kOneShotLl ? WorkKind::kLlAllreduce : WorkKind::kLl128Allreduce;
      return finish_alone(run_ll_allreduce(comm, where, kind, input, recv, count, type, op), clock);
    }
    if (agreed == AllreduceAlgorithm::kCopyPush)
      return finish_alone(run_copy_push(comm, where, input, recv, count, type, op), clock);
    const SimpleCollective collective =
        agreed == AllreduceAlgorithm::kRing ? SimpleCollective::kRingAllreduce : SimpleCollective::kTreeAllreduce;
    return finish_alone(run_simple(comm, where, collective, 0, input, recv, count, type, op), clock);
  }
  if (transport == EngineTransport::kShm)
    return finish_together(comm, run_shm_allreduce(comm, where, input, recv, count, type, op), clock);
  return finish_together(comm, run_allreduce(comm, all, where, input, recv, count, type, op), clock);
}

Status bcast(Communicator& comm, void* buffer, std::size_t bytes, int root, bool eligible, bool* ran) {
  *ran = false;
  PhaseClock clock(EngineCollective::kBcast);
  const EngineTransport transport = transport_of(comm);
  Placement where;
  SimpleGate gate;
  Handshake mine{CollectiveKind::kBcast, 0, 0, 0, {}, {}, rooted_signature(bytes, root)};
  // One rank holds the root's bytes already (4.5 us on the worker before).
  if (comm.size() == 1 && eligible && bytes > 0 && root == 0 && placement_of(buffer).backend) {
    *ran = true;
    clock.count_call();
    return Status::kOk;
  }
  if (eligible && bytes > 0 && transport != EngineTransport::kNone && root >= 0 && root < comm.size()) {
    where = placement_of(buffer);
    // FERRY_TUNE's algorithm where it can run, else the engine's choice:
    // above 16 KiB the copy engine's pull measured faster than LL on every
    // worker block (2x H200: 10.1 against 11.1 us at 32 KiB; LL on blocks
    // by size, worker.h, is not yet measured over NVLink), but not with
    // every rank on one GPU (kLlBcastOneGpuMaxBytes).
    // Asked only where LL is wanted: the check starts the engine worker.
    auto ll_possible = [&] { return ll_ready(comm, transport, where, bytes); };
    const bool chain_possible = transport == EngineTransport::kP2p && comm.size() >= kChainMinRanks &&
                                where.backend && comm.simple_possible(where.backend, where.device);
    BcastAlgorithm planned = tuned_bcast(bytes);
    if ((planned == BcastAlgorithm::kLl && !ll_possible()) || (planned == BcastAlgorithm::kChain && !chain_possible))
      planned = BcastAlgorithm::kCount;
    if (planned == BcastAlgorithm::kCount) {
      const bool one_gpu = comm.on_one_gpu();
      const std::size_t ll_max_bytes = one_gpu ? kLlBcastOneGpuMaxBytes : kLlBcastMaxBytes;
      planned = bytes <= ll_max_bytes && ll_possible()            ? BcastAlgorithm::kLl
                : bytes >= kChainMinBytes && chain_possible       ? BcastAlgorithm::kChain
                                                                  : BcastAlgorithm::kPull;
    }
    if (planned == BcastAlgorithm::kChain && !gate.try_enter(where.backend, where.device))
      planned = BcastAlgorithm::kPull;
    mine.algorithm = planned == BcastAlgorithm::kLl      ? kLlPath
                     : planned == BcastAlgorithm::kChain ? kChainPath
                                                         : kCopyPaths;
    // The root's buffer is pulled; where GPU leaders copy for the others,
    // every rank's is written by one.
    mine.eligible = where.backend != nullptr &&
                    (transport != EngineTransport::kP2p || (comm.rank() != root && !comm.by_gpu_leaders()) ||
                     ok(comm.peer_memory().export_buffer(buffer, where.info, &mine.first)));
  }
  std::vector<Handshake> all;
  bool everyone = false;
  FERRY_CHECK(agree(comm, mine, &all, &everyone, clock));
  if (!everyone) return Status::kOk;
  *ran = true;
  if (transport == EngineTransport::kShm)
    return finish_together(comm, run_shm_bcast(comm, where, buffer, bytes, root), clock);
  if (all_chose(all, kLlPath)) {
    count_bcast_run(BcastAlgorithm::kLl);
    return finish_alone(run_ll_bcast(comm, where, buffer, bytes, root), clock);
  }
  // Without the channels (ranks sharing a GPU), the pulls below.
  if (all_chose(all, kChainPath) && simple_ready(comm, where)) {
    count_bcast_run(BcastAlgorithm::kChain);
    return finish_alone(run_simple(comm, where, SimpleCollective::kChainBcast, root, buffer, buffer, bytes,
                                   DataType::kUint8, ReduceOp::kSum),
                        clock);
  }

  // Every non-root rank pulls the root's buffer with its copy engine (or
  // its GPU's leader pulls for it).
  count_bcast_run(BcastAlgorithm::kPull);
  if (comm.by_gpu_leaders())
    return finish_together(comm, run_bcast_by_gpu_leaders(comm, all, where, buffer, bytes, root), clock);
  Status local = Status::kOk;
  if (comm.rank() != root) {
    local = [&] {
      void* source = nullptr;
      gpu::Stream stream = nullptr;
      FERRY_CHECK(comm.peer_memory().import_buffer(all[root].first, &source));
      FERRY_CHECK(where.backend->set_device(where.device));
      // Above ~4 KiB one worker block pulls more slowly than a copy engine
      // (measured on 2x H200: 10.0 vs 9.5 us at 8 KiB, 8.5 vs 9.4 at 2 KiB).
      constexpr std::size_t kBcastWorkerBytes = 4 << 10;
      Worker* worker = bytes <= kBcastWorkerBytes ? worker_for_call(comm, where, bytes) : nullptr;
      if (worker) {
        WorkItem pull{};
        pull.kind = WorkKind::kCopies;
        pull.copies.sources[0] = source;
        pull.copies.destinations[0] = buffer;
        pull.copies.bytes[0] = bytes;
        pull.copies.count = 1;
        return run_on_worker(*worker, bytes, pull);
      }
      FERRY_CHECK(comm.stream_for(where.backend, where.device, &stream));
      return where.backend->copy_and_wait(buffer, source, bytes, stream);
    }();
  }
  return finish_together(comm, local, clock);
}

Status alltoallv(Communicator& comm, const void* send, const std::size_t* send_bytes,
                 const std::size_t* send_offsets, void* recv, const std::size_t* recv_bytes,
                 const std::size_t* recv_offsets, bool eligible, bool* ran) {
  *ran = false;
  PhaseClock clock(EngineCollective::kAlltoallv);
  const int n = comm.size();
  const EngineTransport transport = transport_of(comm);
  std::size_t send_span = 0;
  Placement where;
  Handshake mine{CollectiveKind::kAlltoallv, 0, 0, 0, {}, {},
                 exchange_signature(comm.rank(), n, send_bytes, recv_bytes)};
  if (eligible && transport != EngineTransport::kNone) {
    for (int p = 0; p < n; ++p)
      if (send_bytes[p] > 0) send_span = std::max(send_span, send_offsets[p] + send_bytes[p]);
    where = placement_of(recv);
    const Placement from = placement_of(send);
    std::size_t largest = 0;
    for (int p = 0; p < n; ++p) largest = std::max({largest, send_bytes[p], recv_bytes[p]});
    mine.algorithm = from.backend == where.backend && from.device == where.device &&
                             ll_ready(comm, transport, where, largest)
                         ? kLlPath
                         : kCopyPaths;
    // Where GPU leaders copy for their GPU's ranks, they write the receive
    // buffers too.
    mine.eligible = where.backend && from.backend == where.backend &&
                    (transport == EngineTransport::kP2p
                         ? ok(comm.peer_memory().export_buffer(send, from.info, &mine.first)) &&
                               (!comm.by_gpu_leaders() ||
                                ok(comm.peer_memory().export_buffer(recv, where.info, &mine.second)))
                         : send_span <= comm.shm()->bytes());
  }
  std::vector<Handshake> all;
  bool everyone = false;
  FERRY_CHECK(agree(comm, mine, &all, &everyone, clock));
  if (!everyone) return Status::kOk;
  *ran = true;
  if (transport == EngineTransport::kP2p && all_chose(all, kLlPath))
    return finish_alone(
        run_ll_alltoallv(comm, where, send, send_bytes, send_offsets, recv, recv_bytes, recv_offsets), clock);

  // Each sender's offset of its block for each receiver.
  std::vector<std::uint64_t> my_offsets(send_offsets, send_offsets + n);
  std::vector<std::uint64_t> offsets(static_cast<std::size_t>(n) * n);
  const bool by_leaders = transport == EngineTransport::kP2p && comm.by_gpu_leaders();
  if (by_leaders) {
    // The leaders also need each receiver's blocks: where and how long.
    my_offsets.insert(my_offsets.end(), recv_offsets, recv_offsets + n);
    my_offsets.insert(my_offsets.end(), recv_bytes, recv_bytes + n);
    offsets.resize(static_cast<std::size_t>(n) * 3 * n);
  }
  FERRY_CHECK(comm.bootstrap().allgather(my_offsets.data(), offsets.data(), my_offsets.size() * sizeof(std::uint64_t)));
  clock.mark(EnginePhase::kHandshake);
  if (transport == EngineTransport::kShm)
    return finish_together(
        comm, run_shm_alltoallv(comm, where, send, send_span, offsets, recv, recv_bytes, recv_offsets), clock);
  if (by_leaders)
    return finish_together(comm, run_alltoallv_by_gpu_leaders(comm, all, where, send, recv, offsets), clock);

  // Each rank pulls its blocks from every peer with the copy engines, a few
  // streams in parallel; its own block is a local copy on a stream of its own.
  Status local = [&] {
    constexpr int kPeerStreams = 4;
    const int streams_used = 1 + std::min(kPeerStreams, n - 1);
    std::vector<gpu::Stream> streams(streams_used);
    FERRY_CHECK(where.backend->set_device(where.device));
    for (int i = 0; i < streams_used; ++i) FERRY_CHECK(comm.stream_for(where.backend, where.device, &streams[i], i));
    std::vector<ExportedBuffer> wanted;
    for (int peer = 0; peer < n; ++peer)
      if (peer != comm.rank() && recv_bytes[peer] > 0) wanted.push_back(all[peer].first);
    std::vector<void*> mapped(wanted.size());
    FERRY_CHECK(comm.peer_memory().import_buffers(wanted.data(), wanted.size(), mapped.data()));
    std::vector<const void*> sources(n, send);
    for (int peer = 0, i = 0; peer < n; ++peer)
      if (peer != comm.rank() && recv_bytes[peer] > 0) sources[peer] = mapped[i++];

    std::size_t received = 0;
    for (int peer = 0; peer < n; ++peer) received += recv_bytes[peer];
    Worker* worker = n <= kMaxWorkerCopies ? worker_for_call(comm, where, received) : nullptr;
    WorkItem pulls{};
    pulls.kind = WorkKind::kCopies;
    for (int step = 0; step < n; ++step) {
      // Start with the next rank so that peers do not all read one rank at once.
      const int peer = (comm.rank() + step) % n;
      if (recv_bytes[peer] == 0) continue;
      const char* block =
          static_cast<const char*>(sources[peer]) + offsets[static_cast<std::size_t>(peer) * n + comm.rank()];
      if (worker) {
        CopyListArgs& list = pulls.copies;
        list.sources[list.count] = block;
        list.destinations[list.count] = static_cast<char*>(recv) + recv_offsets[peer];
        list.bytes[list.count++] = recv_bytes[peer];
        continue;
      }
      const gpu::Stream stream = step == 0 ? streams[0] : streams[1 + (step - 1) % (streams_used - 1)];
      FERRY_CHECK(where.backend->copy_async(static_cast<char*>(recv) + recv_offsets[peer], block, recv_bytes[peer],
                                            stream));
    }
    if (worker) return pulls.copies.count > 0 ? run_on_worker(*worker, received, pulls) : Status::kOk;
    for (gpu::Stream stream : streams) FERRY_CHECK(where.backend->stream_synchronize(stream));
    return Status::kOk;
  }();
  return finish_together(comm, local, clock);
}

std::chrono::steady_clock::time_point handshake_deadline() {
  if (params().handshake_timeout <= 0) return std::chrono::steady_clock::time_point::max();
  return std::chrono::steady_clock::now() + std::chrono::seconds(params().handshake_timeout);
}

Status wait_streams_until(gpu::Backend* backend, std::initializer_list<gpu::Stream> streams,
                          std::chrono::steady_clock::time_point deadline) {
  for (int polls = 0;; ++polls) {
    bool all_done = true;
    for (gpu::Stream stream : streams) {
      bool done = false;
      FERRY_CHECK(backend->stream_done(stream, &done));
      all_done = all_done && done;
    }
    if (all_done) return Status::kOk;
    if (std::chrono::steady_clock::now() > deadline) return Status::kTimeout;
    if (polls > 4096) std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

Status prepare_nonblocking_allreduce(Communicator& comm, gpu::Backend* backend, int device, bool* ready) {
  *ready = false;
  const std::int32_t here =
      backend && transport_of(comm) == EngineTransport::kP2p && comm.copy_push_possible(backend, device);
  std::vector<std::int32_t> everyone(comm.size());
  FERRY_CHECK(comm.bootstrap().allgather(&here, everyone.data(), sizeof(here)));
  for (const std::int32_t h : everyone)
    if (!h) return Status::kOk;
  Communicator::CopyPushSlots* slots = nullptr;
  *ready = ok(comm.copy_push_slots(backend, device, &slots));
  return Status::kOk;
}

bool nonblocking_allreduce_possible(Communicator& comm, const void* send, const void* recv, std::size_t count,
                                    DataType type, ReduceOp op) {
  if (count == 0 || !reduction_defined(type, op)) return false;
  const Placement where = placement_of(recv);
  const Placement in = placement_of(send ? send : recv);
  return where.backend && in.backend == where.backend && in.device == where.device &&
         comm.copy_push_possible(where.backend, where.device) && comm.copy_push_made(where.backend, where.device);
}

Status queue_nonblocking_allreduce(Communicator& comm, const void* send, void* recv, std::size_t count,
                                   DataType type, ReduceOp op, gpu::Event done) {
  const Placement where = placement_of(recv);
  std::lock_guard<std::mutex> lock(comm.copy_push_mutex());
  FERRY_CHECK(queue_copy_push(comm, where, send ? send : recv, recv, count, type, op));
  gpu::Stream reduce = nullptr;
  FERRY_CHECK(comm.stream_for(where.backend, where.device, &reduce, kReduceStream, true));
  // The reduce stream waits for the push stream's last chunk: its end is the call's.
  FERRY_CHECK(where.backend->event_record(done, reduce));
  count_allreduce_run(AllreduceAlgorithm::kCopyPush);
  return Status::kOk;
}

void abandon_nonblocking_allreduces(Communicator& comm, const void* recv, Status why) {
  const Placement where = placement_of(recv);
  if (!where.backend) return;
  std::lock_guard<std::mutex> lock(comm.copy_push_mutex());
  abandon_copy_push(comm, where.backend, where.device, why);
}

const char* engine_collective_name(EngineCollective which) {
  switch (which) {
    case EngineCollective::kAllreduce: return "allreduce";
    case EngineCollective::kBcast: return "bcast";
    case EngineCollective::kAlltoallv: return "alltoallv";
    case EngineCollective::kCount: break;
  }
  return "?";
}

EngineCallStats engine_call_stats(EngineCollective which) {
  const PhaseTotals& totals = g_phase_totals[static_cast<int>(which)];
  EngineCallStats stats{};
  stats.calls = totals.calls.load();
  stats.on_worker = totals.on_worker.load();
  for (int p = 0; p < static_cast<int>(EnginePhase::kCount); ++p)
    stats.mean_us[p] = stats.calls ? totals.nanoseconds[p].load() / 1e3 / stats.calls : 0;
  return stats;
}

}  // namespace ferry

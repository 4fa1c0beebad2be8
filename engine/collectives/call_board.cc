#include "engine/collectives/call_board.h"

#include <algorithm>
#include <atomic>
#include <utility>

#include "engine/collectives/collectives.h"
#include "engine/collectives/schedule.h"
#include "engine/common/log.h"
#include "engine/common/trace.h"
#include "engine/transport/shm.h"

namespace ferry {

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
  NonblockingKind kind;
  // Ibcast: the root's (with GPU leaders: every rank's); Ialltoallv: the
  // send buffer; Iallreduce with GPU leaders: the input.
  ExportedBuffer buffer;
  // With GPU leaders, what a leader writes for this rank: Ialltoallv's
  // receive buffer; Iallreduce's output.
  ExportedBuffer received;
  // The per-rank layouts of Ialltoallv follow the BoardPart (CallBoard::layouts).
  // Set by a GPU leader whose device work for the call failed.
  std::atomic<std::uint32_t> led_failed;
  std::uint32_t reserved;
  // What the rank called with: ranks on the engine that disagree all end
  // the call with the same error (engine/collectives/agreement.h).
  CallSignature signature;
};
static_assert(sizeof(BoardEntry) == 280, "BoardEntry is shared between processes; keep its layout fixed");
struct BoardPart {
  BoardEntry entries[kBoardEntries];
  alignas(64) std::atomic<std::uint64_t> read_through;
  alignas(64) std::atomic<std::uint64_t> pulled_through;
  alignas(64) std::atomic<std::uint64_t> led_through;
  // Then, per entry, 3 x nranks words: EntryFields' offsets, recv_offsets
  // and recv_bytes.
};
static_assert(sizeof(BoardPart) % alignof(std::uint64_t) == 0, "the layouts follow the part");

namespace {

// Raises a mark of this rank's on the board to call: calls finish in call
// order on one stream, but an earlier call's event may be seen done after a
// later one's, so the mark only grows.
void raise_mark(std::atomic<std::uint64_t>& mark, std::uint64_t call) {
  if (mark.load(std::memory_order_relaxed) < call) mark.store(call, std::memory_order_release);
}

}  // namespace

const char* nonblocking_name(NonblockingKind kind) {
  switch (kind) {
    case NonblockingKind::kAllreduce: return "MPI_Iallreduce";
    case NonblockingKind::kBcast: return "MPI_Ibcast";
    case NonblockingKind::kAlltoallv: return "MPI_Ialltoallv";
  }
  return "?";
}

Status CallBoard::create(Communicator& comm, gpu::Backend* backend, std::unique_ptr<CallBoard>* out) {
  std::unique_ptr<CallBoard> board(new CallBoard(comm, backend));
  FERRY_CHECK(backend->current_device(&board->device_));
  board->by_leaders_ = comm.by_gpu_leaders();
  FERRY_CHECK(prepare_nonblocking_allreduce(comm, backend, board->device_, &board->allreduce_ready_));
  const std::size_t layout_bytes = kBoardEntries * 3 * static_cast<std::size_t>(comm.size()) * sizeof(std::uint64_t);
  FERRY_CHECK(SharedSegments::create(comm.bootstrap(), nullptr, sizeof(BoardPart) + layout_bytes, &board->board_));
  FERRY_CHECK(backend->stream_create(&board->pull_stream_));
  *out = std::move(board);
  return Status::kOk;
}

CallBoard::~CallBoard() = default;

BoardPart& CallBoard::part(int rank) const { return *reinterpret_cast<BoardPart*>(board_->segment(rank)); }

std::uint64_t* CallBoard::layouts(int rank, std::uint64_t call) const {
  const std::size_t n = static_cast<std::size_t>(comm_.size());
  return reinterpret_cast<std::uint64_t*>(board_->segment(rank) + sizeof(BoardPart)) + call % kBoardEntries * 3 * n;
}

bool CallBoard::leads() const { return by_leaders_ && comm_.gpu_leader(comm_.rank()) == comm_.rank(); }

Status CallBoard::publish(std::uint64_t call, const EntryFields& fields,
                          std::chrono::steady_clock::time_point deadline, const std::function<void()>& pause) {
  const int n = comm_.size();
  // The ring's slot is free once every rank has read the call it held.
  for (int r = 0; r < n; ++r) {
    while (call > kBoardEntries && part(r).read_through.load(std::memory_order_acquire) < call - kBoardEntries) {
      if (std::chrono::steady_clock::now() > deadline) {
        FERRY_WARN(Coll, "rank %d is %llu nonblocking collectives behind", r,
                   static_cast<unsigned long long>(kBoardEntries));
        return Status::kTimeout;
      }
      pause();
    }
  }
  BoardEntry& entry = part(comm_.rank()).entries[call % kBoardEntries];
  entry.eligible = fields.eligible ? 1 : 0;
  entry.kind = fields.kind;
  entry.buffer = fields.buffer;
  entry.received = fields.received;
  std::uint64_t* layout = layouts(comm_.rank(), call);
  int at = 0;
  for (const std::vector<std::uint64_t>* words : {&fields.offsets, &fields.recv_offsets, &fields.recv_bytes})
    for (int r = 0; r < n; ++r, ++at) layout[at] = r < static_cast<int>(words->size()) ? (*words)[r] : 0;
  entry.signature = fields.signature;
  entry.led_failed.store(0, std::memory_order_relaxed);
  entry.call.store(call, std::memory_order_release);
  return Status::kOk;
}

bool CallBoard::read_entries(std::uint64_t call, NonblockingKind kind, bool* everyone, bool* same_kind,
                             std::vector<CallSignature>* signatures) const {
  const int n = comm_.size();
  *everyone = *same_kind = true;
  signatures->assign(n, CallSignature{});
  for (int r = 0; r < n; ++r) {
    const BoardEntry& entry = part(r).entries[call % kBoardEntries];
    if (entry.call.load(std::memory_order_acquire) != call) return false;
    *everyone = *everyone && entry.eligible != 0;
    *same_kind = *same_kind && entry.kind == kind;
    (*signatures)[r] = entry.signature;
  }
  return true;
}

void CallBoard::mark_read(std::uint64_t call) {
  part(comm_.rank()).read_through.store(call, std::memory_order_release);
}

bool CallBoard::export_buffer(const void* buffer, ExportedBuffer* out) {
  const gpu::PointerInfo info = gpu::classify(buffer);
  return info.kind == gpu::MemoryKind::kDevice && gpu::owner_backend(info) == backend_ && info.device == device_ &&
         ok(peers_.export_buffer(buffer, info, out));
}

Status CallBoard::pin(NonblockingCall& op, const ExportedBuffer& buffer, void** mapped) {
  FERRY_CHECK(peers_.pin_buffer(buffer, mapped));
  op.pinned.push_back(buffer);
  return Status::kOk;
}

void CallBoard::unpin_all(NonblockingCall& op) {
  for (const ExportedBuffer& buffer : op.pinned) peers_.unpin_buffer(buffer);
  op.pinned.clear();
}

Status CallBoard::queue(NonblockingCall& op) {
  FERRY_CHECK(backend_->set_device(device_));
  FERRY_CHECK(backend_->event_create(&op.done_event));
  if (trace_enabled()) {
    op.gpu_span = std::make_shared<GpuSpan>();
    op.queued_us = trace_now_us();
  }
  const Status queued = by_leaders_                             ? queue_led_work(op)
                        : op.kind != NonblockingKind::kAllreduce ? queue_pulls(op)
                                                                 : queue_nonblocking_allreduce(
                                                                       comm_, op.send, op.recv, op.count, op.type,
                                                                       op.reduce, op.done_event);
  if (op.gpu_span) op.gpu_span->close();
  return queued;
}

void CallBoard::trace_device_work(NonblockingCall& op) {
  if (!op.gpu_span) return;
  const std::string name = std::string("gpu ") + nonblocking_name(op.kind);
  op.gpu_span->emit_until(op.done_event, name.c_str(), op.queued_us, trace_now_us(),
                          std::string("\"call\":") + std::to_string(op.call));
  op.gpu_span.reset();
}

// Ibcast's non-roots pull the root's buffer; Ialltoallv's ranks pull their
// block from every sender (their own from their send buffer); one stream
// per communicator keeps the pulls in call order.
Status CallBoard::queue_pulls(NonblockingCall& op) {
  const int n = comm_.size();
  const int me = comm_.rank();
  FERRY_CHECK(backend_->set_device(device_));
  GpuSpan::stream_handed_out(backend_, device_, pull_stream_);
  if (op.kind == NonblockingKind::kBcast) {
    if (me == op.root) return Status::kOk;
    void* root = nullptr;
    FERRY_CHECK(pin(op, part(op.root).entries[op.call % kBoardEntries].buffer, &root));
    FERRY_CHECK(backend_->copy_async(op.recv, root, op.bytes, pull_stream_));
  } else {
    for (int step = 0; step < n; ++step) {
      // Each rank starts with the next one, so that not all read one rank at once.
      const int peer = (me + step) % n;
      if (op.recv_bytes[peer] == 0) continue;
      const BoardEntry& entry = part(peer).entries[op.call % kBoardEntries];
      const void* source = op.send;
      if (peer != me) {
        void* mapped = nullptr;
        FERRY_CHECK(pin(op, entry.buffer, &mapped));
        source = mapped;
      }
      FERRY_CHECK(backend_->copy_async(static_cast<char*>(op.recv) + op.recv_offsets[peer],
                                       static_cast<const char*>(source) + layouts(peer, op.call)[me],
                                       op.recv_bytes[peer],
                                       pull_stream_));
    }
  }
  return backend_->event_record(op.done_event, pull_stream_);
}

// With GPU leaders, this leader's device work for the ranks of its GPU:
// Ibcast's copies of the root's buffer into theirs, Ialltoallv's blocks into
// their receive buffers (copy-list kernels), Iallreduce's slice of every
// rank's input into every rank's output (a slice a leader).
Status CallBoard::queue_led_work(NonblockingCall& op) {
  GpuSpan::stream_handed_out(backend_, device_, pull_stream_);
  Communicator& engine = comm_;
  const int n = engine.size();
  const int me = engine.rank();
  const auto entry = [&](int rank) -> const BoardEntry& { return part(rank).entries[op.call % kBoardEntries]; };
  // This rank's buffers as they are, a peer's mapped here.
  const auto buffer_of = [&](int rank, const ExportedBuffer& exported, void* own, void** out) {
    if (rank == me) {
      *out = own;
      return Status::kOk;
    }
    return pin(op, exported, out);
  };
  FERRY_TRACE(Coll, "%s, call %llu: the device work of its GPU's ranks, as their leader", nonblocking_name(op.kind),
              static_cast<unsigned long long>(op.call));
  FERRY_CHECK(backend_->set_device(device_));
  if (op.kind == NonblockingKind::kAllreduce) {
    DirectReduceArgs args{};
    const ElementRange slice =
        direct_part(engine.gpu_leaders_before_me(), engine.gpu_leader_count(), op.count, op.type);
    const std::size_t offset = slice.begin * data_type_size(op.type);
    void* own_input = const_cast<void*>(op.send ? op.send : op.recv);
    std::vector<const void*> inputs(n);
    std::vector<void*> outputs(n);
    for (int r = 0; r < n; ++r) {
      void* input = nullptr;
      void* output = nullptr;
      FERRY_CHECK(buffer_of(r, entry(r).buffer, own_input, &input));
      FERRY_CHECK(buffer_of(r, entry(r).received, op.recv, &output));
      inputs[r] = static_cast<char*>(input) + offset;
      outputs[r] = static_cast<char*>(output) + offset;
    }
    args.count = slice.size();
    args.type = op.type;
    args.op = op.reduce;
    // A table past kInlineRanks goes on the pull stream, ahead of the kernel.
    FERRY_CHECK(list_direct_pointers(backend_, engine.resources(), device_, pull_stream_, inputs, outputs, &args));
    FERRY_CHECK(launch_direct_reduce(backend_, args, pull_stream_));
  } else if (op.kind == NonblockingKind::kBcast) {
    CopyListLauncher copies(backend_, pull_stream_);
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
    CopyListLauncher blocks(backend_, pull_stream_);
    for (int receiver = 0; receiver < n; ++receiver) {
      if (engine.gpu_leader(receiver) != me) continue;
      void* received = nullptr;
      FERRY_CHECK(buffer_of(receiver, entry(receiver).received, op.recv, &received));
      for (int sender = 0; sender < n; ++sender) {
        const std::uint64_t bytes = layouts(receiver, op.call)[2 * n + sender];
        if (bytes == 0) continue;
        if (!sent[sender])
          FERRY_CHECK(buffer_of(sender, entry(sender).buffer, const_cast<void*>(op.send), &sent[sender]));
        FERRY_CHECK(blocks.add(static_cast<char*>(received) + layouts(receiver, op.call)[n + sender],
                               static_cast<const char*>(sent[sender]) + layouts(sender, op.call)[receiver], bytes));
      }
    }
    FERRY_CHECK(blocks.finish());
  }
  return backend_->event_record(op.done_event, pull_stream_);
}

void CallBoard::mark_failed(const NonblockingCall& op, Status why) {
  if (op.kind == NonblockingKind::kAllreduce && !by_leaders_) abandon_nonblocking_allreduces(comm_, op.recv, why);
  if (leads()) part(comm_.rank()).entries[op.call % kBoardEntries].led_failed.store(1, std::memory_order_release);
}

void CallBoard::raise_through(std::uint64_t call) {
  BoardPart& mine = part(comm_.rank());
  raise_mark(by_leaders_ ? mine.led_through : mine.pulled_through, call);
}

bool CallBoard::peers_pulled(std::uint64_t call) const {
  for (int r = 0; r < comm_.size(); ++r)
    if (r != comm_.rank() && part(r).pulled_through.load(std::memory_order_acquire) < call) return false;
  return true;
}

bool CallBoard::leaders_through(std::uint64_t call) const {
  for (int r = 0; r < comm_.size(); ++r)
    if (comm_.gpu_leader(r) == r && part(r).led_through.load(std::memory_order_acquire) < call) return false;
  return true;
}

bool CallBoard::leader_failed(std::uint64_t call) const {
  for (int r = 0; r < comm_.size(); ++r) {
    if (comm_.gpu_leader(r) != r) continue;
    const BoardEntry& entry = part(r).entries[call % kBoardEntries];
    if (entry.call.load(std::memory_order_acquire) != call || entry.led_failed.load(std::memory_order_acquire))
      return true;
  }
  return false;
}

}  // namespace ferry

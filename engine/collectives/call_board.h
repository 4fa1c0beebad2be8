// The board of the nonblocking collectives on the engine (MPI_Iallreduce,
// MPI_Ibcast and MPI_Ialltoallv: mpi_shim/nonblocking_engine.h), and the
// device work those calls queue. The board lies in host shared memory: per
// rank, one entry per call (a ring), where the rank says whether it can
// take the engine for the call and what its peers need (its buffers,
// exported; its blocks), and the marks that say how far it has gone. Every
// rank reads everyone's entries and decides the same; the device work then
// needs no exchange: pulls from the peers' buffers on one stream, or, where
// ranks share a GPU and its leader does the device work of all of them
// (Communicator::gpu_leader), the leaders' copies and direct reduces.
//
// A CallBoard is not thread-safe: its owner serialises every call on it.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "engine/collectives/agreement.h"
#include "engine/collectives/communicator.h"
#include "engine/common/status.h"
#include "engine/common/types.h"
#include "engine/core/executor.h"
#include "engine/core/gpu_span.h"
#include "engine/gpu/gpu.h"
#include "engine/core/peer_memory.h"

namespace ferry {

class SharedSegments;
struct BoardPart;

enum class NonblockingKind : std::uint32_t { kAllreduce = 1, kBcast = 2, kAlltoallv = 3 };
// "MPI_Iallreduce", "MPI_Ibcast", "MPI_Ialltoallv".
const char* nonblocking_name(NonblockingKind kind);

// What a rank publishes on the board for one call.
struct EntryFields {
  bool eligible = false;  // the rank can take the engine for the call
  NonblockingKind kind = NonblockingKind::kAllreduce;
  // Ibcast: the root's (with GPU leaders: every rank's); Ialltoallv: the
  // send buffer; Iallreduce with GPU leaders: the input.
  ExportedBuffer buffer{};
  // Ialltoallv, one per rank (empty: zeros): where the block for each rank
  // starts; with GPU leaders, where each sender's block lands and its bytes.
  std::vector<std::uint64_t> offsets;
  // With GPU leaders, what a leader writes for this rank: Ialltoallv's
  // receive buffer and its blocks; Iallreduce's output.
  ExportedBuffer received{};
  std::vector<std::uint64_t> recv_offsets;
  std::vector<std::uint64_t> recv_bytes;
  // What the rank called with (engine/collectives/agreement.h).
  CallSignature signature;
};

// One call as the engine runs it, once every rank has taken the engine.
struct NonblockingCall {
  NonblockingKind kind = NonblockingKind::kAllreduce;
  std::uint64_t call = 0;  // its number on the board (1, 2, ...)
  const void* send = nullptr;  // allreduce: nullptr in place
  void* recv = nullptr;        // Ibcast: the buffer
  std::size_t count = 0;       // Iallreduce: elements
  DataType type = DataType::kFloat32;
  ReduceOp reduce = ReduceOp::kSum;
  int root = 0;
  std::size_t bytes = 0;  // Ibcast
  // Ialltoallv: the bytes this rank receives from each sender, and where.
  std::vector<std::size_t> recv_bytes, recv_offsets;
  gpu::Event done_event = nullptr;     // recorded after the call's device work
  // FERRY_TRACE: the call's device work, from where it was queued
  // (queued_us) to done_event (CallBoard::trace_device_work).
  std::shared_ptr<GpuSpan> gpu_span;
  std::int64_t queued_us = 0;
  std::vector<ExportedBuffer> pinned;  // peers' buffers mapped for the call
};

class CallBoard {
 public:
  // Collective over comm's ranks, which must have every peer's memory
  // mapped (Communicator::all_peers_mapped): the board's segments, the copy-engine push's landing slots where ranks
  // do not share a GPU, and the stream of the pulls, on backend's current
  // device.
  static Status create(Communicator& comm, gpu::Backend* backend, std::unique_ptr<CallBoard>* out);
  // The pull stream is left alone: a call abandoned on it may still run.
  ~CallBoard();
  CallBoard(const CallBoard&) = delete;
  CallBoard& operator=(const CallBoard&) = delete;

  Communicator& comm() const { return comm_; }
  gpu::Backend* backend() const { return backend_; }
  int device() const { return device_; }
  // The copy-engine push's landing slots are made (not where ranks share a
  // GPU): the same on every rank. Without them Iallreduce cannot take the
  // engine, unless GPU leaders do the work.
  bool allreduce_ready() const { return allreduce_ready_; }
  // Communicator::by_gpu_leaders: the same on every rank.
  bool by_leaders() const { return by_leaders_; }
  // Whether this rank is a GPU leader.
  bool leads() const;

  // Writes this rank's entry for call (calls are numbered 1, 2, ... in the
  // order this rank makes them) once the ring's slot is free, that is once
  // every rank has read the call it held: between looks, pause() runs (the
  // owner may let others at the board). kTimeout, naming the rank behind,
  // when the slot is not free by deadline.
  Status publish(std::uint64_t call, const EntryFields& fields, std::chrono::steady_clock::time_point deadline,
                 const std::function<void()>& pause);
  // Whether every rank's entry for call is there; then whether every rank
  // can take the engine for it, whether each made kind, and what each
  // passed (signatures[rank]).
  bool read_entries(std::uint64_t call, NonblockingKind kind, bool* everyone, bool* same_kind,
                    std::vector<CallSignature>* signatures) const;
  // This rank has read everyone's entries up to call: the peers may reuse
  // their slots.
  void mark_read(std::uint64_t call);

  // A rank's buffer, exported for the peers to pull from, if it is device
  // memory on this board's device.
  bool export_buffer(const void* buffer, ExportedBuffer* out);
  // A peer's buffer of call, mapped here until unpin_all(call).
  Status pin(NonblockingCall& call, const ExportedBuffer& buffer, void** mapped);
  void unpin_all(NonblockingCall& call);

  // Queues this rank's device work of call (every rank can take the
  // engine; with GPU leaders, a leader only): creates call.done_event and
  // records it after the work.
  Status queue(NonblockingCall& call);
  // With FERRY_TRACE, once call's done_event completed: its device work as a
  // span of its GPU's track.
  void trace_device_work(NonblockingCall& call);
  // call's device work failed or ran out of time here: an Iallreduce by the
  // copy-engine push abandons the queued pushes; a leader's failure is
  // written on the board for the ranks waiting for it.
  void mark_failed(const NonblockingCall& call, Status why);
  // This rank's device work of call is done: raises its mark (pulled
  // through, or with GPU leaders led through) to call.
  void raise_through(std::uint64_t call);

  // Whether every peer has finished reading this rank's buffers for call.
  bool peers_pulled(std::uint64_t call) const;
  // With GPU leaders: whether every leader is through call (so every buffer
  // of it is read and written).
  bool leaders_through(std::uint64_t call) const;
  // With GPU leaders: whether a leader failed its device work for call (its
  // board entry says so; one that no longer holds call cannot tell, and
  // counts as failed). Asked after leaders_through, which a leader raises
  // later.
  bool leader_failed(std::uint64_t call) const;

 private:
  CallBoard(Communicator& comm, gpu::Backend* backend) : comm_(comm), backend_(backend) {}
  BoardPart& part(int rank) const;
  // rank's layouts for call: offsets, recv_offsets, recv_bytes, n each.
  std::uint64_t* layouts(int rank, std::uint64_t call) const;
  Status queue_pulls(NonblockingCall& op);
  Status queue_led_work(NonblockingCall& op);

  Communicator& comm_;
  gpu::Backend* backend_;
  int device_ = 0;
  bool allreduce_ready_ = false;
  bool by_leaders_ = false;
  std::unique_ptr<SharedSegments> board_;
  PeerMemory peers_{true};
  gpu::Stream pull_stream_ = nullptr;  // Ibcast's and Ialltoallv's copies, in call order
};

}  // namespace ferry

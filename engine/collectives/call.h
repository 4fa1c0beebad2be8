// What every engine collective shares: the handshake ranks exchange before
// a call, where its device work runs, the phase clock of FERRY_STATS, the
// closing exchange, and the peers' buffers mapped for the call. Internal to
// engine/collectives (collectives.cc and algorithms/).
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "engine/collectives/agreement.h"
#include "engine/collectives/collectives.h"
#include "engine/collectives/communicator.h"
#include "engine/collectives/tuner.h"
#include "engine/collectives/worker.h"
#include "engine/common/params.h"
#include "engine/common/status.h"
#include "engine/common/nvtx.h"
#include "engine/common/trace.h"
#include "engine/core/gpu_span.h"
#include "engine/core/traffic.h"
#include "engine/gpu/gpu.h"

namespace ferry::coll {

enum class CollectiveKind : std::uint16_t { kAllreduce = 1, kBcast = 2, kAlltoallv = 3 };

const char* collective_name(CollectiveKind kind);

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

Placement placement_of(const void* buffer);

// What the communicator's common transport gives a call.
struct PeerReach {
  bool any = false;               // a transport reaches every peer,
  bool mapped = false;            // mapping their device memory here (direct, LL, Simple, copy engines),
  SharedSegments* shm = nullptr;  // or through host shared memory

  // The transport a call over this reach carries its bytes on.
  TransportKind carrier() const { return shm ? TransportKind::kShm : TransportKind::kP2p; }
};

PeerReach reach_of(Communicator& comm);

struct PhaseTotals {
  std::atomic<std::uint64_t> calls{0};
  std::atomic<std::uint64_t> on_worker{0};
  std::atomic<std::uint64_t> nanoseconds[static_cast<int>(EnginePhase::kCount)] = {};
};
// set-up, handshake, device, finish.
const char* engine_phase_name(EnginePhase phase);

// Per collective, since load (engine_call_stats reads them).
extern PhaseTotals g_phase_totals[static_cast<int>(EngineCollective::kCount)];
// Set by run_on_worker; PhaseClock counts the call as run on the worker.
extern thread_local bool t_ran_on_worker;

// Adds each phase's time to the totals, with FERRY_STATS=1 only; with
// FERRY_TRACE, each phase and the whole call are spans of the trace, and the
// call's device work is one on its GPU's track (gpu_span.h).
class PhaseClock {
 public:
  explicit PhaseClock(EngineCollective which)
      : which_(which), totals_(params().stats ? &g_phase_totals[static_cast<int>(which)] : nullptr) {
    if (totals_) last_ = std::chrono::steady_clock::now();
    if (trace_enabled()) {
      start_us_ = last_us_ = trace_now_us();
      outer_ = t_open_clock;
      t_open_clock = this;
    }
    if (nvtx_attached()) nvtx_phase_ = nvtx_start(engine_phase_name(EnginePhase::kSetup));
    t_ran_on_worker = false;
  }
  ~PhaseClock() {
    nvtx_end(nvtx_phase_);
    if (start_us_ >= 0) t_open_clock = outer_;
  }
  PhaseClock(const PhaseClock&) = delete;
  PhaseClock& operator=(const PhaseClock&) = delete;
  // The time since the previous mark was spent in phase.
  void mark(EnginePhase phase) {
    if (nvtx_phase_) {
      nvtx_end(nvtx_phase_);
      const int next = static_cast<int>(phase) + 1;
      nvtx_phase_ = next < static_cast<int>(EnginePhase::kCount)
                        ? nvtx_start(engine_phase_name(static_cast<EnginePhase>(next)))
                        : 0;
    }
    if (start_us_ >= 0) {
      const std::int64_t now_us = trace_now_us();
      trace_span(engine_phase_name(phase), "engine", last_us_, now_us, "");
      last_us_ = now_us;
    }
    if (!totals_) return;
    const auto now = std::chrono::steady_clock::now();
    totals_->nanoseconds[static_cast<int>(phase)] +=
        std::chrono::duration_cast<std::chrono::nanoseconds>(now - last_).count();
    last_ = now;
  }
  // The call carries bytes of data over kind (counted with the call).
  void carries(TransportKind kind, std::uint64_t bytes) {
    carried_kind_ = kind;
    carried_bytes_ = bytes;
  }
  void count_call() {
    if (start_us_ >= 0) trace_call();
    if (!totals_) return;
    ++totals_->calls;
    if (t_ran_on_worker) ++totals_->on_worker;
    if (carried_bytes_ > 0) count_traffic(carried_kind_, carried_bytes_);
  }

  // With FERRY_TRACE: the innermost clock open on this thread ran algorithm
  // name (note_traced_algorithm, tuner.h).
  static void note_algorithm(const char* name);

 private:
  static thread_local PhaseClock* t_open_clock;  // tracing: the innermost open on this thread

  void trace_call();

  EngineCollective which_;
  PhaseTotals* totals_;
  std::int64_t start_us_ = -1, last_us_ = -1;  // tracing: the call's start, the last mark
  std::uint64_t nvtx_phase_ = 0;                // the phase's NVTX range, where a profiler is attached
  PhaseClock* outer_ = nullptr;                 // tracing: the call this one runs within, if any
  const char* algorithm_ = nullptr;             // tracing: note_traced_algorithm's
  TransportKind carried_kind_ = TransportKind::kP2p;
  std::uint64_t carried_bytes_ = 0;
  std::chrono::steady_clock::time_point last_;
  GpuSpan gpu_span_;
};

// Exchanges handshakes; true when every rank is eligible. Ranks called
// with different arguments all return the same mismatch (agreement.h).
Status agree(Communicator& comm, Handshake& mine, std::vector<Handshake>* all, bool* everyone, PhaseClock& clock);

// After the device work: every rank learns whether any rank failed, and no
// rank returns while a peer may still read or write its buffers.
Status finish_together(Communicator& comm, Status local, PhaseClock& clock);

// The end of an LL call: no rank reads another's buffers, so no closing
// exchange; a failure is this rank's (a peer that failed leaves it waiting
// for data until its own wait times out).
Status finish_alone(Status local, PhaseClock& clock);

// This rank's pointer to every rank's input and output, mapping the peers'.
struct MappedBuffers {
  std::vector<const void*> inputs;
  std::vector<void*> outputs;
};

Status map_all(Communicator& comm, const std::vector<Handshake>& all, const void* input, void* output,
               bool need_outputs, MappedBuffers* mapped);

inline const void* at(const void* base, std::size_t offset) { return static_cast<const char*>(base) + offset; }
inline void* at(void* base, std::size_t offset) { return static_cast<char*>(base) + offset; }

// The engine worker for a direct reduce or copy list of bytes per rank, or
// nullptr: such items run on the worker only while one of its blocks is
// enough (shared among blocks they measured slower than a launch on
// 2x H200, with the worker's earlier hand-off between blocks); larger ones
// launch their kernels and copies.
Worker* worker_for_call(Communicator& comm, const Placement& where, std::size_t bytes);

// A direct reduce's pointers into args, on the call's device
// (executor.h's list_direct_pointers, with the communicator's resources).
Status list_direct_pointers(Communicator& comm, const Placement& where, gpu::Stream stream,
                            const std::vector<const void*>& inputs, const std::vector<void*>& outputs,
                            DirectReduceArgs* args);

// Runs item (its kind and arguments filled in) on one worker block; bytes is
// the call's size per rank.
Status run_on_worker(Worker& worker, std::size_t bytes, WorkItem item);

// True when every rank said algorithm; false when none did. Mixed answers
// (possible only when some rank has no worker) take the copy paths, which
// every rank prepared for.
bool all_chose(const std::vector<Handshake>& all, std::uint16_t algorithm);

}  // namespace ferry::coll

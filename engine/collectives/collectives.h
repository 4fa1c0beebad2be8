// Engine collectives on device buffers. Every rank of the communicator
// calls the same collective. A rank passes eligible = false when it will not
// use the engine for this call (host buffers, an unsupported type); then no
// rank does, *ran comes back false everywhere, and the caller takes another
// route, consistently with the others. A failure on any rank after the
// ranks agreed is reported on every rank.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <initializer_list>

#include "engine/collectives/communicator.h"
#include "engine/common/liveness.h"
#include "engine/common/types.h"
#include "engine/gpu/gpu.h"

namespace ferry {

// send == nullptr means in place (the input is in recv).
Status allreduce(Communicator& comm, const void* send, void* recv, std::size_t count, DataType type, ReduceOp op,
                 bool eligible, bool* ran);

Status bcast(Communicator& comm, void* buffer, std::size_t bytes, int root, bool eligible, bool* ran);

// Byte counts and offsets, one per peer: the send_bytes[p] bytes for peer p
// start at send + send_offsets[p]; this rank receives recv_bytes[p] from p
// at recv + recv_offsets[p].
Status alltoallv(Communicator& comm, const void* send, const std::size_t* send_bytes,
                 const std::size_t* send_offsets, void* recv, const std::size_t* recv_bytes,
                 const std::size_t* recv_offsets, bool eligible, bool* ran);

// inout[i] = in[i] op inout[i] for i < count, on the GPU both buffers are
// on (the device current on this thread), queued after the work on the
// legacy default stream; the result is there when it returns. kUnsupported
// when the buffers are not on one device of one backend, or the engine does
// not reduce type with op.
Status reduce_local(const void* in, void* inout, std::size_t count, DataType type, ReduceOp op);

// handshake_deadline(): engine/common/liveness.h.
// Waits until every stream in streams is idle (kOk), the deadline passes
// (kTimeout) or a peer has ended (kPeerEnded, peer_watch.h), polling, then
// sleeping between polls after a few thousand.
Status wait_streams_until(gpu::Backend* backend, std::initializer_list<gpu::Stream> streams,
                          std::chrono::steady_clock::time_point deadline);

// Nonblocking allreduce by the copy-engine push (cepush): the work is
// queued on the communicator's streams and ends at an event; its chunks
// wait on the GPU for the peers' parts, so every rank must queue the same
// calls, blocking cepush ones included, in the same order.
//
// Collective (every rank, at the same call): makes the landing slots on
// device of backend. *ready is the same on every rank.
Status prepare_nonblocking_allreduce(Communicator& comm, gpu::Backend* backend, int device, bool* ready);
// Whether this rank can queue such a call (buffers on the slots' device, a
// reduction the engine has). Local: the ranks must agree by other means.
bool nonblocking_allreduce_possible(Communicator& comm, const void* send, const void* recv, std::size_t count,
                                    DataType type, ReduceOp op);
// Queues the call (send == nullptr: in place) and records done after it.
Status queue_nonblocking_allreduce(Communicator& comm, const void* send, void* recv, std::size_t count,
                                   DataType type, ReduceOp op, gpu::Event done);
// After a queued call failed or outlived FERRY_HANDSHAKE_TIMEOUT: frees
// the streams (every call queued so far ends, some with wrong data) and
// retires the slots.
void abandon_nonblocking_allreduces(Communicator& comm, const void* recv, Status why);

// Where the engine's collectives spent their time (counted with
// FERRY_STATS=1 only): set-up (buffer checks, exports), the handshake among
// the ranks, the device work, and the closing exchange.
enum class EngineCollective : int { kAllreduce, kBcast, kAlltoallv, kCount };
enum class EnginePhase : int { kSetup, kHandshake, kRun, kFinish, kCount };
struct EngineCallStats {
  std::uint64_t calls;      // calls the engine ran
  std::uint64_t on_worker;  // of which on the engine worker
  double mean_us[static_cast<int>(EnginePhase::kCount)];
};
const char* engine_collective_name(EngineCollective which);
EngineCallStats engine_call_stats(EngineCollective which);

}  // namespace ferry

// Engine collectives on device buffers. Every rank of the communicator
// calls the same collective. A rank passes eligible = false when it will not
// use the engine for this call (host buffers, an unsupported type); then no
// rank does, *ran comes back false everywhere, and the caller takes another
// route, consistently with the others. A failure on any rank after the
// ranks agreed is reported on every rank.
#pragma once

#include <cstddef>
#include <cstdint>

#include "engine/collectives/communicator.h"
#include "engine/common/types.h"

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

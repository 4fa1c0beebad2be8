// What the parts of point-to-point through peer memory (peer_pt2pt.h)
// share about one message: its size and whether it lies in memory as its
// packed bytes, a send that may go through peer memory, the marker that
// stands for it in the real MPI, and the counts FERRY_STATS prints.
#pragma once

#include <mpi.h>

#include <atomic>
#include <cstdint>

#include "engine/gpu/gpu.h"
#include "mpi_shim/peer_comms.h"
#include "mpi_shim/peer_envelopes.h"
#include "mpi_shim/peer_pt2pt.h"

namespace ferry::shim::peer {

// The bytes of count × type; -1 for a negative count or a type with no
// size.
std::int64_t message_bytes(int count, MPI_Datatype type);

// Whether count × type lies in memory exactly as its packed bytes do: a
// predefined type, or contiguous ones of it, without gaps or reordering.
bool packed_layout(MPI_Datatype type);

// A send that may go through peer memory: its data in one range of device
// memory, and the rank it goes to.
struct Eligible {
  std::int64_t bytes;
  const void* data;
  gpu::PointerInfo info;
  gpu::Backend* backend;
  PeerRank to;
};

// The envelope of e's data, sent with tag: a bounce buffer's unless an
// offer fills in its claim; its buffer still to name.
Envelope data_envelope(const Eligible& e, int tag);

// The marker: an empty message the real MPI matches like the user's own,
// sent as mode says; nonblocking when request is given.
int send_marker(Mode mode, int dest, int tag, MPI_Comm comm, MPI_Request* request);

// The counts behind send_counts() (peer_pt2pt.h).
struct Counters {
  std::atomic<std::uint64_t> straight_blocking{0}, straight_nonblocking{0}, bounced{0}, host_bounced{0}, pushed{0},
      net{0};
};
Counters& counters();

}  // namespace ferry::shim::peer

// The receive side of a message through peer memory (peer_pt2pt.h): once
// the real MPI matched its marker and its envelope is at hand, its data is
// copied into the user's buffer, out of the sender's own buffer (claiming
// its offer), a device bounce buffer or a host one, and the sender is told.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <functional>

#include "engine/common/status.h"
#include "mpi_shim/peer_envelopes.h"
#include "mpi_shim/staging.h"

namespace ferry::shim::peer {

// A message whose envelope env (from world rank world) names data: claims
// it if it is an offer, then copies it out of the sender's buffer (or bounce
// buffer, device or host) into count × type at buf (any memory); tells the
// sender it is done (the claim word, or an acknowledgement that frees the
// bounce buffer) and sets *status's count. An MPI error class
// (MPI_ERR_TRUNCATE when the message was longer), also in
// status->MPI_ERROR when not success.
// (A kNet envelope's message comes through the net channel: peer_net.h.)
int receive_message(MPI_Comm comm, const Envelope& env, int world, void* buf, int count, MPI_Datatype type,
                    MPI_Status* status);

// The first `delivered` bytes of a message, in packed order, into
// count × type at buf (capacity bytes, laid out as extent says) whose type
// has holes or reordering: the packed form is made on the host from buf's
// contents (a staged image of buf when it is device memory), then
// fetch(dst, length) writes the message's first length bytes over it and it
// is unpacked into buf. *copied: fetch's status. An MPI error class.
int unpack_message(MPI_Comm comm, void* buf, int count, MPI_Datatype type, const Extent& extent,
                   std::int64_t capacity, std::int64_t delivered,
                   const std::function<Status(void*, std::size_t)>& fetch, Status* copied);

}  // namespace ferry::shim::peer

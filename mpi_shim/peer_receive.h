// The receive side of a message through peer memory (peer_pt2pt.h): once
// the real MPI matched its marker and its envelope is at hand, its data is
// copied into the user's buffer, out of the sender's own buffer (claiming
// its offer), a device bounce buffer or a host one, and the sender is told.
#pragma once

#include <mpi.h>

#include "mpi_shim/peer_envelopes.h"

namespace ferry::shim::peer {

// A message whose envelope env (from world rank world) names data: claims
// it if it is an offer, then copies it out of the sender's buffer (or bounce
// buffer, device or host) into count × type at buf (any memory); tells the
// sender it is done (the claim word, or an acknowledgement that frees the
// bounce buffer) and sets *status's count. An MPI error class
// (MPI_ERR_TRUNCATE when the message was longer), also in
// status->MPI_ERROR when not success.
int receive_message(MPI_Comm comm, const Envelope& env, int world, void* buf, int count, MPI_Datatype type,
                    MPI_Status* status);

}  // namespace ferry::shim::peer

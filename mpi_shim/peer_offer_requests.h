// Offers of nonblocking and persistent sends (peer_offers.h), by the
// request the user holds, which is tracked in the request registry
// (request_registry.h): the calls that complete, start or free it settle,
// start or withdraw its offer, and its completion finishes the offer.
#pragma once

#include <mpi.h>

#include "mpi_shim/peer_offers.h"

namespace ferry::shim::peer {

// A persistent send (MPI_Send_init, MPI_Rsend_init): what each MPI_Start
// offers. Its handle stays the application's until MPI_Request_free.
struct PersistentSend {
  FunctionId id;
  Mode mode;
  Eligible e;
  int dest;
  int tag;
  MPI_Comm comm;
  Held held;
};

// A nonblocking send's offer, made with request (the receive of the word
// that ends it): the completion of request finishes it.
void track_offer(MPI_Request request, const Offer& offer);

// The request of a persistent send: each MPI_Start of it offers anew, the
// completion of each start finishes the offer, MPI_Request_free gives back
// what it holds.
void track_persistent_offers(MPI_Request request, const PersistentSend& send);

}  // namespace ferry::shim::peer

// Offers: a send that lets its receive copy straight out of the send
// buffer (peer_pt2pt.h, send()). The envelope names the buffer and a claim
// word (peer_claims.h); the receive that claims the word in time copies
// (or asks the sender to copy, FERRY_GPU_LEADER), else the sender
// withdraws the offer and its data goes on through a bounce buffer
// (peer_bounce.h), so a send never waits for its receive. An offer from
// the call that made it until it ends; the nonblocking and persistent ones
// by their request are in peer_offer_requests.h.
#pragma once

#include <mpi.h>

#include <atomic>
#include <chrono>
#include <cstdint>

#include "mpi_shim/peer_bounce.h"
#include "mpi_shim/peer_message.h"

namespace ferry::shim::peer {

// An offer in flight: what offer_finish needs.
struct Offer {
  Eligible e;
  Bounce* bounce;
  int slot;
  std::uint64_t ticket;
  Envelope env;
  MPI_Comm comm;
  HostBounce* host = nullptr;  // taken when withdrawn with no bounce buffer free
};

// What a persistent send holds from its init to its free: a claim word and
// the reply tag its request (a persistent receive of the word that ends
// each offer) listens to.
struct Held {
  int slot;
  std::int32_t reply_tag;
};

// An offer from the call that made it until it ends: a blocking send's
// call waits for it; a nonblocking or persistent send's (has_request) ends
// with a word to its request, and a completion call finishes it.
struct PendingOffer {
  Offer offer;
  bool has_request = true;
  bool persistent = false;  // its claim word is its request's
  bool looked_at = false;   // by its call or a completion call: its time runs from then
  std::chrono::steady_clock::time_point offer_ends, gives_up;
  bool ended = false;  // copied, withdrawn or given up on (a request's word is on its way)
  bool withdrawn = false;
  bool slot_lost = false;  // claimed and never finished: its claim word stays out of use
  bool released = false;   // by finish_offer
  int error = MPI_SUCCESS;
};

// Once every rank agreed at MPI_Init: one clock per world rank of when an
// offer to it was last seen claimed.
void start_offers(int world_size);

// Starts a send that offers its own buffer: sends the envelope and the
// marker. A nonblocking one (request) first posts *request, the receive of
// the word that ends the offer, and lets its marker go. A persistent one
// (held) uses what it holds, and its request is posted by MPI_Start. An
// offer holds no bounce buffer: withdrawn, it takes a device one if one is
// free within FERRY_PT2PT_BOUNCE_BYTES, else a host one (host_bounce.h),
// so a window of many large sends neither holds a bounce buffer each nor
// is staged past the limit. False in *handled when no offer could be made
// (nothing sent).
int offer_start(FunctionId id, Mode mode, const Eligible& e, int dest, int tag, MPI_Comm comm, MPI_Request* request,
                Offer* offer, bool* handled, const Held* held = nullptr);

// One look at an offer: it has ended once its receive copied it; it is
// withdrawn once it waited FERRY_PT2PT_CLAIM_US unclaimed (at once with
// withdraw_now), counted from its first look or from the last time the
// same receiver was seen claiming an offer of this rank, whichever is later
// (a receive copying a window of large messages one after another is busy,
// not absent); a claim never finished is given up on after
// FERRY_HANDSHAKE_TIMEOUT. Copies for its receive when asked to.
void look_at(PendingOffer& n, bool withdraw_now);

// Gives back what an ended offer held (a withdrawn one's bounce buffer is
// the send's until its receive acknowledges it) and counts the send among
// those copied straight (straight) if it was. The send's error class.
int release_offer(const PendingOffer& n, std::atomic<std::uint64_t>& straight);

// Finishes a blocking send's offer: returns once the receive that claimed
// it has copied the buffer, or, when nothing claimed it within
// FERRY_PT2PT_CLAIM_US (from now), withdraws it.
int offer_finish(Offer& offer);

// While a send waits for its offer to be claimed: this rank's receives
// that are complete take their messages now, claiming the offers they
// matched, since their senders may be waiting the same way.
void claim_what_arrived();

}  // namespace ferry::shim::peer

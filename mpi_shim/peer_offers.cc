#include "mpi_shim/peer_offers.h"

#include <unistd.h>

#include <cstring>
#include <functional>
#include <memory>
#include <thread>

#include "engine/collectives/collectives.h"
#include "engine/common/log.h"
#include "engine/common/params.h"
#include "mpi_shim/peer_claims.h"
#include "mpi_shim/request_registry.h"
#include "mpi_shim/route.h"
#include "mpi_shim/wrapper_support.h"

namespace ferry::shim::peer {

namespace {

// By world rank: when an offer to that rank was last seen claimed (steady
// clock, ns). A receive busy claiming a sender's offers keeps the others'
// windows open.
std::unique_ptr<std::atomic<std::int64_t>[]>& claimed_at() {
  static auto* at = new std::unique_ptr<std::atomic<std::int64_t>[]>;
  return *at;
}

// A withdrawn offer's data goes through its bounce buffer: filled, its
// envelope sent (on the reply tag the receive then listens to), and
// returns once the send buffer has been read. A nonblocking offer's
// request is ended (end_request) once the buffer has been read and before
// the envelope goes, so that the bounce buffer's acknowledgement, on the
// same reply tag, cannot end it. An MPI error class.
int send_withdrawn(Offer& offer, const std::function<int()>& end_request = nullptr) {
  Bounce* bounce = offer.bounce;
  Envelope bounced = offer.env;
  bounced.claim_slot = -1;
  bounced.reply_when_copied = 0;
  auto buffer_read = [&] { return ok(offer.e.backend->event_synchronize(bounce->filled)); };
  if (!ok(peer_memory().export_buffer(bounce->ptr, &bounced.buffer)) ||
      !ok(fill_bounce(*bounce, offer.e.data, &bounced)) || (end_request && !buffer_read())) {
    LockedBounces().give_back(bounce);
    if (end_request) end_request();
    return MPI_ERR_OTHER;
  }
  counters().bounced.fetch_add(1, std::memory_order_relaxed);
  int rc = end_request ? end_request() : MPI_SUCCESS;
  {
    // No peer knows the buffer before its envelope goes: on a failure here
    // it returns to the pool.
    LockedBounces bounces;
    MPI_Request reply = MPI_REQUEST_NULL;
    if (rc == MPI_SUCCESS)
      rc = PMPI_Irecv(&bounce->reply, 1, MPI_INT32_T, offer.e.to.world, bounced.reply_tag, answers(), &reply);
    if (rc == MPI_SUCCESS)
      bounces.keep(SendInFlight{reply, bounce});
    else
      bounces.give_back(bounce);
  }
  if (rc == MPI_SUCCESS) rc = send_envelope(bounced, offer.e.to.world, bounced.reply_tag);
  if (rc != MPI_SUCCESS || end_request) return rc;
  // A blocking send waits for its buffer to be read while the receive
  // already copies the chunks that are there.
  return buffer_read() ? MPI_SUCCESS : MPI_ERR_OTHER;
}

// A withdrawn offer's data through its host bounce buffer: copied there,
// its request ended (end_request), the acknowledgement's receive posted
// and the envelope sent on the reply tag. Returns once the send buffer has
// been read. An MPI error class.
int send_withdrawn_to_host(Offer& offer, const std::function<int()>& end_request = nullptr) {
  HostBounce* host = offer.host;
  Envelope moved = offer.env;
  moved.kind = EnvelopeKind::kHostBounce;
  moved.claim_slot = -1;
  moved.reply_when_copied = 0;
  moved.first_chunk = 0;
  std::memset(&moved.buffer, 0, sizeof(moved.buffer));
  moved.buffer.pid = static_cast<std::int32_t>(getpid());
  moved.buffer.allocation_id = host->index;
  moved.claim_nonce = host_bounces_nonce();
  moved.segment_fd = host->fd;
  const bool read = ok(gpu::copy(host->data, offer.e.data, static_cast<std::size_t>(offer.e.bytes)));
  int rc = end_request ? end_request() : MPI_SUCCESS;
  if (!read) {
    LockedBounces().give_back(host);
    return MPI_ERR_OTHER;
  }
  counters().host_bounced.fetch_add(1, std::memory_order_relaxed);
  {
    LockedBounces bounces;
    MPI_Request reply = MPI_REQUEST_NULL;
    if (rc == MPI_SUCCESS)
      rc = PMPI_Irecv(&host->reply, 1, MPI_INT32_T, offer.e.to.world, moved.reply_tag, answers(), &reply);
    if (rc == MPI_SUCCESS)
      bounces.keep(SendInFlight{reply, nullptr, host});
    else
      bounces.give_back(host);
  }
  if (rc == MPI_SUCCESS) rc = send_envelope(moved, offer.e.to.world, moved.reply_tag);
  return rc;
}

// Completes an offer's request from this rank: the word, sent to itself.
int end_here(const PendingOffer& n) {
  return PMPI_Send(nullptr, 0, MPI_BYTE, world_rank(), n.offer.env.reply_tag, answers());
}

// A bounce buffer for an offer that has none (a persistent send's, made
// while all were in use), if one is free now.
bool has_bounce(Offer& offer) {
  if (offer.bounce) return true;
  LockedBounces bounces;
  bounces.reap();
  offer.bounce = bounces.take(offer.e.backend, offer.e.info.device, static_cast<std::size_t>(offer.e.bytes));
  return offer.bounce != nullptr;
}

// A host bounce buffer for an offer about to be withdrawn when no device
// one is free, if one can be had within FERRY_PT2PT_HOST_BOUNCE_BYTES.
bool has_host_bounce(Offer& offer) {
  if (offer.host) return true;
  LockedBounces bounces;
  bounces.reap();
  offer.host = bounces.take_host(static_cast<std::size_t>(offer.e.bytes), claims_nonce());
  return offer.host != nullptr;
}

// Copies an offer's data into the receive buffer its receive asked for
// (ask_sender_to_copy, peer_receive.cc); false if it cannot.
bool push_to_receive(const Offer& offer) {
  const PushRequest& request = own_push_request(offer.slot);
  void* destination = nullptr;
  if (request.ticket != offer.ticket || request.bytes > static_cast<std::uint64_t>(offer.e.bytes) ||
      !ok(peer_memory().pin_buffer(request.destination, &destination)))
    return false;
  const bool copied = ok(offer.e.backend->copy(destination, offer.e.data, request.bytes));
  peer_memory().unpin_buffer(request.destination);
  return copied;
}

}  // namespace

void start_offers(int world_size) { claimed_at().reset(new std::atomic<std::int64_t>[world_size]()); }

int offer_start(FunctionId id, Mode mode, const Eligible& e, int dest, int tag, MPI_Comm comm, MPI_Request* request,
                Offer* offer, bool* handled, const Held* held) {
  *handled = false;
  std::uint64_t ticket = 0;
  const int slot = held ? held->slot : take_claim(&ticket);
  if (held) ticket = next_ticket();
  Envelope env = data_envelope(e, tag);
  if (held) env.reply_tag = held->reply_tag;
  env.claim_slot = slot;
  env.claim_pid = static_cast<std::int32_t>(getpid());
  env.claim_nonce = claims_nonce();
  env.segment_fd = claims_fd();
  env.claim_ticket = ticket;
  env.chunk_bytes = env.bytes;
  env.reply_when_copied = request || held;
  auto not_offered = [&] {
    if (slot >= 0 && !held) give_claim(slot);
    return MPI_SUCCESS;
  };
  if (slot < 0 || !ok(peer_memory().export_buffer(e.data, e.info, &env.buffer))) return not_offered();
  if (request && PMPI_Irecv(nullptr, 0, MPI_BYTE, MPI_ANY_SOURCE, env.reply_tag, answers(), request) != MPI_SUCCESS)
    return not_offered();
  own_claim(slot).store(claim_word(ticket, kOffered), std::memory_order_release);
  if (send_envelope(env, e.to.world) != MPI_SUCCESS) {
    if (request) {
      PMPI_Cancel(request);
      PMPI_Request_free(request);
    }
    return not_offered();
  }
  *handled = true;
  *offer = Offer{e, nullptr, slot, ticket, env, comm};
  // A persistent send's route is its init's.
  if (!held) record_route(id, RouteDecision{Route::kEngine, "peer memory"});
  if (!request && !held) {
    const int rc = send_marker(mode, dest, tag, comm, nullptr);
    return rc == MPI_SUCCESS ? rc : raise_error(comm, rc);
  }
  // The marker completes on its own (it is empty); *request stands for the send.
  MPI_Request marker = MPI_REQUEST_NULL;
  int rc = send_marker(mode, dest, tag, comm, &marker);
  if (rc == MPI_SUCCESS) rc = PMPI_Request_free(&marker);
  return rc == MPI_SUCCESS ? rc : raise_error(comm, rc);
}

void claim_what_arrived() { deliver_receives_posted_before(kPostedNow); }

void look_at(PendingOffer& n, bool withdraw_now) {
  if (n.ended) return;
  const auto now = std::chrono::steady_clock::now();
  const auto window = std::chrono::microseconds(params().pt2pt_claim_us);
  if (!n.looked_at) {
    n.looked_at = true;
    n.offer_ends = now + window;
    n.gives_up = handshake_deadline();
  }
  std::atomic<std::uint64_t>& claim = own_claim(n.offer.slot);
  const std::uint64_t ticket = n.offer.ticket;
  std::uint64_t word = claim.load(std::memory_order_acquire);
  std::atomic<std::int64_t>& receiver_claimed = claimed_at()[n.offer.e.to.world];
  const std::int64_t now_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(now.time_since_epoch()).count();
  if (word == claim_word(ticket, kClaimed) || word == claim_word(ticket, kClaimDone) ||
      word == claim_word(ticket, kPushWanted))
    receiver_claimed.store(now_ns, std::memory_order_relaxed);
  const bool expired =
      withdraw_now ||
      (now > n.offer_ends && now_ns > receiver_claimed.load(std::memory_order_relaxed) +
                                          std::chrono::duration_cast<std::chrono::nanoseconds>(window).count());
  if (word == claim_word(ticket, kClaimDone)) {
    n.ended = true;
  } else if (word == claim_word(ticket, kPushWanted) &&
             claim.compare_exchange_strong(word, claim_word(ticket, kPushing), std::memory_order_acq_rel)) {
    claim.store(claim_word(ticket, push_to_receive(n.offer) ? kPushed : kPushRefused), std::memory_order_release);
  } else if (word == claim_word(ticket, kOffered) && expired && (has_bounce(n.offer) || has_host_bounce(n.offer)) &&
             claim.compare_exchange_strong(word, claim_word(ticket, kWithdrawn), std::memory_order_acq_rel)) {
    n.ended = n.withdrawn = true;
    FERRY_TRACE(Shim, "a %lld-byte offer to rank %d withdrawn, unclaimed %lld us after its first look",
                static_cast<long long>(n.offer.e.bytes), n.offer.e.to.world,
                static_cast<long long>(
                    std::chrono::duration_cast<std::chrono::microseconds>(now - (n.offer_ends - window)).count()));
    std::function<int()> end_request;
    if (n.has_request) end_request = [&n] { return end_here(n); };
    n.error = n.offer.bounce ? send_withdrawn(n.offer, end_request) : send_withdrawn_to_host(n.offer, end_request);
  } else if (word == claim_word(ticket, kOffered) && now > n.gives_up &&
             claim.compare_exchange_strong(word, claim_word(ticket, kWithdrawn), std::memory_order_acq_rel)) {
    // No bounce buffer to go on through, and no receive came.
    FERRY_WARN(Shim, "a %lld-byte device message was not received within FERRY_HANDSHAKE_TIMEOUT",
               static_cast<long long>(n.offer.e.bytes));
    n.ended = n.withdrawn = true;
    n.error = MPI_ERR_OTHER;
    if (n.has_request) end_here(n);
  } else if ((word == claim_word(ticket, kClaimed) || word == claim_word(ticket, kPushed)) && now > n.gives_up) {
    FERRY_WARN(Shim, "a receive claimed a %lld-byte message and did not finish within FERRY_HANDSHAKE_TIMEOUT",
               static_cast<long long>(n.offer.e.bytes));
    n.ended = n.slot_lost = true;
    n.error = MPI_ERR_OTHER;
    if (n.has_request) end_here(n);
  }
}

int release_offer(const PendingOffer& n, std::atomic<std::uint64_t>& straight) {
  if (!n.withdrawn && n.offer.bounce) LockedBounces().give_back(n.offer.bounce);
  if (!n.withdrawn && !n.slot_lost) straight.fetch_add(1, std::memory_order_relaxed);
  if (!n.persistent && !n.slot_lost) give_claim(n.offer.slot);
  return n.error == MPI_SUCCESS ? MPI_SUCCESS : raise_error(n.offer.comm, n.error);
}

int offer_finish(Offer& offer) {
  PendingOffer n{offer};
  n.has_request = false;
  for (int polls = 0;; ++polls) {
    look_at(n, false);
    if (n.ended) break;
    claim_what_arrived();
    if (polls > 1024) std::this_thread::yield();
  }
  return release_offer(n, counters().straight_blocking);
}

}  // namespace ferry::shim::peer

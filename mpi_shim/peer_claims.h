// Claim words: how the receive of an offer (peer_offers.h) takes the send
// buffer from its sender, or finds that the sender withdrew it first. One
// word per offer in flight, in a segment of host shared memory of the
// sender's that the receiver maps; each offer has a ticket in the word's
// upper half, so a late receive cannot take a later offer in the same word.
#pragma once

#include <atomic>
#include <cstdint>

#include "mpi_shim/peer_envelopes.h"

namespace ferry::shim::peer {

// A claim word's state. kPushWanted: the receive asks the sender to copy
// into the buffer named by the slot's PushRequest; kPushing: the sender
// copies; kPushed: it has; kPushRefused: it could not, the receive copies.
// Only the receive writes kClaimDone, after which the sender may reuse the
// word.
enum Claim : std::uint64_t {
  kOffered = 1,
  kClaimed = 2,
  kClaimDone = 3,
  kWithdrawn = 4,
  kPushWanted = 5,
  kPushing = 6,
  kPushRefused = 7,
  kPushed = 8,
};
constexpr int kClaimSlots = 4096;
constexpr std::uint64_t claim_word(std::uint64_t ticket, Claim state) { return ticket << 8 | state; }

// Where the receive of an offer asks its sender to copy (kPushWanted): one
// per claim word, after the words in the claims segment.
struct PushRequest {
  ExportedBuffer destination;
  std::uint64_t bytes;
  std::uint64_t ticket;  // the offer's
};

// A free word of this process's claims segment (made at first use) and a
// new ticket; -1 when every word is in use or the segment cannot be made.
int take_claim(std::uint64_t* ticket);
void give_claim(int slot);
// A new ticket for a claim word held already.
std::uint64_t next_ticket();

// Word slot of this process's segment, and its push request (slot from
// take_claim).
std::atomic<std::uint64_t>& own_claim(int slot);
const PushRequest& own_push_request(int slot);
// What an offer's envelope names this process's segment by: its nonce, and
// its memfd here (valid once take_claim gave a word).
std::uint64_t claims_nonce();
int claims_fd();

// The word of an offer from another process, its segment mapped at first
// use; nullptr if it cannot be.
std::atomic<std::uint64_t>* peer_claim(const Envelope& env);
// The push request of an offer from another process (its claims segment is
// mapped by peer_claim).
PushRequest* peer_push_request(const Envelope& env);

// At MPI_Finalize: every segment unmapped, this process's closed.
void unmap_claims();

}  // namespace ferry::shim::peer

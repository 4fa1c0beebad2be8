// What the processes of a pair tell each other beside the user's marker
// (peer_pt2pt.h): an envelope to the receiver on the control communicator
// before each marker, naming the message's data; replies to the sender on
// the answers communicator, on the reply tag of its send. And the queue of
// the envelopes a receive took off the control communicator before their
// markers were matched.
#pragma once

#include <mpi.h>

#include <cstdint>

#include "engine/core/peer_memory.h"

namespace ferry::shim::peer {

// Tags on the control communicator: envelopes, then one reply tag per send
// in flight (a bounce buffer's acknowledgement comes back on it; a
// withdrawn offer's bounce envelope goes out on it).
constexpr int kEnvelopeTag = 1;
constexpr int kFirstReplyTag = 2;

// kHostBounce: a withdrawn offer's data in a host bounce buffer of the
// sender's (host_bounce.h), named by buffer.pid, claim_nonce and
// buffer.allocation_id. kNet: a message of the net channel from a rank of
// another machine (peer_net.h), of `bytes` under the net tag reply_tag.
enum class EnvelopeKind : std::int32_t { kEmpty = 1, kPeerMemory = 2, kHostBounce = 3, kNet = 4 };
enum Reply : std::int32_t { kCopied = 1, kFailed = 2 };

struct Envelope {
  std::uint64_t comm_id;
  std::int32_t tag;
  EnvelopeKind kind;
  std::uint64_t bytes;
  std::int32_t reply_tag;
  // The bounce buffer is filled chunk by chunk: chunk k is there once the
  // word at its start reads first_chunk + k or later. 0: filled already.
  std::uint32_t first_chunk;
  std::uint64_t chunk_bytes;
  // An offer of the send buffer itself (buffer names it, not a bounce
  // buffer): the receive that claims the word at claim_slot of the sender's
  // claims segment copies straight from it; if the sender withdrew first,
  // an envelope of a bounce buffer follows on reply_tag. -1: no offer.
  std::int32_t claim_slot;
  std::int32_t claim_pid;
  std::uint64_t claim_nonce;
  std::uint64_t claim_ticket;  // this offer's, in the word's upper half
  // Nonzero: the receive that claims the offer says so on the answers
  // communicator, with reply_tag, once it has copied the buffer (a
  // nonblocking send's request is the receive of that word).
  std::uint32_t reply_when_copied;
  // The memfd, in the sending process, of the shared memory this envelope
  // names: its claims segment (an offer) or its host bounce buffer
  // (kHostBounce).
  std::int32_t segment_fd;
  ExportedBuffer buffer;  // kPeerMemory; kHostBounce names its segment
  // FERRY_TRACE: the flow arrow from the send to the receive that takes
  // this envelope; 0: none.
  std::uint64_t flow_id;
};
static_assert(sizeof(Envelope) == 192, "Envelope travels between processes; keep its layout fixed");

// Once every rank agreed at MPI_Init: makes the control and answers
// communicators and learns MPI_TAG_UB. False if they could not be made.
bool open_channels();
// At MPI_Finalize.
void close_channels();

// Messages back to a sender, on the reply tag of its send: a bounce
// buffer's acknowledgement, a claimed nonblocking offer's word that its
// buffer is copied; and a sender's word to itself that ends an offer it
// withdrew. Apart from the control communicator, since both ranks of a pair
// draw reply tags from counters of their own: a message back must never
// match a receive of a message to this rank.
MPI_Comm answers();

// A reply tag for a new send; they come round once MPI_TAG_UB is reached.
int next_reply_tag();
// Whether a user's tag can carry a marker (0 to MPI_TAG_UB).
bool valid_tag(int tag);

// env to world rank world on the control communicator: with kEnvelopeTag
// before a marker (the start of its trace flow, with FERRY_TRACE), or on a
// withdrawn offer's reply tag.
int send_envelope(const Envelope& env, int world, int tag = kEnvelopeTag);
// The envelope world sends on a withdrawn offer's reply tag (blocking: the
// sender sends it once it has withdrawn the offer).
int receive_envelope(int world, int tag, Envelope* out);

// The envelope the sender sent with the message of (comm_id, tag) that the
// real MPI matched: the first one queued, receiving more from the sender
// until it is there (it was sent before the message). peek leaves it
// queued. Gives up after FERRY_HANDSHAKE_TIMEOUT (MPI_ERR_OTHER).
int find_envelope(int world, std::uint64_t comm_id, int tag, bool peek, Envelope* out);

// This process's exports of its buffers, which envelopes name, and its
// mappings of its peers' buffers. A miss keeps the other mappings of the
// peer: a program may alternate between many buffers of one peer.
PeerMemory& peer_memory();

}  // namespace ferry::shim::peer

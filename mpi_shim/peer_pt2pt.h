// Point-to-point messages between device buffers of one machine, through
// mapped peer memory (and to other machines through the net transport, in
// the same scheme: peer_net.h). The real MPI still matches every message: a device
// send of FERRY_PT2PT_MIN_BYTES or more to a rank of this machine goes to
// the real MPI as an empty "marker" message with the user's tag, on the
// user's communicator, so MPI's matching and ordering rules hold unchanged
// (wildcards, probes, cancel of receives). Before it, an envelope on a
// control communicator of Ferry's own names the send buffer (an IPC handle
// and offset). Whichever receive matches the marker -- a device or a host
// buffer -- finds the envelope and copies the data straight out of the
// sender's buffer (one copy-engine copy over NVLink where the GPUs have
// it): the user's own buffer when it claims the send's offer in time, else
// the bounce buffer the sender copied it to, which its acknowledgement
// frees for the sender's next message. Receives take envelopes in the
// order they were posted, which is the order the real MPI matched them.
//
// Empty messages are the only ones a receive must look twice at: every
// empty message a rank sends to another of its machine carries an envelope
// too, saying that it is really empty. Communicators are told apart by an
// identity every member computes alike without communicating (from the
// parent's identity and how many communicators were made from it); one
// Ferry does not know (an intercommunicator, one made by a call Ferry does
// not intercept) never carries markers. Everything here is off unless all
// ranks of MPI_COMM_WORLD agreed at MPI_Init (FERRY_PT2PT=peer everywhere).
#pragma once

#include <mpi.h>

#include <atomic>
#include <cstdint>
#include <functional>

#include "function_ids.h"

namespace ferry::shim::peer {

extern std::atomic<bool> g_active;
// True once MPI_Init agreed: from then on every rank checks its receives.
inline bool active() { return g_active.load(std::memory_order_relaxed); }

// After PMPI_Init: agrees with every rank, sets up the control communicator.
void start();
// Before PMPI_Finalize: finishes sends the user freed early.
void stop();

// A communicator made from parent by a collective call of every member of
// parent (child is MPI_COMM_NULL on ranks not in it). salt tells apart the
// communicators one call makes (the color of MPI_Comm_split).
void derived(MPI_Comm parent, MPI_Comm child, std::uint64_t salt);
// MPI_Comm_create_group: collective over group only, told apart by the tag.
void derived_from_group(MPI_Comm parent, MPI_Comm child, int tag);
void forget(MPI_Comm comm);

// How a send's marker goes: as the user's send would (MPI_Ssend's
// completes once the receive matched it, MPI_Rsend's needs it posted).
enum class Mode { kNone, kStandard, kSynchronous, kReady };

// Sends count × type from a device buffer to dest through peer memory when
// it can: *handled says whether it did (false: send it another way).
// A blocking send, and a nonblocking one in standard or ready mode, offer
// the send buffer itself: the receive copies straight from it if it claims
// the offer in time. The send withdraws an offer nobody claimed within
// FERRY_PT2PT_CLAIM_US of its waiting (a blocking send's call, the first
// completion call that looks at a nonblocking one's request) or of the
// receiver's latest claim of another of its offers, and goes on through a
// bounce buffer, so it never waits for its receive (MPI's progress rule,
// and programs that count on small messages being buffered). A nonblocking offer's *request is a receive of the word
// that the copy is done (peer_offer_requests.h). Any other send copies the data to a bounce buffer of device memory first,
// and *request is the marker's.
int send(FunctionId id, Mode mode, const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm,
         MPI_Request* request, bool* handled);

// MPI_Send_init and MPI_Rsend_init of a device buffer to a peer of the
// machine: every MPI_Start offers the buffer anew, as a nonblocking send
// does, and *request is a persistent receive of the word that ends each
// offer. *handled false: not taken (make the request another way).
int send_init(FunctionId id, Mode mode, const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm,
              MPI_Request* request, bool* handled);
// The requests of nonblocking and persistent offers are tracked in the
// request registry (peer_offer_requests.h): the completion calls settle
// them, withdrawing an offer that waited unclaimed too long.

// MPI_Sendrecv whose send offers its buffer (as a blocking send()):
// receive() makes the receive while the offer stands, so two ranks that
// exchange copy straight out of each other's buffers. *handled false:
// nothing was sent (send and receive another way).
int sendrecv(const void* sendbuf, int sendcount, MPI_Datatype sendtype, int dest, int sendtag,
             const std::function<int()>& receive, MPI_Comm comm, bool* handled);

// The counts FERRY_STATS prints: sends copied straight from the send
// buffer (blocking and nonblocking), sends through device bounce buffers
// and through host ones.
// pushed: receives of this rank whose sender copied the data (ranks
// sharing a GPU that takes turns, FERRY_GPU_LEADER). net: sends to other
// machines through the net channel (peer_net.h).
struct SendCounts {
  std::uint64_t straight_blocking, straight_nonblocking, bounced, host_bounced, pushed, net;
};
SendCounts send_counts();

// Whether send() would take a send of count × type at buf to dest (unless
// its bounce buffers are all in use).
bool takes(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm);

// To call before sending count × type to dest: an empty message gets its
// envelope (*announced). Returns an MPI error class.
int before_send(int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm, bool* announced = nullptr);

// Whether receives on comm must be checked: it is known and has a peer on
// this machine.
bool checks_receives(MPI_Comm comm);

// A receive's place in the order receives were posted (staged_requests.h):
// kPostedNow for one that is posted as it is completed (a blocking one).
constexpr std::uint64_t kPostedNow = ~std::uint64_t{0};

// After a receive into count × type at buf completed with *status: if it
// received a marker, moves the message's data into buf (any memory) and
// sets *status's count. Returns an MPI error class (MPI_ERR_TRUNCATE when
// the message was longer), already in status->MPI_ERROR when not success.
// The tracked receives posted before it (posted) take their envelopes
// first.
int after_receive(MPI_Comm comm, void* buf, int count, MPI_Datatype type, MPI_Status* status,
                  std::uint64_t posted = kPostedNow);

// After MPI_Probe or MPI_Iprobe found a message: a marker's status gets the
// count of the data it stands for. Returns an MPI error class.
int after_probe(MPI_Comm comm, MPI_Status* status);

// A matched probe took a message off the queue: the message's envelope is
// taken too, and kept with the message for MPI_Mrecv/MPI_Imrecv.
struct TakenEnvelope;
int after_matched_probe(MPI_Comm comm, MPI_Status* status, TakenEnvelope** taken);
// Receives the data of a message a matched probe took (after the real
// MPI_Mrecv of the marker); frees taken.
int receive_taken(MPI_Comm comm, TakenEnvelope* taken, void* buf, int count, MPI_Datatype type, MPI_Status* status);

}  // namespace ferry::shim::peer

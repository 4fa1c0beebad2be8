// A software RDMA device for the ib provider's tests, where no machine has
// a real one: the verbs the provider calls (its IbVerbs table, and the
// context's post_send, post_recv and poll_cq that verbs.h's inline calls
// reach), with reliable-connected semantics between the queue pairs of one
// process (ranks as threads). Sends and writes land at once and in order;
// a send or write with immediate data takes the destination's next posted
// receive, or waits for one (as a device retries on receiver-not-ready).
// Every access is checked as a device checks it: a local key must cover its
// gather entry, a remote key with remote write the bytes written, queue
// pairs must be in RTS; a failed check completes the work request in error.
// A write to a queue pair that no longer exists completes with
// IBV_WC_RETRY_EXC_ERR, as a peer that has gone away does.
#pragma once

#include <cstddef>
#include <cstdint>

#include "engine/transport/ib_verbs.h"

namespace ferry::soft_verbs {

// The table (one device, soft_0, one active InfiniBand port with messages
// of at most max_message_bytes).
const IbVerbs& verbs(std::uint32_t max_message_bytes = 64 * 1024);

struct Counts {
  std::uint64_t writes;         // RDMA writes placed (pieces)
  std::uint64_t sends;          // two-sided sends delivered
  std::uint64_t registrations;  // memory regions registered
  std::uint64_t live_regions;   // registered now
  std::uint64_t errors;         // work requests completed in error
};
Counts counts();

}  // namespace ferry::soft_verbs

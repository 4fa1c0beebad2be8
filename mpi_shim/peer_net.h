// Point-to-point messages on device buffers between ranks of different
// machines, through the net transport (engine/transport/net_transport.h):
// the same marker scheme as peer memory (peer_pt2pt.h) -- the real MPI
// matches an empty marker with the user's tag, an envelope on the control
// communicator names the message -- but the envelope names a message of
// the net channel, a net transport between the ranks of MPI_COMM_WORLD
// (FERRY_NET's provider), on which the data follows under a tag of its own.
// Whichever receive matches the marker, of device or host memory, receives
// that message: device memory is pipelined through pinned host chunks on
// both sides.
//
// Progress: a send never waits for a receive the program makes later (its
// receive's data moves only once the receiving rank's completion call
// looked at the marker). A blocking send moves its message a window of
// chunks at a time while its receive takes it; if the receive has taken no
// chunk within FERRY_NET_PATIENCE_US, the rest is handed to the network at
// once, as below, and the send returns. A nonblocking or persistent
// send hands the whole message to the network before it returns
// (post_send_now: every chunk copied out of the device and posted), so its
// buffer is free at once, as after a buffered send, and the message reaches
// its receive without further calls of the sender into Ferry; the channel
// keeps it until it has left (moved on at every completion call, waited for
// at MPI_Finalize). A receive waits for its data once its marker matched
// (at most FERRY_HANDSHAKE_TIMEOUT).
#pragma once

#include <mpi.h>

#include <cstdint>
#include <functional>

#include "function_ids.h"
#include "mpi_shim/peer_envelopes.h"
#include "mpi_shim/peer_message.h"
#include "mpi_shim/peer_pt2pt.h"

namespace ferry::shim::peer {

// What this rank can open the net channel with: 0 where FERRY_TRANSPORTS
// leaves out net; else kNetWanted, or kNetWantsIb where FERRY_NET=auto
// would take ib here (net_provider_here).
constexpr int kNetWanted = 1;
constexpr int kNetWantsIb = 2;
int net_wanted_here();
// At MPI_Init, collective over MPI_COMM_WORLD, with the same `open` and
// `all_ib` on every rank (every rank wants it and the ranks span machines;
// every rank would take ib). Whether the channel is open.
bool open_net(bool open, bool all_ib);
// Before MPI_Finalize: waits for the sends still in flight (at most
// FERRY_HANDSHAKE_TIMEOUT), then closes the channel.
void close_net();

// e (to a rank of another machine) through the net channel: its message
// and envelope, then the marker as mode says. request: a nonblocking send,
// whose request is the marker's.
// *handled false: nothing was sent (the channel refused the message; send
// it another way).
int net_send(FunctionId id, Mode mode, const Eligible& e, int dest, int tag, MPI_Comm comm, MPI_Request* request,
             bool* handled);

// MPI_Sendrecv whose send is e: the receive runs while the message is on
// its way. *handled as net_send's.
int net_sendrecv(const Eligible& e, int dest, int tag, const std::function<int()>& receive, MPI_Comm comm,
                 bool* handled);

// MPI_Send_init and MPI_Rsend_init of e: every MPI_Start sends the message
// anew (as a nonblocking send does). *handled false: no request was made.
int net_send_init(FunctionId id, Mode mode, const Eligible& e, int dest, int tag, MPI_Comm comm,
                  MPI_Request* request, bool* handled);

// The receive side of a kNet envelope from world rank world: its message
// into count × type at buf (any memory); sets *status's count. An MPI
// error class (MPI_ERR_TRUNCATE when the message was longer), also in
// status->MPI_ERROR when not success.
int receive_net_message(MPI_Comm comm, const Envelope& env, int world, void* buf, int count, MPI_Datatype type,
                        MPI_Status* status);

}  // namespace ferry::shim::peer

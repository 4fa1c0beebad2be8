// The net transport's socket provider (net.h): TCP connections of Ferry's
// own between every pair of ranks, for machines whose MPI brings no network
// worth using, or for the engine without MPI.
//
// Set-up (make_socket_network, collective over the bootstrap): each rank
// listens on the IPv4 address of one interface (FERRY_SOCKET_IFNAME, else the
// first up non-loopback one, else loopback; never the wildcard address), and
// the addresses go round the bootstrap, with a per-job secret rank 0 draws
// from /dev/urandom. The higher rank of each pair connects
// FERRY_SOCKET_STREAMS streams to the lower; both sides of every stream prove
// they hold the secret by challenge-response (SipHash of the other's nonce:
// the secret never crosses the wire). A connection that fails the proof is
// closed and logged, and the wait for the right one goes on until
// FERRY_BOOTSTRAP_TIMEOUT.
//
// Messages: each goes whole on one stream of its peer, streams taken in turn;
// a header (tag, bytes, sequence number of the message within its (peer,
// tag)) precedes the payload, and a receive matches the message of its own
// sequence number, so per (peer, tag) receives take messages in posting
// order whichever stream carried them. A message that arrives before its
// receive is posted is read into a buffer of its own (one copy more), so no
// stream ever waits on the application. A stream reads ahead a few KiB at a
// time, so small messages and their headers come several to a recv; a
// large payload is read straight into its receive.
//
// Progress: every post and test() moves what it can at once; once the
// engine's thread has not called in for a while (it computes, or blocks in
// the real MPI), a thread of the provider's own sleeps in poll on every
// stream and moves what arrives or finds room, so a message goes on without
// it. A send is done once all its bytes are in the kernel's socket buffer.
// Used by one engine thread at a time, as net.h says; a mutex keeps it and
// the progress thread apart. A stream that closes without the peer's
// goodbye (its process ended) fails every pending and later operation with
// that peer in kPeerEnded at once, with a WARN naming the rank and its
// address.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "engine/bootstrap/bootstrap.h"
#include "engine/transport/net.h"

namespace ferry {

struct SocketNetworkOptions {
  std::string ifname;  // FERRY_SOCKET_IFNAME
  int streams = 2;     // FERRY_SOCKET_STREAMS; rank 0's counts
  static SocketNetworkOptions from_params();
};

// Collective over bootstrap's ranks. kInvalidArgument (and a WARN naming the
// value) where options.ifname names no usable interface; every other rank
// then returns kUnavailable. Likewise for any rank that cannot listen or
// connect: all ranks return a failure, none hangs past
// FERRY_BOOTSTRAP_TIMEOUT.
Status make_socket_network(Bootstrap& bootstrap, std::unique_ptr<NetProvider>* out,
                           const SocketNetworkOptions& options = SocketNetworkOptions::from_params());

// The interface a rank listens on.
struct SocketInterface {
  std::string name;
  std::uint32_t ipv4 = 0;  // network byte order
  std::string address;     // dotted
};
// FERRY_SOCKET_IFNAME's rule for wanted (empty: the default choice).
// kInvalidArgument where wanted matches no interface that is up with an
// IPv4 address.
Status choose_socket_interface(const std::string& wanted, SocketInterface* out, std::string* problem = nullptr);
// What is wrong with FERRY_SOCKET_IFNAME's value wanted here (empty: nothing,
// or no value), as a line for the user.
std::string socket_interface_problem(const std::string& wanted);

// What each rank contributes to the set-up's allgather (exposed for tests).
struct SocketEndpoint {
  std::uint32_t ipv4;  // network byte order
  std::uint16_t port;  // host byte order; 0: this rank cannot listen
  std::uint16_t streams;
  std::uint8_t secret[16];  // rank 0's is the job's; others send zeros
};
static_assert(sizeof(SocketEndpoint) == 24, "SocketEndpoint is exchanged between ranks");

}  // namespace ferry

// Messages of host or device memory between the ranks of a bootstrap over
// the net transport (engine/transport/net_transport.h), for callers beside
// the collectives: the shim's point-to-point between machines
// (mpi_shim/peer_net.h). Every message has a tag of its own, taken from a
// counter per peer; both sides learn it some other way (the shim's
// envelope).
//
// Any thread may call; the transport is driven by one at a time, a waiting
// thread holding it for one step of progress at a time. Waits end at
// FERRY_HANDSHAKE_TIMEOUT with kTimeout (then every message in flight is
// abandoned and the channel refuses more).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "engine/bootstrap/bootstrap.h"
#include "engine/common/status.h"

namespace ferry {

class NetProvider;
class NetTransport;

// What is wrong here with the settings of the net transport's provider
// (FERRY_SOCKET_IFNAME naming no usable interface where FERRY_NET=socket;
// no RDMA port, or none FERRY_IB_HCA chooses, where FERRY_NET=ib), as a
// line for the user; empty when nothing is.
std::string net_setting_problem();
// The provider this rank would take: FERRY_NET, or for auto, ib where this
// rank has a port FERRY_IB_HCA allows, else mpi. Ranks must agree before
// opening it (auto: ib only where every rank says ib).
std::string net_provider_here();

class NetChannel {
 public:
  // A send in flight.
  struct Send;

  // Collective over bootstrap: opens provider (as FERRY_NET names it, the
  // same on every rank) between its ranks (the channel keeps the
  // bootstrap). chunk_bytes and
  // chunks_in_flight as the net transport's; idle_chunk_bytes: pinned
  // chunks kept for later messages.
  static Status open(std::unique_ptr<Bootstrap> bootstrap, const std::string& provider, std::size_t chunk_bytes,
                     int chunks_in_flight, std::size_t idle_chunk_bytes, std::unique_ptr<NetChannel>* out);
  // The same over a provider opened elsewhere (the mpi provider on the
  // application's communicator: no bootstrap needed).
  static Status open(std::unique_ptr<NetProvider> provider, std::size_t chunk_bytes, int chunks_in_flight,
                     std::size_t idle_chunk_bytes, std::unique_ptr<NetChannel>* out);
  // Waits for the sends it keeps (at most FERRY_HANDSHAKE_TIMEOUT), then
  // closes the provider.
  ~NetChannel();
  NetChannel(const NetChannel&) = delete;
  NetChannel& operator=(const NetChannel&) = delete;

  // The provider's name, as FERRY_NET says it.
  const char* provider() const;
  // The next tag for a message to peer; they come round at kTags.
  static constexpr std::uint32_t kTags = 32768;
  int take_tag(int peer);

  // Posts a send of bytes at data to peer. now: every chunk copied out of
  // the device and handed to the network before it returns (the channel
  // keeps the send until it has left; data is free at once); else a window
  // of chunks at a time, moved on by finish_send and every other wait.
  Status start_send(int peer, const void* data, std::size_t bytes, int tag, bool now,
                    std::shared_ptr<Send>* send);
  // Waits for a send started without `now`: until it has left, or, once its
  // receive has taken no chunk within patience_us, until the rest of it is
  // handed to the network (then the channel keeps it).
  Status finish_send(const std::shared_ptr<Send>& send, std::int64_t patience_us);
  // Receives exactly bytes from peer's message of tag into data (any
  // memory), waiting until it is there.
  Status receive(int peer, void* data, std::size_t bytes, int tag);
  // Moves the sends it keeps on, unless another thread is driving it.
  void progress();

 private:
  NetChannel(std::unique_ptr<NetTransport> transport, std::size_t idle_chunk_bytes);
  // Drops the kept sends that have left (the list holds what the channel
  // must still wait for); mutex_ held.
  void forget_sent_locked();

  std::mutex mutex_;
  std::unique_ptr<Bootstrap> bootstrap_;
  std::unique_ptr<NetTransport> transport_;
  std::vector<std::uint32_t> next_tag_;  // by peer
  std::vector<std::shared_ptr<Send>> kept_;
};

}  // namespace ferry

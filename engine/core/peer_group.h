// The ranks of one engine communicator and how they reach each other: the
// bootstrap, every rank's identity (ranks.h), the transport to each peer
// and the one every rank uses for all (transport_table.h), and the device
// resources calls reuse (resources.h). The collectives' communicator and
// the windows build on it.
#pragma once

#include <memory>
#include <vector>

#include "engine/bootstrap/bootstrap.h"
#include "engine/core/peer_watch.h"
#include "engine/core/ranks.h"
#include "engine/core/resources.h"
#include "engine/core/transport_table.h"

namespace ferry {

class PeerGroup {
 public:
  // Collective over the bootstrap's ranks (connect()).
  static Status create(std::unique_ptr<Bootstrap> bootstrap, std::unique_ptr<PeerGroup>* out);
  virtual ~PeerGroup() = default;
  PeerGroup(const PeerGroup&) = delete;
  PeerGroup& operator=(const PeerGroup&) = delete;

  int rank() const { return bootstrap_->rank(); }
  int size() const { return bootstrap_->size(); }
  Bootstrap& bootstrap() { return *bootstrap_; }
  // Every rank's identity, as it told the others at set-up.
  const std::vector<RankIdentity>& ranks() const { return ranks_; }
  // How this rank reaches each peer (TransportTable::plan).
  TransportTable& transports() { return transports_; }
  const TransportTable& transports() const { return transports_; }
  PeerMemory& peer_memory() { return transports_.p2p().memory(); }
  // The transport every rank uses for every peer, agreed at set-up: p2p when
  // every rank reaches every peer by it, else shm when every peer is reached
  // by p2p or shm; nullptr otherwise (and for a single rank).
  Transport* common_transport() const { return common_; }
  // True when every peer's device memory can be mapped here (one rank, or
  // p2p to everyone): the precondition of the direct algorithms.
  bool all_peers_mapped() const { return size() == 1 || (common_ && common_->maps_device_memory()); }
  // Host shared memory with every peer, where the common transport is shm;
  // nullptr otherwise.
  SharedSegments* shm() const { return common_ == &transports_.shm() ? transports_.shm().segments() : nullptr; }
  // The network to the peers of other machines, where the ranks span
  // machines and every peer is reached (the same on every rank); nullptr
  // otherwise.
  NetTransport* net() const { return net_; }
  // Streams, events and scratch kept between calls.
  DeviceResources& resources() { return resources_; }

 protected:
  // The transports FERRY_TRANSPORTS allows, for the active backend.
  explicit PeerGroup(std::unique_ptr<Bootstrap> bootstrap);

  // Collective over the bootstrap's ranks: identities exchanged, local peers
  // watched for their exit (in the handshakes' waits and, through the
  // abandon word, in device waits: peer_watch.h), the transport to each peer
  // planned from the topology and agreed (the common transport connected),
  // and per-call handshakes moved to host shared memory where all ranks
  // share a machine.
  Status connect();

 private:
  std::unique_ptr<Bootstrap> bootstrap_;
  std::vector<RankIdentity> ranks_;
  TransportTable transports_;
  Transport* common_ = nullptr;
  NetTransport* net_ = nullptr;
  DeviceResources resources_;
  std::unique_ptr<PeerWatch> watch_;  // while any peer is on this machine
};

}  // namespace ferry

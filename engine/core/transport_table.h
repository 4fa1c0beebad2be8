// Which transport reaches each peer of an engine communicator: the
// transports the settings allow are asked in priority order (p2p, shm, net)
// whether they can connect to the peer, given both ranks' identities and
// the path the topology's search found between them; the first that can
// serves it.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "engine/core/ranks.h"
#include "engine/topology/system_graph.h"
#include "engine/transport/net_transport.h"
#include "engine/transport/p2p_transport.h"
#include "engine/transport/shm_transport.h"

namespace ferry {

// The transports the settings let the engine use between ranks.
struct AllowedTransports {
  bool p2p = true;
  bool shm = true;
  bool net = true;
};

// FERRY_TRANSPORTS's list (comma separated, case and spaces ignored: p2p,
// shm, net; none allows nothing), less
// what FERRY_P2P_DISABLE and FERRY_SHM_DISABLE turn off. A list that names
// no known transport (empty, or only unknown names) allows all of them.
// Unknown names are added to unknown, for the caller to report.
AllowedTransports allowed_transports(const std::string& list, bool p2p_disable, bool shm_disable,
                                     std::vector<std::string>* unknown);

// What the topology's search calls for between rank and each rank:
//  - GPUs whose rank attribute is a communicator rank (a topology file):
//    the search's transport between the two;
//  - a device backend with physical devices and a topology that has GPUs
//    but no ranks: the worst transport between the machine's GPUs (which
//    GPU a rank uses is not known at set-up);
//  - otherwise p2p, as without a topology (topology nullptr).
std::vector<TransportKind> topology_paths(int rank, const std::vector<RankIdentity>& ranks,
                                          const SystemGraph* topology);

class TransportTable {
 public:
  // shm segments of shm_segment_bytes, pinned for backend's device
  // (nullptr: plain host memory); net messages in chunks of net_chunk_bytes,
  // net_chunks of them in flight.
  TransportTable(const AllowedTransports& allowed, gpu::Backend* backend, std::size_t shm_segment_bytes,
                 std::size_t net_chunk_bytes = std::size_t{1} << 20, int net_chunks = 4);

  // Chooses the transport to every rank.
  void plan(int rank, const std::vector<RankIdentity>& ranks, const SystemGraph* topology);
  // The transport to peer; nullptr for this rank itself and for peers no
  // allowed transport reaches.
  Transport* to(int peer) const { return peers_[peer]; }
  // to(peer)'s name; "self" for this rank, "none" where nothing reaches.
  const char* name_to(int peer) const;

  // The p2p transport's mappings exist whether or not p2p is allowed
  // (windows export and pin buffers through them).
  P2pTransport& p2p() { return p2p_; }
  ShmTransport& shm() { return shm_; }
  const ShmTransport& shm() const { return shm_; }
  NetTransport& net() { return net_; }
  // Whether some peer is reached over the network.
  bool uses_net() const;

 private:
  P2pTransport p2p_;
  ShmTransport shm_;
  NetTransport net_;
  std::vector<Transport*> candidates_;  // the allowed ones, best first
  int rank_ = -1;
  std::vector<Transport*> peers_;
};

}  // namespace ferry

#include "engine/core/peer_group.h"

#include <algorithm>

#include "engine/common/params.h"
#include "engine/topology/local_topology.h"
#include "engine/transport/shm_bootstrap.h"

namespace ferry {
namespace {

// What this process's settings allow, worked out once, so an unknown name in
// FERRY_TRANSPORTS is reported once rather than at every communicator.
const AllowedTransports& configured_transports() {
  static const AllowedTransports allowed = [] {
    std::vector<std::string> unknown;
    const AllowedTransports parsed =
        allowed_transports(params().transports, params().p2p_disable, params().shm_disable, &unknown);
    for (const std::string& name : unknown)
      FERRY_WARN(Transport, "FERRY_TRANSPORTS: unknown transport '%s' ignored (known: p2p, shm, net, none)",
                 name.c_str());
    return parsed;
  }();
  return allowed;
}

// FERRY_NET names a provider this build has (the same on every rank).
bool network_configured() {
  static const bool known = [] {
    const std::string& net = params().net;
    if (net == "auto" || net == "ib" || net == "mpi" || net == "socket") return true;
    FERRY_WARN(Transport,
               "FERRY_NET=%s: unknown network provider (known: auto, ib, mpi, socket); device buffers will be staged "
               "between machines",
               net.c_str());
    return false;
  }();
  return known;
}

}  // namespace

PeerGroup::PeerGroup(std::unique_ptr<Bootstrap> bootstrap)
    : bootstrap_(std::move(bootstrap)),
      transports_(configured_transports(), gpu::active_backend(), static_cast<std::size_t>(params().shm_segment_bytes),
                  static_cast<std::size_t>(params().net_chunk_bytes), static_cast<int>(params().net_chunks)) {}

Status PeerGroup::create(std::unique_ptr<Bootstrap> bootstrap, std::unique_ptr<PeerGroup>* out) {
  if (!bootstrap) return Status::kUnavailable;
  std::unique_ptr<PeerGroup> group(new PeerGroup(std::move(bootstrap)));
  FERRY_CHECK(group->connect());
  *out = std::move(group);
  return Status::kOk;
}

Status PeerGroup::connect() {
  gpu::Backend* backend = gpu::active_backend();
  const int n = size();
  const RankIdentity mine = this_rank_identity();
  ranks_.resize(n);
  FERRY_CHECK(bootstrap_->allgather(&mine, ranks_.data(), sizeof(mine)));
  const std::vector<RankIdentity>& ranks = ranks_;
  std::vector<std::int32_t> local_pids(n, 0);
  for (int r = 0; r < n; ++r)
    if (r != rank() && same_machine(ranks[r], mine)) local_pids[r] = ranks[r].pid;
  bootstrap_->watch_peers(local_pids);
  if (std::any_of(local_pids.begin(), local_pids.end(), [](std::int32_t pid) { return pid != 0; }))
    watch_ = std::make_unique<PeerWatch>(local_pids);

  // Peer memory maps between ranks of one machine with one device backend
  // (on NVLink or PCIe peer access CUDA IPC maps too; the driver enables
  // peer access lazily when the mapping is opened); host shared memory
  // serves where the topology says peer access is not worth it or p2p is off.
  const SystemGraph* topology = n > 1 ? topology_for(backend) : nullptr;
  TransportTable& table = transports_;
  table.plan(rank(), ranks, topology);
  constexpr std::int32_t kAllP2p = 1, kAllLocal = 2, kAllReached = 4;
  std::int32_t verdict = kAllP2p | kAllLocal | kAllReached;
  for (int peer = 0; peer < n; ++peer) {
    if (peer == rank()) continue;
    if (table.to(peer) != &table.p2p()) verdict &= ~kAllP2p;
    if (!table.to(peer) || table.to(peer) == &table.net()) verdict &= ~kAllLocal;
    if (!table.to(peer)) verdict &= ~kAllReached;
    FERRY_TRACE(Transport, "peer %d: %s", peer, table.name_to(peer));
  }
  // Each process has its own topology (one rank's file may not load), so
  // the ranks agree: the collective set-up below is entered by all or none.
  std::vector<std::int32_t> verdicts(n);
  FERRY_CHECK(bootstrap_->allgather(&verdict, verdicts.data(), sizeof(verdict)));
  for (std::int32_t v : verdicts) verdict &= v;

  // Per-call handshakes through host shared memory where every rank shares
  // this machine (the planned transports do not matter: the handshake needs
  // only host memory).
  if (ranks_on_one_machine(ranks) && n > 1) {
    const Status status = ShmBootstrap::wrap(&bootstrap_);
    if (!ok(status))
      FERRY_INFO(Bootstrap, "handshakes stay on the set-up bootstrap: no shared memory between the ranks (%s)",
                 status_name(status));
    bootstrap_->watch_peers(local_pids);
  }

  // Across machines: the network, where every peer is reached by some
  // transport (the collectives go by machine: hierarchy.h).
  if (table.uses_net() && (verdict & kAllReached) && network_configured()) {
    const Status status = table.net().connect(*bootstrap_);
    if (ok(status))
      net_ = &table.net();
    else
      FERRY_WARN(Transport, "net transport unavailable (%s): device buffers will be staged between machines",
                 status_name(status));
  }

  if (n > 1 && (verdict & kAllP2p)) {
    common_ = &table.p2p();
  } else if (n > 1 && (verdict & kAllLocal)) {
    const Status status = table.shm().connect(*bootstrap_);
    if (ok(status))
      common_ = &table.shm();
    else
      FERRY_WARN(Transport, "shm transport unavailable (%s): device buffers will be staged", status_name(status));
  }
  FERRY_INFO(Init, "engine communicator of %d ranks (topology: %s): %s", n,
             topology ? local_topology().source.c_str() : "none",
             all_peers_mapped() ? "every peer mapped (p2p)"
             : shm()            ? "peers through host shared memory (shm)"
             : net_             ? "peers of other machines over the network (net)"
                                : "no engine transport to every peer");
  return Status::kOk;
}

}  // namespace ferry

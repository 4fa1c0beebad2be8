// The net transport's ib provider (net.h): reliable-connected queue pairs of
// rdma-core's verbs between every pair of ranks, on InfiniBand or RoCE.
// Messages move by RDMA write straight into the receive's buffer, as
// ib_wire.h describes; buffers are registered once and kept
// (registration_cache.h). libibverbs is opened at run time (ib_verbs.h).
//
// Set-up (make_ib_network, collective over the bootstrap): each rank takes
// one active port FERRY_IB_HCA chooses, the nearest its GPU where the
// topology says (rank modulo their number among equals), makes
// FERRY_IB_QPS queue pairs to every other rank, and the ranks exchange their
// addresses and queue-pair numbers in two allgathers; every queue pair is
// then brought to RTS and given its receive slots. All ranks leave with the
// same answer: where any rank has no port or fails a step, every rank
// returns kUnavailable (the failing one its own status).
//
// Device memory (GPUDirect RDMA): a message's device memory is registered
// with the RDMA device for as long as the message moves (dma-buf from the
// device backend, else ibv_reg_mr on the device address, which needs the
// GPU vendor's peer-memory module); where neither works the net transport
// stages it through pinned host chunks as for the other providers.
//
// Progress: no thread of its own; every post and test() polls the one
// completion queue, as the socket provider does. A completion in error
// (the peer's process or link is gone: the device's retries ran out) fails
// every operation with that peer in kPeerEnded, with a WARN naming it.
//
// Not run on hardware yet: no machine of this project has an RDMA device;
// what runs without one (the work requests, queue-pair attributes, endpoint
// checks, matching and registration cache) is unit-tested.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "engine/bootstrap/bootstrap.h"
#include "engine/transport/net.h"

namespace ferry {

struct IbVerbs;

struct IbNetworkOptions {
  std::string hca;      // FERRY_IB_HCA
  int queue_pairs = 2;  // FERRY_IB_QPS, 1 .. kIbMaxQueuePairs
  int gid_index = 0;    // FERRY_IB_GID_INDEX (RoCE)
  bool gpudirect = true;  // FERRY_IB_GPUDIRECT: device memory registered with the device
  // The ports nearest this rank's GPU in the topology ("device:port"); the
  // rank takes one of them where FERRY_IB_HCA allows (pick_ib_port), any
  // allowed port otherwise.
  std::vector<std::string> nearest;
  // Whether this provider was asked for by name: its absence is then
  // WARNed, not only logged (FERRY_NET=auto tries it quietly).
  bool asked_for = true;
  // The verbs to call; nullptr: libibverbs (a test's software device
  // otherwise).
  const IbVerbs* verbs = nullptr;
  static IbNetworkOptions from_params();
};

Status make_ib_network(Bootstrap& bootstrap, std::unique_ptr<NetProvider>* out,
                       const IbNetworkOptions& options = IbNetworkOptions::from_params());

// Whether this rank has a port the ib provider would use, and if not why
// ("no RDMA device", what FERRY_IB_HCA chose from what there is); the
// devices are looked at once a process.
bool ib_port_here(std::string* why);

}  // namespace ferry

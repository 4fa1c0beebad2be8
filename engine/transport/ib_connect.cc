// The ib provider's set-up (ib_network.h): the device, its queue pairs
// and their joining, collective over the bootstrap.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <random>
#include <utility>

#include "engine/bootstrap/verdict.h"
#include "engine/common/log.h"
#include "engine/common/params.h"
#include "engine/transport/ib_network_impl.h"

namespace ferry {
namespace ib_detail {

Status IbNetwork::open_here(IbEndpoint* mine, std::string* why) {
  *mine = IbEndpoint{};
  verbs_ = options_.verbs ? options_.verbs : ib_verbs(why);
  if (!verbs_) return Status::kUnavailable;
  std::vector<IbPort> ports = ib_ports(*verbs_, why);
  if (ports.empty()) return Status::kUnavailable;
  std::vector<IbPort> chosen = choose_ib_ports(ports, options_.hca, why);
  if (chosen.empty()) return Status::kUnavailable;
  bool nearest = false;
  const IbPort& port = pick_ib_port(chosen, options_.nearest, rank_, &nearest);
  FERRY_INFO(Transport, "ib: rank %d takes %s:%d (%s)", rank_, port.device.c_str(), port.port,
             nearest                   ? "nearest its GPU"
             : options_.nearest.empty() ? "the topology names no port nearest its GPU"
                                        : "FERRY_IB_HCA allows none of those nearest its GPU");
  port_ = static_cast<std::uint8_t>(port.port);

  int count = 0;
  ibv_device** devices = verbs_->get_device_list(&count);
  for (int d = 0; devices && d < count && !context_; ++d)
    if (port.device == verbs_->get_device_name(devices[d])) context_ = verbs_->open_device(devices[d]);
  if (devices) verbs_->free_device_list(devices);
  auto failed = [&](const char* step) {
    *why = std::string(step) + " failed on " + port.device + " (" + std::strerror(errno) + ")";
    return Status::kUnavailable;
  };
  if (!context_) return failed("ibv_open_device");
  ibv_port_attr port_attr{};
  if (verbs_->query_port(context_, port_, &port_attr) != 0) return failed("ibv_query_port");
  ibv_gid gid{};
  if (verbs_->query_gid(context_, port_, gid_index_, &gid) != 0) return failed("ibv_query_gid");
  piece_bytes_ = std::min<std::size_t>(kMaxPieceBytes, port_attr.max_msg_sz ? port_attr.max_msg_sz : kMaxPieceBytes);
  if (!(pd_ = verbs_->alloc_pd(context_))) return failed("ibv_alloc_pd");
  const int total = size_ * queue_pairs_;
  if (!(cq_ = verbs_->create_cq(context_, std::max(total, 1) * (kSendDepth + kSlotsPerQueuePair), nullptr, nullptr, 0)))
    return failed("ibv_create_cq");

  qps_.resize(static_cast<std::size_t>(total));
  for (int peer = 0; peer < size_; ++peer) {
    if (peer == rank_) continue;
    for (int q = 0; q < queue_pairs_; ++q) {
      ibv_qp_init_attr init{};
      init.send_cq = cq_;
      init.recv_cq = cq_;
      init.cap.max_send_wr = kSendDepth;
      init.cap.max_recv_wr = kSlotsPerQueuePair;
      init.cap.max_send_sge = 1;
      init.cap.max_recv_sge = 1;
      init.cap.max_inline_data = sizeof(IbControl);
      init.qp_type = IBV_QPT_RC;
      QueuePair& qp = qps_[index(peer, q)];
      qp.peer = peer;
      if (!(qp.qp = verbs_->create_qp(pd_, &init))) return failed("ibv_create_qp");
      IbQpStep step = qp_to_init(port_);
      if (verbs_->modify_qp(qp.qp, &step.attr, step.mask) != 0) return failed("ibv_modify_qp to INIT");
      peer_of_qpn_[qp.qp->qp_num] = peer;
    }
  }
  const std::size_t slab = std::max<std::size_t>(qps_.size() * kSlotsPerQueuePair * kIbControlSlotBytes, 4096);
  slots_ = static_cast<char*>(std::aligned_alloc(4096, (slab + 4095) / 4096 * 4096));
  if (!slots_) return Status::kOutOfMemory;
  if (!(slots_mr_ = verbs_->reg_mr(pd_, slots_, slab, IBV_ACCESS_LOCAL_WRITE))) return failed("ibv_reg_mr");
  registrar_ = std::make_unique<DomainRegistrar>(*verbs_, pd_);
  cache_ = std::make_unique<RegistrationCache>(*registrar_, kCachedRanges, static_cast<std::size_t>(getpagesize()));
  next_qp_.assign(static_cast<std::size_t>(size_), 0);
  ended_.assign(static_cast<std::size_t>(size_), false);

  *mine = make_ib_endpoint();
  mine->queue_pairs = static_cast<std::uint16_t>(queue_pairs_);
  mine->psn = std::random_device{}() & 0xFFFFFF;
  mine->lid = port_attr.lid;
  mine->port = port_;
  mine->ethernet = port_attr.link_layer == IBV_LINK_LAYER_ETHERNET;
  std::memcpy(mine->gid, gid.raw, sizeof(mine->gid));
  mine->gid_index = gid_index_;
  mine->mtu_bytes = static_cast<std::uint32_t>(port.mtu_bytes);
  return Status::kOk;
}

Status IbNetwork::connect(const std::vector<IbEndpoint>& addresses, const std::vector<std::uint32_t>& qpns) {
  const IbEndpoint& self = addresses[rank_];
  for (int peer = 0; peer < size_; ++peer) {
    if (peer == rank_) continue;
    IbEndpoint endpoint = addresses[peer];
    for (int q = 0; q < queue_pairs_; ++q)
      endpoint.qpn[q] = qpns[(static_cast<std::size_t>(peer) * size_ + rank_) * queue_pairs_ + q];
    const char* why = "";
    if (!ok(check_ib_endpoint(endpoint, self.ethernet != 0, &why)) || endpoint.queue_pairs != queue_pairs_) {
      FERRY_WARN(Transport, "ib network: rank %d's endpoint cannot be joined: %s", peer,
                 endpoint.queue_pairs != queue_pairs_ ? "another FERRY_IB_QPS" : why);
      return Status::kInvalidArgument;
    }
    for (int q = 0; q < queue_pairs_; ++q) {
      ibv_qp* qp = qps_[index(peer, q)].qp;
      IbQpStep rtr = qp_to_ready_to_receive(endpoint, endpoint.qpn[q], common_mtu(self, endpoint), port_, gid_index_);
      IbQpStep rts = qp_to_ready_to_send(self.psn);
      if (verbs_->modify_qp(qp, &rtr.attr, rtr.mask) != 0 || verbs_->modify_qp(qp, &rts.attr, rts.mask) != 0) {
        FERRY_WARN(Transport, "ib network: joining queue pair %d with rank %d failed (%s)", q, peer,
                   std::strerror(errno));
        return Status::kUnavailable;
      }
      for (int s = 0; s < kSlotsPerQueuePair; ++s) FERRY_CHECK(post_slot(index(peer, q) * kSlotsPerQueuePair + s));
    }
  }
  return Status::kOk;
}

}  // namespace ib_detail

IbNetworkOptions IbNetworkOptions::from_params() {
  IbNetworkOptions options;
  options.hca = params().ib_hca;
  options.queue_pairs = static_cast<int>(params().ib_qps);
  options.gid_index = static_cast<int>(params().ib_gid_index);
  options.gpudirect = params().ib_gpudirect;
  options.asked_for = params().net == "ib";
  return options;
}

bool ib_port_here(std::string* why) {
  // Asked more than once at MPI_Init (the provider auto takes, the settings'
  // check): the devices are opened and queried once.
  static const std::pair<bool, std::string> answer = [] {
    std::string reason;
    std::vector<IbPort> ports = ib_ports(&reason);
    const bool chosen = !ports.empty() && !choose_ib_ports(ports, params().ib_hca, &reason).empty();
    return std::make_pair(chosen, reason);
  }();
  if (why) *why = answer.second;
  return answer.first;
}

Status make_ib_network(Bootstrap& bootstrap, std::unique_ptr<NetProvider>* out, const IbNetworkOptions& options) {
  const int rank = bootstrap.rank(), size = bootstrap.size();
  auto network = std::make_unique<ib_detail::IbNetwork>(rank, size, options);
  IbEndpoint mine;
  std::string why;
  const Status opened = network->open_here(&mine, &why);
  std::vector<IbEndpoint> addresses(static_cast<std::size_t>(size));
  FERRY_CHECK(bootstrap.allgather(&mine, addresses.data(), sizeof(mine)));
  for (int r = 0; r < size; ++r) {
    if (addresses[r].magic == kIbEndpointMagic) continue;
    if (r == rank && options.asked_for) FERRY_WARN(Transport, "ib network: %s", why.c_str());
    if (r == rank && !options.asked_for) FERRY_INFO(Transport, "ib network: %s", why.c_str());
    if (r != rank && options.asked_for)
      FERRY_WARN(Transport, "ib network: rank %d of %d has no usable RDMA port (see its log)", r, size);
    return r == rank && !ok(opened) ? opened : Status::kUnavailable;
  }
  // Each rank's queue-pair numbers towards every peer (0 towards itself).
  const int qps = network->queue_pairs();
  std::vector<std::uint32_t> my_qpns(static_cast<std::size_t>(size) * qps, 0);
  for (int peer = 0; peer < size; ++peer)
    for (int q = 0; q < qps && peer != rank; ++q)
      my_qpns[static_cast<std::size_t>(peer) * qps + q] = network->qpn(peer, q);
  std::vector<std::uint32_t> qpns(my_qpns.size() * size);
  FERRY_CHECK(bootstrap.allgather(my_qpns.data(), qpns.data(), my_qpns.size() * sizeof(std::uint32_t)));
  FERRY_CHECK(agree_on_setup(bootstrap, network->connect(addresses, qpns), "ib network",
                             "could not join its queue pairs"));
  FERRY_INFO(Transport, "ib network: rank %d on port %d, %d queue pairs a peer, MTU %u", rank, mine.port, qps,
             mine.mtu_bytes);
  *out = std::move(network);
  return Status::kOk;
}

}  // namespace ferry

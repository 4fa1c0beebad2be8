#include "engine/transport/ib_network.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <random>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "engine/common/log.h"
#include "engine/common/params.h"
#include "engine/transport/ib_verbs.h"
#include "engine/transport/ib_wire.h"
#include "engine/transport/registration_cache.h"

namespace ferry {
namespace {

constexpr int kSlotsPerQueuePair = 64;  // control records and data arrivals a queue pair can take unpolled
constexpr int kSendDepth = 128;         // work requests a queue pair has posted at once
constexpr std::size_t kMaxPieceBytes = std::size_t{1} << 30;
constexpr std::size_t kCachedRanges = 1024;

// What a completion's wr_id names: its kind in the top byte.
enum WorkKind : std::uint64_t { kDataWork = 1, kControlWork = 2, kSlotWork = 3 };
std::uint64_t work_id(WorkKind kind, std::uint64_t value) { return (std::uint64_t{kind} << 56) | value; }
WorkKind kind_of(std::uint64_t wr_id) { return static_cast<WorkKind>(wr_id >> 56); }
std::uint64_t value_of(std::uint64_t wr_id) { return wr_id & ((std::uint64_t{1} << 56) - 1); }

// What a NetRequest holds here.
struct Op {
  bool send;
  int peer;
  int tag;
  char* data;
  std::size_t bytes;
  const Registration* registration = nullptr;  // from the cache (remembered memory)
  Registration own{};                          // else registered for this message alone
  IbControl control{};  // a receive's record; a send's receive's, once it came
  bool posted = false;  // a send's data (or refusal) is with the device
  bool refused = false;
  int queue_pair = -1;
  std::size_t pieces = 0;
  bool done = false;
  bool orphan = false;  // cancelled while the device may still use its memory
  Status failed = Status::kOk;
};

// What waits for room in a queue pair's send queue, in posting order.
struct Outgoing {
  Op* op;              // its data, or (refused) its refusal
  IbControl control;   // without op: a clear-to-send record
};

struct QueuePair {
  ibv_qp* qp = nullptr;
  int peer = -1;
  int in_flight = 0;  // send-queue slots taken
  std::deque<Outgoing> backlog;
};

// The protection domain as the registration cache's registrar: host memory
// (the net transport's pinned chunks) by ibv_reg_mr.
class DomainRegistrar final : public Registrar {
 public:
  DomainRegistrar(const IbVerbs& verbs, ibv_pd* pd) : verbs_(verbs), pd_(pd) {}
  Status register_range(Registration* range) override {
    ibv_mr* mr = verbs_.reg_mr(pd_, reinterpret_cast<void*>(range->base), range->bytes,
                               IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    if (!mr) {
      FERRY_WARN(Transport, "ib network: registering %zu bytes failed (%s)", range->bytes, std::strerror(errno));
      return Status::kOutOfMemory;
    }
    range->lkey = mr->lkey;
    range->rkey = mr->rkey;
    range->handle = mr;
    return Status::kOk;
  }
  void deregister_range(const Registration& range) override { verbs_.dereg_mr(static_cast<ibv_mr*>(range.handle)); }

 private:
  const IbVerbs& verbs_;
  ibv_pd* pd_;
};

class IbNetwork final : public NetProvider {
 public:
  IbNetwork(int rank, int size, const IbNetworkOptions& options)
      : rank_(rank), size_(size), queue_pairs_(std::clamp(options.queue_pairs, 1, kIbMaxQueuePairs)),
        gid_index_(static_cast<std::uint8_t>(std::clamp(options.gid_index, 0, 255))), options_(options) {}

  ~IbNetwork() override {
    for (QueuePair& q : qps_)
      if (q.qp) verbs_->destroy_qp(q.qp);
    for (Op* op : ops_) unregister(op);
    for (Op* op : ops_) delete op;
    cache_.reset();
    if (slots_mr_) verbs_->dereg_mr(slots_mr_);
    std::free(slots_);
    if (cq_) verbs_->destroy_cq(cq_);
    if (pd_) verbs_->dealloc_pd(pd_);
    if (context_) verbs_->close_device(context_);
  }

  // This rank's device, domain, completion queue and queue pairs (in INIT),
  // and its address in *mine (magic left 0 on failure).
  Status open_here(IbEndpoint* mine, std::string* why);
  // Joins every queue pair to its peer's from the exchanged addresses and
  // numbers (qpns: by rank, then peer, then queue pair), and posts the
  // receive slots.
  Status connect(const std::vector<IbEndpoint>& addresses, const std::vector<std::uint32_t>& qpns);
  std::uint32_t qpn(int peer, int q) const { return qps_[index(peer, q)].qp->qp_num; }
  int queue_pairs() const { return queue_pairs_; }

  const char* name() const override { return "ib"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  Status post_send(int peer, int tag, const void* data, std::size_t bytes, NetRequest* request) override;
  Status post_recv(int peer, int tag, void* data, std::size_t bytes, NetRequest* request) override;
  Status test(NetRequest* request, bool* done) override;
  void cancel(NetRequest* request) override;
  void remember_memory(const void* data, std::size_t bytes) override {
    remembered_.push_back({reinterpret_cast<std::uintptr_t>(data), bytes});
  }
  void forget_memory(const void* data, std::size_t bytes) override {
    const auto base = reinterpret_cast<std::uintptr_t>(data);
    remembered_.erase(std::remove_if(remembered_.begin(), remembered_.end(),
                                     [&](const auto& r) { return r.first < base + bytes && base < r.first + r.second; }),
                      remembered_.end());
    cache_->invalidate(data, bytes);
  }

 private:
  std::size_t index(int peer, int q) const { return static_cast<std::size_t>(peer) * queue_pairs_ + q; }
  bool remembered(const void* data, std::size_t bytes) const {
    const auto base = reinterpret_cast<std::uintptr_t>(data);
    for (const auto& r : remembered_)
      if (r.first <= base && bytes <= r.second && base - r.first <= r.second - bytes) return true;
    return false;
  }
  std::uint32_t lkey_of(const Op* op) const { return op->registration ? op->registration->lkey : op->own.lkey; }
  std::uint32_t rkey_of(const Op* op) const { return op->registration ? op->registration->rkey : op->own.rkey; }
  bool valid(int peer, int tag) const { return peer >= 0 && peer < size_ && peer != rank_ && tag >= 0; }
  Op* new_op(bool send, int peer, int tag, const void* data, std::size_t bytes, Status* status);
  void unregister(Op* op);
  void release(Op* op);
  // Queues out on queue pair q and posts what fits.
  Status submit(int q, const Outgoing& out);
  Status post_outgoing(int q, const Outgoing& out);
  Status drain(int q);
  Status start_send(Op* op);
  Status progress();
  Status on_completion(const ibv_wc& wc);
  Status on_control(int peer, const IbControl& control);
  Status post_slot(std::size_t slot);
  void end_peer(int peer, int completion_status);

  int rank_, size_, queue_pairs_;
  std::uint8_t gid_index_;
  IbNetworkOptions options_;
  const IbVerbs* verbs_ = nullptr;
  ibv_context* context_ = nullptr;
  ibv_pd* pd_ = nullptr;
  ibv_cq* cq_ = nullptr;
  std::uint8_t port_ = 1;
  std::size_t piece_bytes_ = kMaxPieceBytes;
  std::vector<QueuePair> qps_;  // by peer, then queue pair; none to itself
  std::unordered_map<std::uint32_t, int> peer_of_qpn_;
  char* slots_ = nullptr;
  ibv_mr* slots_mr_ = nullptr;
  std::unique_ptr<DomainRegistrar> registrar_;
  std::unique_ptr<RegistrationCache> cache_;
  std::vector<std::pair<std::uintptr_t, std::size_t>> remembered_;
  IbMatcher matcher_;
  std::unordered_set<Op*> ops_;
  std::unordered_map<std::uint32_t, Op*> receives_;  // by id, until their data lands
  std::uint32_t next_receive_ = 1;
  std::vector<std::size_t> next_qp_;  // by peer: data takes its queue pairs in turn
  std::vector<bool> ended_;
};

Status IbNetwork::open_here(IbEndpoint* mine, std::string* why) {
  *mine = IbEndpoint{};
  verbs_ = ib_verbs(why);
  if (!verbs_) return Status::kUnavailable;
  std::vector<IbPort> chosen = choose_ib_ports(ib_ports(why), options_.hca, why);
  if (chosen.empty()) return Status::kUnavailable;
  const IbPort& port = chosen[static_cast<std::size_t>(rank_) % chosen.size()];
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

Status IbNetwork::post_slot(std::size_t slot) {
  IbReceive receive;
  make_slot_receive(slots_ + slot * kIbControlSlotBytes, slots_mr_->lkey, work_id(kSlotWork, slot), &receive);
  ibv_recv_wr* bad = nullptr;
  const int rc = ibv_post_recv(qps_[slot / kSlotsPerQueuePair].qp, &receive.wr, &bad);
  if (rc == 0) return Status::kOk;
  FERRY_WARN(Transport, "ib network: posting a receive slot failed (%s)", std::strerror(rc));
  return Status::kInternal;
}

Op* IbNetwork::new_op(bool send, int peer, int tag, const void* data, std::size_t bytes, Status* status) {
  *status = Status::kOk;
  if (!valid(peer, tag) || (bytes > 0 && !data)) {
    *status = Status::kInvalidArgument;
    return nullptr;
  }
  if (ended_[peer]) {
    *status = Status::kPeerEnded;
    return nullptr;
  }
  auto* op = new Op{send, peer, tag, static_cast<char*>(const_cast<void*>(data)), bytes};
  if (bytes > 0 && remembered(data, bytes)) {
    *status = cache_->acquire(data, bytes, false, &op->registration);
  } else if (bytes > 0) {
    op->own.base = reinterpret_cast<std::uintptr_t>(data);
    op->own.bytes = bytes;
    *status = registrar_->register_range(&op->own);
  }
  if (!ok(*status)) {
    delete op;
    return nullptr;
  }
  ops_.insert(op);
  return op;
}

void IbNetwork::unregister(Op* op) {
  if (op->registration) cache_->release(op->registration);
  if (op->own.handle) registrar_->deregister_range(op->own);
  op->registration = nullptr;
  op->own = Registration{};
}

void IbNetwork::release(Op* op) {
  unregister(op);
  ops_.erase(op);
  delete op;
}

Status IbNetwork::post_send(int peer, int tag, const void* data, std::size_t bytes, NetRequest* request) {
  Status status;
  Op* op = new_op(true, peer, tag, data, bytes, &status);
  if (!op) return status;
  request->handle = op;
  if (matcher_.add_send(peer, tag, op, &op->control)) FERRY_CHECK(start_send(op));
  return progress();
}

Status IbNetwork::post_recv(int peer, int tag, void* data, std::size_t bytes, NetRequest* request) {
  Status status;
  Op* op = new_op(false, peer, tag, data, bytes, &status);
  if (!op) return status;
  request->handle = op;
  const std::uint32_t id = next_receive_++;
  receives_[id] = op;
  op->control = IbControl{kIbClearToSend, tag, matcher_.next_receive(peer, tag), bytes,
                          reinterpret_cast<std::uintptr_t>(data), rkey_of(op), id};
  const int q = static_cast<int>(index(peer, static_cast<int>(next_qp_[peer]++ % queue_pairs_)));
  FERRY_CHECK(submit(q, Outgoing{nullptr, op->control}));
  return progress();
}

Status IbNetwork::start_send(Op* op) {
  if (op->control.bytes != op->bytes) {
    FERRY_WARN(Transport, "ib network: rank %d sends %zu bytes on tag %d, its receive at rank %d takes %llu", rank_,
               op->bytes, op->tag, op->peer, static_cast<unsigned long long>(op->control.bytes));
    op->refused = true;
  }
  op->queue_pair = static_cast<int>(index(op->peer, static_cast<int>(next_qp_[op->peer]++ % queue_pairs_)));
  return submit(op->queue_pair, Outgoing{op, {}});
}

Status IbNetwork::submit(int q, const Outgoing& out) {
  qps_[q].backlog.push_back(out);
  return drain(q);
}

Status IbNetwork::drain(int q) {
  QueuePair& qp = qps_[q];
  if (ended_[qp.peer]) qp.backlog.clear();  // its operations have failed
  while (!qp.backlog.empty()) {
    const Outgoing& out = qp.backlog.front();
    const bool data = out.op && !out.op->refused;
    const int slots = data ? static_cast<int>(data_pieces(out.op->bytes, piece_bytes_)) : 1;
    if (qp.in_flight + slots > kSendDepth) break;
    FERRY_CHECK(post_outgoing(q, out));
    qp.in_flight += slots;
    qp.backlog.pop_front();
  }
  return Status::kOk;
}

Status IbNetwork::post_outgoing(int q, const Outgoing& out) {
  ibv_qp* qp = qps_[q].qp;
  ibv_send_wr* bad = nullptr;
  int rc = 0;
  if (!out.op || out.op->refused) {
    IbControl control = out.control;
    if (out.op) {
      control = out.op->control;
      control.kind = kIbRefuse;
      control.bytes = out.op->bytes;
      out.op->posted = true;
      out.op->pieces = 1;
    }
    IbSend send;
    make_control_send(&control, work_id(kControlWork, out.op ? reinterpret_cast<std::uintptr_t>(out.op) : 0), &send);
    rc = ibv_post_send(qp, &send.wr, &bad);
  } else {
    Op* op = out.op;
    op->pieces = data_pieces(op->bytes, piece_bytes_);
    op->posted = true;
    const std::uint32_t lkey = lkey_of(op);
    for (std::size_t piece = 0; piece < op->pieces && rc == 0; ++piece) {
      IbSend send;
      make_data_write(op->data, op->bytes, lkey, op->control, piece_bytes_, piece,
                      work_id(kDataWork, reinterpret_cast<std::uintptr_t>(op)), &send);
      rc = ibv_post_send(qp, &send.wr, &bad);
    }
  }
  if (rc == 0) return Status::kOk;
  FERRY_WARN(Transport, "ib network: posting to rank %d failed (%s)", qps_[q].peer, std::strerror(rc));
  return Status::kInternal;
}

Status IbNetwork::progress() {
  ibv_wc completions[32];
  for (;;) {
    const int n = ibv_poll_cq(cq_, 32, completions);
    if (n < 0) return Status::kInternal;
    for (int i = 0; i < n; ++i) FERRY_CHECK(on_completion(completions[i]));
    if (n < 32) break;
  }
  for (std::size_t q = 0; q < qps_.size(); ++q)
    if (!qps_[q].backlog.empty()) FERRY_CHECK(drain(static_cast<int>(q)));
  return Status::kOk;
}

Status IbNetwork::on_completion(const ibv_wc& wc) {
  auto found = peer_of_qpn_.find(wc.qp_num);
  const int peer = found == peer_of_qpn_.end() ? -1 : found->second;
  if (wc.status != IBV_WC_SUCCESS) {
    if (peer >= 0 && !ended_[peer])
      end_peer(peer, static_cast<int>(wc.status));
    return Status::kOk;
  }
  const WorkKind kind = kind_of(wc.wr_id);
  if (kind == kDataWork || (kind == kControlWork && value_of(wc.wr_id) != 0)) {
    // A send's data (or refusal) has left: its memory is free again.
    Op* op = reinterpret_cast<Op*>(value_of(wc.wr_id));
    qps_[op->queue_pair].in_flight -= static_cast<int>(op->pieces);
    if (op->refused) op->failed = Status::kInvalidArgument;
    op->done = true;
    if (op->orphan) release(op);
    return Status::kOk;
  }
  if (kind == kControlWork) {
    if (peer >= 0)
      for (int q = 0; q < queue_pairs_; ++q)
        if (qps_[index(peer, q)].qp->qp_num == wc.qp_num) --qps_[index(peer, q)].in_flight;
    return Status::kOk;
  }
  const std::size_t slot = value_of(wc.wr_id);
  if (wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
    auto arrived = receives_.find(receive_of(wc.imm_data));
    if (arrived != receives_.end()) {
      Op* op = arrived->second;
      receives_.erase(arrived);
      op->done = true;
      if (op->orphan) release(op);
    }
  } else if (wc.byte_len == sizeof(IbControl) && peer >= 0) {
    IbControl control;
    std::memcpy(&control, slots_ + slot * kIbControlSlotBytes, sizeof(control));
    FERRY_CHECK(on_control(peer, control));
  }
  return post_slot(slot);
}

Status IbNetwork::on_control(int peer, const IbControl& control) {
  if (control.kind == kIbRefuse) {
    auto refused = receives_.find(control.receive);
    if (refused == receives_.end()) return Status::kOk;
    Op* op = refused->second;
    receives_.erase(refused);
    FERRY_WARN(Transport, "ib network: rank %d sent %llu bytes on tag %d, its receive at rank %d takes %zu", peer,
               static_cast<unsigned long long>(control.bytes), op->tag, rank_, op->bytes);
    op->failed = Status::kInvalidArgument;
    op->done = true;
    if (op->orphan) release(op);
    return Status::kOk;
  }
  if (control.kind != kIbClearToSend) {
    FERRY_WARN(Transport, "ib network: a control message of unknown kind 0x%x from rank %d dropped", control.kind, peer);
    return Status::kOk;
  }
  auto* op = static_cast<Op*>(matcher_.add_control(peer, control));
  if (!op) return Status::kOk;
  op->control = control;
  return start_send(op);
}

void IbNetwork::end_peer(int peer, int completion_status) {
  ended_[peer] = true;
  FERRY_WARN(Transport, "ib network: the connection to rank %d ended (completion status %d): its operations fail",
             peer, completion_status);
  for (Op* op : ops_)
    if (op->peer == peer && !op->done) op->failed = Status::kPeerEnded;
}

Status IbNetwork::test(NetRequest* request, bool* done) {
  auto* op = static_cast<Op*>(request->handle);
  if (!op) return Status::kInvalidArgument;
  *done = false;
  if (!op->done && ok(op->failed)) FERRY_CHECK(progress());
  if (!ok(op->failed)) return op->failed;
  if (!op->done) return Status::kOk;
  *done = true;
  request->handle = nullptr;
  release(op);
  return Status::kOk;
}

void IbNetwork::cancel(NetRequest* request) {
  auto* op = static_cast<Op*>(request->handle);
  if (!op) return;
  request->handle = nullptr;
  if (op->send && !op->posted && op->queue_pair < 0) matcher_.forget_send(op);
  if (op->send && !op->posted && op->queue_pair >= 0) {
    std::deque<Outgoing>& backlog = qps_[op->queue_pair].backlog;
    backlog.erase(std::remove_if(backlog.begin(), backlog.end(), [&](const Outgoing& o) { return o.op == op; }),
                  backlog.end());
  }
  // The device may still read (a posted send) or write (a receive whose
  // record has gone out) its memory: kept until that ends or the network
  // closes.
  const bool device_holds = !op->done && !ended_[op->peer] && (op->send ? op->posted : true);
  if (!device_holds) {
    if (!op->send)
      for (auto it = receives_.begin(); it != receives_.end(); ++it)
        if (it->second == op) {
          receives_.erase(it);
          break;
        }
    release(op);
    return;
  }
  op->orphan = true;
}

}  // namespace

IbNetworkOptions IbNetworkOptions::from_params() {
  IbNetworkOptions options;
  options.hca = params().ib_hca;
  options.queue_pairs = static_cast<int>(params().ib_qps);
  options.gid_index = static_cast<int>(params().ib_gid_index);
  options.asked_for = params().net == "ib";
  return options;
}

bool ib_port_here(std::string* why) {
  std::vector<IbPort> ports = ib_ports(why);
  if (ports.empty()) return false;
  return !choose_ib_ports(ports, params().ib_hca, why).empty();
}

Status make_ib_network(Bootstrap& bootstrap, std::unique_ptr<NetProvider>* out, const IbNetworkOptions& options) {
  const int rank = bootstrap.rank(), size = bootstrap.size();
  auto network = std::make_unique<IbNetwork>(rank, size, options);
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
    for (int q = 0; q < qps && peer != rank; ++q) my_qpns[static_cast<std::size_t>(peer) * qps + q] = network->qpn(peer, q);
  std::vector<std::uint32_t> qpns(my_qpns.size() * size);
  FERRY_CHECK(bootstrap.allgather(my_qpns.data(), qpns.data(), my_qpns.size() * sizeof(std::uint32_t)));
  const Status joined = network->connect(addresses, qpns);
  const std::int32_t verdict = ok(joined) ? 0 : 1;
  std::vector<std::int32_t> verdicts(static_cast<std::size_t>(size));
  FERRY_CHECK(bootstrap.allgather(&verdict, verdicts.data(), sizeof(verdict)));
  if (!ok(joined)) return joined;
  for (int r = 0; r < size; ++r)
    if (verdicts[r]) {
      FERRY_WARN(Transport, "ib network: rank %d of %d could not join its queue pairs (see its log)", r, size);
      return Status::kUnavailable;
    }
  FERRY_INFO(Transport, "ib network: rank %d on port %d, %d queue pairs a peer, MTU %u", rank, mine.port, qps,
             mine.mtu_bytes);
  *out = std::move(network);
  return Status::kOk;
}

}  // namespace ferry

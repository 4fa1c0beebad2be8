// The ib provider's data path (ib_network.h): posting, completions,
// matching sends with their receives' records, registering memory, a
// peer's end.
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "engine/common/liveness.h"
#include "engine/common/log.h"
#include "engine/gpu/gpu.h"
#include "engine/transport/ib_network_impl.h"

namespace ferry::ib_detail {

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
  op->wire = op->data;
  const Registration* range = nullptr;
  if (const Remembered* r = bytes > 0 ? remembered(data, bytes) : nullptr) {
    // Within a range the caller keeps: the whole range registered once.
    *status = cache_->acquire(reinterpret_cast<const void*>(r->base), r->bytes, r->device, &op->registration);
    range = op->registration;
  } else if (bytes > 0) {
    op->own.base = reinterpret_cast<std::uintptr_t>(data);
    op->own.bytes = bytes;
    op->own.device = gpu::classify(data).kind == gpu::MemoryKind::kDevice;
    *status = registrar_->register_range(&op->own);
    range = &op->own;
  }
  if (!ok(*status)) {
    delete op;
    return nullptr;
  }
  if (range && range->wire)
    op->wire = reinterpret_cast<char*>(range->wire + (op->wire - reinterpret_cast<char*>(range->base)));
  ops_.insert(op);
  return op;
}

bool IbNetwork::remember_device_memory(const void* data, std::size_t bytes) {
  if (!options_.gpudirect || gpudirect_failed_ || bytes == 0) return false;
  const Registration* held = nullptr;
  const Status registered = cache_->acquire(data, bytes, true, &held);
  if (!ok(registered)) {
    // The device takes no device memory at all: not asked again. (Every
    // cached range held at once is only this message's problem.)
    if (registered != Status::kUnsupported) return false;
    gpudirect_failed_ = true;
    FERRY_INFO(Transport, "ib network: device memory cannot be registered with the RDMA device (no dma-buf and no "
               "peer-memory module); device messages go through pinned host memory");
    return false;
  }
  remembered_.push_back({reinterpret_cast<std::uintptr_t>(data), bytes, true, held});
  return true;
}

void IbNetwork::forget_memory(const void* data, std::size_t bytes) {
  const auto base = reinterpret_cast<std::uintptr_t>(data);
  for (auto it = remembered_.begin(); it != remembered_.end();) {
    if (it->base < base + bytes && base < it->base + it->bytes) {
      if (it->held) cache_->release(it->held);
      it = remembered_.erase(it);
    } else {
      ++it;
    }
  }
  cache_->invalidate(data, bytes);
}

Status DomainRegistrar::register_range(Registration* range) {
  constexpr int kAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
  void* base = reinterpret_cast<void*>(range->base);
  ibv_mr* mr = nullptr;
  if (range->device) {
    gpu::Backend* backend = gpu::owner_backend(gpu::classify(base));
    if (!backend) return Status::kInvalidArgument;
    int fd = -1;
    std::uint64_t offset = 0;
    if (verbs_.reg_dmabuf_mr && ok(backend->export_dmabuf(base, range->bytes, &fd, &offset))) {
      mr = verbs_.reg_dmabuf_mr(pd_, offset, range->bytes, range->base, fd, kAccess);
      ::close(fd);
    }
    if (!mr) {
      void* view = backend->host_view(base);
      mr = verbs_.reg_mr(pd_, view, range->bytes, kAccess);
      if (mr) range->wire = reinterpret_cast<std::uintptr_t>(view);
    }
  } else {
    mr = verbs_.reg_mr(pd_, base, range->bytes, kAccess);
  }
  if (!mr) {
    FERRY_TRACE(Transport, "ib network: registering %zu bytes of %s memory failed (%s)", range->bytes,
                range->device ? "device" : "host", std::strerror(errno));
    return range->device ? Status::kUnsupported : Status::kOutOfMemory;
  }
  range->lkey = mr->lkey;
  range->rkey = mr->rkey;
  range->handle = mr;
  return Status::kOk;
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
                          reinterpret_cast<std::uintptr_t>(op->wire), rkey_of(op), id};
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
      make_data_write(op->wire, op->bytes, lkey, op->control, piece_bytes_, piece,
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
    FERRY_WARN(Transport, "ib network: a control message of unknown kind 0x%x from rank %d dropped", control.kind,
               peer);
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
  note_lost_peer(peer, size());
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

}  // namespace ferry::ib_detail

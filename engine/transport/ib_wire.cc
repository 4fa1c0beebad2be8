#include "engine/transport/ib_wire.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cstring>

namespace ferry {

std::size_t data_pieces(std::size_t bytes, std::size_t piece_bytes) {
  piece_bytes = std::max<std::size_t>(piece_bytes, 1);
  return std::max<std::size_t>((bytes + piece_bytes - 1) / piece_bytes, 1);
}

void make_data_write(const void* local, std::size_t bytes, std::uint32_t lkey, const IbControl& to,
                     std::size_t piece_bytes, std::size_t piece, std::uint64_t wr_id, IbSend* out) {
  piece_bytes = std::max<std::size_t>(piece_bytes, 1);
  const std::size_t pieces = data_pieces(bytes, piece_bytes);
  const bool last = piece + 1 == pieces;
  const std::size_t offset = piece * piece_bytes;
  const std::size_t length = bytes == 0 ? 0 : std::min(piece_bytes, bytes - offset);
  std::memset(out, 0, sizeof(*out));
  out->wr.wr_id = wr_id;
  out->wr.opcode = last ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE;
  // Only the last piece is signaled: its completion frees the send queue
  // slots of the ones before it (a reliable connection completes in order).
  out->wr.send_flags = last ? IBV_SEND_SIGNALED : 0;
  if (last) out->wr.imm_data = htonl(to.receive);
  out->wr.wr.rdma.remote_addr = to.address + offset;
  out->wr.wr.rdma.rkey = to.rkey;
  if (length > 0) {
    out->sge.addr = reinterpret_cast<std::uintptr_t>(local) + offset;
    out->sge.length = static_cast<std::uint32_t>(length);
    out->sge.lkey = lkey;
    out->wr.num_sge = 1;
  }
  out->reattach();
}

void make_control_send(const IbControl* control, std::uint64_t wr_id, IbSend* out) {
  std::memset(out, 0, sizeof(*out));
  out->wr.wr_id = wr_id;
  out->wr.opcode = IBV_WR_SEND;
  out->wr.send_flags = IBV_SEND_INLINE | IBV_SEND_SIGNALED;
  out->sge.addr = reinterpret_cast<std::uintptr_t>(control);
  out->sge.length = sizeof(IbControl);
  out->wr.num_sge = 1;  // inline: no key, the device copies it at posting
  out->reattach();
}

void make_slot_receive(void* slot, std::uint32_t lkey, std::uint64_t wr_id, IbReceive* out) {
  std::memset(out, 0, sizeof(*out));
  out->wr.wr_id = wr_id;
  out->sge.addr = reinterpret_cast<std::uintptr_t>(slot);
  out->sge.length = kIbControlSlotBytes;
  out->sge.lkey = lkey;
  out->wr.sg_list = &out->sge;
  out->wr.num_sge = 1;
}

std::uint32_t receive_of(std::uint32_t imm_data) { return ntohl(imm_data); }

ibv_mtu ib_mtu(std::uint32_t bytes) {
  if (bytes >= 4096) return IBV_MTU_4096;
  if (bytes >= 2048) return IBV_MTU_2048;
  if (bytes >= 1024) return IBV_MTU_1024;
  if (bytes >= 512) return IBV_MTU_512;
  return IBV_MTU_256;
}

IbQpStep qp_to_init(std::uint8_t port) {
  IbQpStep step{};
  step.attr.qp_state = IBV_QPS_INIT;
  step.attr.pkey_index = 0;
  step.attr.port_num = port;
  step.attr.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
  step.mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
  return step;
}

IbQpStep qp_to_ready_to_receive(const IbEndpoint& peer, std::uint32_t peer_qpn, std::uint32_t mtu_bytes,
                                std::uint8_t port, std::uint8_t gid_index) {
  IbQpStep step{};
  step.attr.qp_state = IBV_QPS_RTR;
  step.attr.path_mtu = ib_mtu(mtu_bytes);
  step.attr.dest_qp_num = peer_qpn;
  step.attr.rq_psn = peer.psn;
  step.attr.max_dest_rd_atomic = 1;
  step.attr.min_rnr_timer = 12;  // 0.64 ms before a receiver-not-ready retry
  step.attr.ah_attr.port_num = port;
  if (peer.ethernet) {
    // RoCE addresses by GID, through a global route header.
    step.attr.ah_attr.is_global = 1;
    std::memcpy(step.attr.ah_attr.grh.dgid.raw, peer.gid, sizeof(peer.gid));
    step.attr.ah_attr.grh.sgid_index = gid_index;
    step.attr.ah_attr.grh.hop_limit = 255;
  } else {
    step.attr.ah_attr.dlid = peer.lid;
  }
  step.mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
              IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
  return step;
}

IbQpStep qp_to_ready_to_send(std::uint32_t psn) {
  IbQpStep step{};
  step.attr.qp_state = IBV_QPS_RTS;
  step.attr.sq_psn = psn;
  step.attr.timeout = 18;  // 4.096 us * 2^18: about a second an attempt
  step.attr.retry_cnt = 7;
  step.attr.rnr_retry = 7;  // 7: retry without end while the receiver has no slot posted
  step.attr.max_rd_atomic = 1;
  step.mask = IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
              IBV_QP_MAX_QP_RD_ATOMIC;
  return step;
}

bool IbMatcher::add_send(int peer, int tag, void* send, IbControl* control) {
  const Key key{peer, tag, sent_[{peer, tag}]++};
  auto found = controls_.find(key);
  if (found == controls_.end()) {
    sends_[key] = send;
    return false;
  }
  *control = found->second;
  controls_.erase(found);
  return true;
}

void* IbMatcher::add_control(int peer, const IbControl& control) {
  const Key key{peer, control.tag, control.sequence};
  auto found = sends_.find(key);
  if (found == sends_.end()) {
    controls_[key] = control;
    return nullptr;
  }
  void* send = found->second;
  sends_.erase(found);
  return send;
}

void IbMatcher::forget_send(void* send) {
  for (auto it = sends_.begin(); it != sends_.end(); ++it)
    if (it->second == send) {
      sends_.erase(it);
      return;
    }
}

}  // namespace ferry

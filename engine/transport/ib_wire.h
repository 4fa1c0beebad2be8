// What the ib provider (ib_network.h) hands the RDMA device, as plain
// functions over rdma-core's structures, so that every field is checked by
// unit tests on machines without a device: the record a receiver sends its
// sender, the work requests a message becomes, the queue-pair attributes of
// each step from RESET to RTS, and the matching of sends with receives.
//
// Protocol (receiver-driven, as NCCL's ib transport): posting a receive
// registers its buffer and sends the sender a clear-to-send record (an
// IBV_WR_SEND, inline) naming the buffer, its key and the receive's id. The
// sender pairs records with its sends per (peer, tag) in posting order and
// writes each message straight into its receive buffer with RDMA write; the
// last (or only) piece carries the receive's id as immediate data, so its
// completion at the receiver says the whole message has landed (writes on
// one reliable connection are placed in order). A send whose size differs
// from its receive's answers with a refusal record instead of data.
#pragma once

#include <infiniband/verbs.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <tuple>

#include "engine/transport/ib_endpoint.h"

namespace ferry {

// One control message between two ranks; host byte order (one
// architecture a job).
struct IbControl {
  std::uint32_t kind;  // kIbClearToSend or kIbRefuse
  std::int32_t tag;
  std::uint64_t sequence;  // the receive's among this receiver's from (peer, tag)
  std::uint64_t bytes;     // clear: the receive's size; refuse: the send's
  std::uint64_t address;   // of the receive buffer
  std::uint32_t rkey;
  std::uint32_t receive;  // the receiver's id for the receive: the data's immediate
};
static_assert(sizeof(IbControl) == 40, "IbControl is part of the wire format");
constexpr std::uint32_t kIbClearToSend = 0x43545331;  // "CTS1"
constexpr std::uint32_t kIbRefuse = 0x52454631;       // "REF1"

// Every receive slot holds one control message.
constexpr std::uint32_t kIbControlSlotBytes = 64;

// A work request with its one gather entry (sg_list points into it: keep it
// where it was filled, or call reattach after a copy).
struct IbSend {
  ibv_send_wr wr;
  ibv_sge sge;
  void reattach() { wr.sg_list = wr.num_sge ? &sge : nullptr; }
};
struct IbReceive {
  ibv_recv_wr wr;
  ibv_sge sge;
};

// Piece `piece` of `pieces` of a message of `bytes` from local (lkey) into
// the receive `to` names, pieces of at most piece_bytes: RDMA write, the last
// one with immediate data (the receive's id, in network byte order) and
// signaled. A message of no bytes is one piece without a gather entry.
void make_data_write(const void* local, std::size_t bytes, std::uint32_t lkey, const IbControl& to,
                     std::size_t piece_bytes, std::size_t piece, std::uint64_t wr_id, IbSend* out);
// Pieces of a message of bytes (at least one).
std::size_t data_pieces(std::size_t bytes, std::size_t piece_bytes);

// A control message, sent inline (the device copies it when posted) and
// signaled.
void make_control_send(const IbControl* control, std::uint64_t wr_id, IbSend* out);

// A receive slot of kIbControlSlotBytes at slot (lkey).
void make_slot_receive(void* slot, std::uint32_t lkey, std::uint64_t wr_id, IbReceive* out);

// The receive's id from a completion with immediate data.
std::uint32_t receive_of(std::uint32_t imm_data);

// Queue-pair attributes and the mask that goes with them.
struct IbQpStep {
  ibv_qp_attr attr;
  int mask;
};
// RESET -> INIT on port: remote writes allowed.
IbQpStep qp_to_init(std::uint8_t port);
// INIT -> RTR towards the peer's queue pair peer_qpn at the peer's address
// (LID on InfiniBand; GID through gid_index here on RoCE), at mtu_bytes.
IbQpStep qp_to_ready_to_receive(const IbEndpoint& peer, std::uint32_t peer_qpn, std::uint32_t mtu_bytes,
                                std::uint8_t port, std::uint8_t gid_index);
// RTR -> RTS from psn: retries as long as the peer does not answer at all
// (7 and 7: the device's most, RNR without end), so a slow receiver never
// fails a send; a peer that is gone ends it after the timeout's retries.
IbQpStep qp_to_ready_to_send(std::uint32_t psn);
// The verbs MTU for bytes (256 .. 4096, a power of two).
ibv_mtu ib_mtu(std::uint32_t bytes);

// Pairs a rank's sends with its peers' clear-to-send records: per (peer,
// tag) the n-th send goes to the n-th receive posted, whichever is posted
// first. Keys are opaque to it.
class IbMatcher {
 public:
  // A send was posted; true (and *control) where its receive's record had
  // come first.
  bool add_send(int peer, int tag, void* send, IbControl* control);
  // A record came: the send it belongs to, or nullptr (it waits for it).
  void* add_control(int peer, const IbControl& control);
  // A send cancelled before its record came: it no longer waits.
  void forget_send(void* send);
  // The sequence number of the next receive posted for (peer, tag).
  std::uint64_t next_receive(int peer, int tag) { return received_[{peer, tag}]++; }
  std::size_t waiting_sends() const { return sends_.size(); }
  std::size_t waiting_controls() const { return controls_.size(); }

 private:
  using Key = std::tuple<int, int, std::uint64_t>;  // peer, tag, sequence
  std::map<std::pair<int, int>, std::uint64_t> sent_, received_;
  std::map<Key, void*> sends_;
  std::map<Key, IbControl> controls_;
};

}  // namespace ferry

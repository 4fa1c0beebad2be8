// The ib provider's wire, field by field, without an RDMA device: the
// control record's layout, the work requests a message becomes (opcodes,
// flags, immediate data in network byte order, addresses and keys of every
// piece), the queue-pair attributes of each step, and the matching of sends
// with their receives' records. Then the provider's set-up on a machine
// without a device: every rank fails at once, and FERRY_NET=auto falls
// back to a provider that works.
#include "engine/transport/ib_wire.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "engine/bootstrap/tcp_bootstrap.h"
#include "engine/transport/ib_network.h"
#include "engine/transport/ib_verbs.h"
#include "engine/transport/net_transport.h"
#include "tests/unit/loopback_ranks.h"

namespace ferry {
namespace {

TEST(IbWire, ControlRecordLayoutIsFixed) {
  EXPECT_EQ(offsetof(IbControl, kind), 0u);
  EXPECT_EQ(offsetof(IbControl, tag), 4u);
  EXPECT_EQ(offsetof(IbControl, sequence), 8u);
  EXPECT_EQ(offsetof(IbControl, bytes), 16u);
  EXPECT_EQ(offsetof(IbControl, address), 24u);
  EXPECT_EQ(offsetof(IbControl, rkey), 32u);
  EXPECT_EQ(offsetof(IbControl, receive), 36u);
  EXPECT_LE(sizeof(IbControl), kIbControlSlotBytes);
}

IbControl clear_to_send(std::uint64_t bytes) {
  return IbControl{kIbClearToSend, 7, 3, bytes, 0x7f0000100000ull, 0xabcd, 0x01020304};
}

TEST(IbWire, AMessageOfOnePieceIsOneWriteWithImmediate) {
  char data[100];
  IbSend send;
  make_data_write(data, sizeof(data), 0x55, clear_to_send(100), 1 << 20, 0, 0x1234, &send);
  EXPECT_EQ(send.wr.wr_id, 0x1234u);
  EXPECT_EQ(send.wr.next, nullptr);
  EXPECT_EQ(send.wr.opcode, IBV_WR_RDMA_WRITE_WITH_IMM);
  EXPECT_EQ(send.wr.send_flags, static_cast<unsigned>(IBV_SEND_SIGNALED));
  // The receive's id on the wire, most significant byte first.
  const auto* imm = reinterpret_cast<const unsigned char*>(&send.wr.imm_data);
  EXPECT_EQ(imm[0], 0x01);
  EXPECT_EQ(imm[1], 0x02);
  EXPECT_EQ(imm[2], 0x03);
  EXPECT_EQ(imm[3], 0x04);
  EXPECT_EQ(receive_of(send.wr.imm_data), 0x01020304u);
  EXPECT_EQ(send.wr.wr.rdma.remote_addr, 0x7f0000100000ull);
  EXPECT_EQ(send.wr.wr.rdma.rkey, 0xabcdu);
  ASSERT_EQ(send.wr.num_sge, 1);
  EXPECT_EQ(send.wr.sg_list, &send.sge);
  EXPECT_EQ(send.sge.addr, reinterpret_cast<std::uintptr_t>(data));
  EXPECT_EQ(send.sge.length, 100u);
  EXPECT_EQ(send.sge.lkey, 0x55u);
}

TEST(IbWire, ALargeMessageIsPiecesAndOnlyTheLastCarriesTheImmediate) {
  const std::size_t piece = 4096, bytes = 2 * piece + 1000;
  ASSERT_EQ(data_pieces(bytes, piece), 3u);
  std::vector<char> data(bytes);
  for (std::size_t p = 0; p < 3; ++p) {
    IbSend send;
    make_data_write(data.data(), bytes, 9, clear_to_send(bytes), piece, p, 77, &send);
    const bool last = p == 2;
    EXPECT_EQ(send.wr.opcode, last ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE) << p;
    EXPECT_EQ(send.wr.send_flags, last ? static_cast<unsigned>(IBV_SEND_SIGNALED) : 0u) << p;
    EXPECT_EQ(send.wr.imm_data, last ? htonl(0x01020304) : 0u) << p;
    EXPECT_EQ(send.wr.wr.rdma.remote_addr, 0x7f0000100000ull + p * piece) << p;
    EXPECT_EQ(send.sge.addr, reinterpret_cast<std::uintptr_t>(data.data()) + p * piece) << p;
    EXPECT_EQ(send.sge.length, last ? 1000u : piece) << p;
  }
}

TEST(IbWire, AnEmptyMessageIsAWriteWithoutGatherEntry) {
  EXPECT_EQ(data_pieces(0, 4096), 1u);
  IbSend send;
  make_data_write(nullptr, 0, 9, clear_to_send(0), 4096, 0, 1, &send);
  EXPECT_EQ(send.wr.opcode, IBV_WR_RDMA_WRITE_WITH_IMM);
  EXPECT_EQ(send.wr.num_sge, 0);
  EXPECT_EQ(send.wr.sg_list, nullptr);
  // Copied, it points at its own entry again once reattached.
  IbSend data_send;
  char byte = 0;
  make_data_write(&byte, 1, 9, clear_to_send(1), 4096, 0, 1, &data_send);
  IbSend copy = data_send;
  copy.reattach();
  EXPECT_EQ(copy.wr.sg_list, &copy.sge);
}

TEST(IbWire, ControlRecordsGoInlineAndSlotsTakeOneRecord) {
  const IbControl control = clear_to_send(5);
  IbSend send;
  make_control_send(&control, 42, &send);
  EXPECT_EQ(send.wr.opcode, IBV_WR_SEND);
  EXPECT_EQ(send.wr.send_flags, static_cast<unsigned>(IBV_SEND_INLINE | IBV_SEND_SIGNALED));
  EXPECT_EQ(send.sge.addr, reinterpret_cast<std::uintptr_t>(&control));
  EXPECT_EQ(send.sge.length, sizeof(IbControl));
  EXPECT_EQ(send.wr.wr_id, 42u);

  char slot[kIbControlSlotBytes];
  IbReceive receive;
  make_slot_receive(slot, 0x99, 5, &receive);
  EXPECT_EQ(receive.wr.wr_id, 5u);
  EXPECT_EQ(receive.wr.sg_list, &receive.sge);
  EXPECT_EQ(receive.wr.num_sge, 1);
  EXPECT_EQ(receive.sge.addr, reinterpret_cast<std::uintptr_t>(slot));
  EXPECT_EQ(receive.sge.length, kIbControlSlotBytes);
  EXPECT_EQ(receive.sge.lkey, 0x99u);
}

IbEndpoint peer_endpoint(bool ethernet) {
  IbEndpoint e = make_ib_endpoint();
  e.queue_pairs = 1;
  e.qpn[0] = 0x1234;
  e.psn = 0xabcdef;
  e.lid = ethernet ? 0 : 0x21;
  e.ethernet = ethernet;
  for (int i = 0; i < 16; ++i) e.gid[i] = static_cast<std::uint8_t>(i + 1);
  e.mtu_bytes = 2048;
  return e;
}

TEST(IbWire, QueuePairStepsFromResetToReadyToSend) {
  const IbQpStep init = qp_to_init(2);
  EXPECT_EQ(init.attr.qp_state, IBV_QPS_INIT);
  EXPECT_EQ(init.attr.port_num, 2);
  EXPECT_EQ(init.attr.qp_access_flags, static_cast<unsigned>(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE));
  EXPECT_EQ(init.mask, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);

  const IbQpStep rtr = qp_to_ready_to_receive(peer_endpoint(false), 0x1234, 2048, 1, 3);
  EXPECT_EQ(rtr.attr.qp_state, IBV_QPS_RTR);
  EXPECT_EQ(rtr.attr.path_mtu, IBV_MTU_2048);
  EXPECT_EQ(rtr.attr.dest_qp_num, 0x1234u);
  EXPECT_EQ(rtr.attr.rq_psn, 0xabcdefu);
  EXPECT_EQ(rtr.attr.ah_attr.dlid, 0x21);
  EXPECT_EQ(rtr.attr.ah_attr.is_global, 0);
  EXPECT_EQ(rtr.attr.ah_attr.port_num, 1);
  EXPECT_EQ(rtr.mask, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                          IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);

  // RoCE: by GID through a global route header, from this port's GID index.
  const IbQpStep roce = qp_to_ready_to_receive(peer_endpoint(true), 0x1234, 1024, 1, 3);
  EXPECT_EQ(roce.attr.path_mtu, IBV_MTU_1024);
  EXPECT_EQ(roce.attr.ah_attr.is_global, 1);
  EXPECT_EQ(roce.attr.ah_attr.dlid, 0);
  EXPECT_EQ(roce.attr.ah_attr.grh.sgid_index, 3);
  EXPECT_EQ(roce.attr.ah_attr.grh.hop_limit, 255);
  EXPECT_EQ(std::memcmp(roce.attr.ah_attr.grh.dgid.raw, peer_endpoint(true).gid, 16), 0);

  const IbQpStep rts = qp_to_ready_to_send(0x13579b);
  EXPECT_EQ(rts.attr.qp_state, IBV_QPS_RTS);
  EXPECT_EQ(rts.attr.sq_psn, 0x13579bu);
  EXPECT_EQ(rts.attr.retry_cnt, 7);
  EXPECT_EQ(rts.attr.rnr_retry, 7);
  EXPECT_EQ(rts.mask, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                          IBV_QP_MAX_QP_RD_ATOMIC);

  EXPECT_EQ(ib_mtu(256), IBV_MTU_256);
  EXPECT_EQ(ib_mtu(512), IBV_MTU_512);
  EXPECT_EQ(ib_mtu(4096), IBV_MTU_4096);
}

TEST(IbMatcher, SendsMeetTheirReceivesPerPeerAndTagInPostingOrder) {
  IbMatcher matcher;
  int a = 0, b = 0, c = 0, d = 0;
  IbControl got{};
  // Sends first: records find them by (peer, tag, sequence).
  EXPECT_FALSE(matcher.add_send(1, 5, &a, &got));
  EXPECT_FALSE(matcher.add_send(1, 5, &b, &got));
  EXPECT_FALSE(matcher.add_send(2, 5, &c, &got));
  IbControl second{kIbClearToSend, 5, 1, 8, 0, 0, 11};
  EXPECT_EQ(matcher.add_control(1, second), &b);
  IbControl other_peer{kIbClearToSend, 5, 0, 8, 0, 0, 12};
  EXPECT_EQ(matcher.add_control(2, other_peer), &c);
  IbControl first{kIbClearToSend, 5, 0, 8, 0, 0, 10};
  EXPECT_EQ(matcher.add_control(1, first), &a);
  // A record first: the send takes it.
  IbControl early{kIbClearToSend, 6, 0, 16, 0, 0, 13};
  EXPECT_EQ(matcher.add_control(1, early), nullptr);
  EXPECT_TRUE(matcher.add_send(1, 6, &d, &got));
  EXPECT_EQ(got.receive, 13u);
  EXPECT_EQ(matcher.waiting_sends(), 0u);
  EXPECT_EQ(matcher.waiting_controls(), 0u);
  // A cancelled send stops waiting.
  EXPECT_FALSE(matcher.add_send(3, 1, &a, &got));
  matcher.forget_send(&a);
  EXPECT_EQ(matcher.waiting_sends(), 0u);
  EXPECT_EQ(matcher.next_receive(1, 5), 0u);
  EXPECT_EQ(matcher.next_receive(1, 5), 1u);
  EXPECT_EQ(matcher.next_receive(2, 5), 0u);
}


TEST(IbNetwork, WithoutAnRdmaDeviceEveryRankFailsAtOnce) {
  std::string why;
  if (!ib_ports(&why).empty()) GTEST_SKIP() << "this machine has RDMA ports";
  testing::run_loopback_ranks(3, [](int, Bootstrap& bootstrap) {
    std::unique_ptr<NetProvider> net;
    IbNetworkOptions options;
    options.asked_for = false;
    EXPECT_EQ(make_ib_network(bootstrap, &net, options), Status::kUnavailable);
    EXPECT_EQ(net, nullptr);
    // The bootstrap is still in step: the next collective works.
    EXPECT_EQ(bootstrap.barrier(), Status::kOk);
  });
}

TEST(IbNetwork, AutoFallsBackToAProviderThatWorks) {
  std::string why;
  if (!ib_ports(&why).empty()) GTEST_SKIP() << "this machine has RDMA ports";
  testing::run_loopback_ranks(2, [](int rank, Bootstrap& bootstrap) {
    NetTransport transport(4096, 2);
    // No MPI under a TCP bootstrap: auto ends at the socket provider.
    ASSERT_EQ(transport.connect(bootstrap, "auto"), Status::kOk);
    ASSERT_NE(transport.provider(), nullptr);
    EXPECT_STREQ(transport.provider()->name(), "socket");
    std::vector<int> data(3000, rank == 0 ? 17 : 0);
    Completion done;
    if (rank == 0) {
      ASSERT_EQ(transport.post_send(1, data.data(), data.size() * sizeof(int), 1, &done), Status::kOk);
    } else {
      ASSERT_EQ(transport.post_recv(0, data.data(), data.size() * sizeof(int), 1, &done), Status::kOk);
    }
    ASSERT_EQ(transport.wait_all({&done}, std::chrono::steady_clock::now() + std::chrono::seconds(10)), Status::kOk);
    EXPECT_EQ(data[2999], 17);
    // FERRY_NET=ib by name where there is no device: the same failure on every rank.
    NetTransport ib(4096, 2);
    EXPECT_EQ(ib.connect(bootstrap, "ib"), Status::kUnavailable);
  });
}

}  // namespace
}  // namespace ferry

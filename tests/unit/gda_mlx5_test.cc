// The IBGDA encoders (engine/transport/gda/mlx5_wqe.h) byte for byte
// against rdma-core's own mlx5dv.h: its segment layouts, its
// mlx5dv_set_ctrl_seg / mlx5dv_set_data_seg, the doorbell record and the
// CQE accessors rdma-core's mlx5 provider uses.
#include <endian.h>
#include <gtest/gtest.h>
#include <infiniband/mlx5dv.h>

#include <cstddef>
#include <cstring>
#include <random>

#include "engine/transport/gda/mlx5_wqe.h"

namespace ferry::mlx5 {
namespace {

static_assert(kOpcodeRdmaWrite == MLX5_OPCODE_RDMA_WRITE && kOpcodeRdmaWriteImm == MLX5_OPCODE_RDMA_WRITE_IMM &&
              kOpcodeAtomicCompareSwap == MLX5_OPCODE_ATOMIC_CS && kOpcodeAtomicFetchAdd == MLX5_OPCODE_ATOMIC_FA &&
              kOpcodeNop == MLX5_OPCODE_NOP);
static_assert(kCompletionAlways == MLX5_WQE_CTRL_CQ_UPDATE && kFenceStrongOrdering == MLX5_WQE_CTRL_FENCE &&
              kFenceInitiatorSmall == MLX5_WQE_CTRL_INITIATOR_SMALL_FENCE);
static_assert(kBasicBlockBytes == MLX5_SEND_WQE_BB && kSendDoorbellWord == MLX5_SND_DBR);
static_assert(kCqeRequester == MLX5_CQE_REQ && kCqeRequesterError == MLX5_CQE_REQ_ERR &&
              kCqeResponderError == MLX5_CQE_RESP_ERR && kCqeInvalid == MLX5_CQE_INVALID);
static_assert(sizeof(CtrlSegment) == sizeof(mlx5_wqe_ctrl_seg) &&
              offsetof(CtrlSegment, fm_ce_se) == offsetof(mlx5_wqe_ctrl_seg, fm_ce_se) &&
              offsetof(CtrlSegment, immediate) == offsetof(mlx5_wqe_ctrl_seg, imm));
static_assert(sizeof(mlx5_cqe64) == kCqeBytes);

std::mt19937_64& random_bits() {
  static std::mt19937_64 bits(20261205);
  return bits;
}

TEST(GdaMlx5, CtrlSegmentMatchesRdmaCore) {
  for (int i = 0; i < 1000; ++i) {
    const std::uint64_t r = random_bits()();
    const auto index = static_cast<std::uint16_t>(r);
    const auto opcode = static_cast<std::uint8_t>(r >> 16);
    const auto qpn = static_cast<std::uint32_t>(r >> 24) & 0xffffff;
    const auto fm_ce_se = static_cast<std::uint8_t>(r >> 48);
    const auto ds = static_cast<std::uint8_t>((r >> 56) & 0x3f);
    const auto imm = static_cast<std::uint32_t>(random_bits()());
    mlx5_wqe_ctrl_seg theirs;
    CtrlSegment ours;
    std::memset(&theirs, 0, sizeof theirs);
    std::memset(&ours, 0xa5, sizeof ours);
    mlx5dv_set_ctrl_seg(&theirs, index, opcode, 0, qpn, fm_ce_se, ds, 0, imm);
    write_ctrl(&ours, index, opcode, 0, qpn, fm_ce_se, ds, imm);
    ASSERT_EQ(std::memcmp(&ours, &theirs, sizeof ours), 0) << "index " << index << " qpn " << qpn;
  }
}

TEST(GdaMlx5, DataRemoteAndAtomicSegmentsMatchRdmaCore) {
  for (int i = 0; i < 1000; ++i) {
    const std::uint64_t address = random_bits()(), remote = random_bits()(), add = random_bits()(),
                        compare = random_bits()();
    const auto keys = random_bits()();
    const auto lkey = static_cast<std::uint32_t>(keys), rkey = static_cast<std::uint32_t>(keys >> 32);
    mlx5_wqe_data_seg their_data;
    DataSegment our_data;
    mlx5dv_set_data_seg(&their_data, static_cast<std::uint32_t>(add), lkey, address);
    write_data(&our_data, static_cast<std::uint32_t>(add), lkey, address);
    ASSERT_EQ(std::memcmp(&our_data, &their_data, sizeof our_data), 0);
    // rdma-core's provider fills these two as below (set_raddr_seg, set_atomic_seg).
    mlx5_wqe_raddr_seg their_raddr{htobe64(remote), htobe32(rkey), 0};
    RemoteAddressSegment our_raddr;
    write_remote_address(&our_raddr, remote, rkey);
    ASSERT_EQ(std::memcmp(&our_raddr, &their_raddr, sizeof our_raddr), 0);
    mlx5_wqe_atomic_seg their_atomic{htobe64(add), htobe64(compare)};
    AtomicSegment our_atomic;
    write_atomic(&our_atomic, add, compare);
    ASSERT_EQ(std::memcmp(&our_atomic, &their_atomic, sizeof our_atomic), 0);
  }
}

TEST(GdaMlx5, WholeWqesAreTheSegmentsInOrder) {
  alignas(64) unsigned char ours[kBasicBlockBytes];
  alignas(64) unsigned char theirs[kBasicBlockBytes];
  const WqeTarget at{0x1234, 0xabcdef, kCompletionAlways};
  std::memset(ours, 0, sizeof ours);
  std::memset(theirs, 0, sizeof theirs);
  EXPECT_EQ(write_rdma_write(ours, at, 0x7f0012345678, 0x11, 4093, 0x5500aabbcc00, 0x22, true, htobe32(77)), 3u);
  auto* ctrl = reinterpret_cast<mlx5_wqe_ctrl_seg*>(theirs);
  mlx5dv_set_ctrl_seg(ctrl, 0x1234, MLX5_OPCODE_RDMA_WRITE_IMM, 0, 0xabcdef, MLX5_WQE_CTRL_CQ_UPDATE, 3, 0,
                      htobe32(77));
  auto* raddr = reinterpret_cast<mlx5_wqe_raddr_seg*>(theirs + 16);
  *raddr = {htobe64(0x5500aabbcc00), htobe32(0x22), 0};
  mlx5dv_set_data_seg(reinterpret_cast<mlx5_wqe_data_seg*>(theirs + 32), 4093, 0x11, 0x7f0012345678);
  EXPECT_EQ(std::memcmp(ours, theirs, sizeof ours), 0);

  std::memset(ours, 0, sizeof ours);
  std::memset(theirs, 0, sizeof theirs);
  EXPECT_EQ(write_atomic_op(ours, at, false, 0x1000, 0x11, 0x2000, 0x22, 5, 9), 4u);
  mlx5dv_set_ctrl_seg(ctrl, 0x1234, MLX5_OPCODE_ATOMIC_FA, 0, 0xabcdef, MLX5_WQE_CTRL_CQ_UPDATE, 4, 0, 0);
  *raddr = {htobe64(0x2000), htobe32(0x22), 0};
  *reinterpret_cast<mlx5_wqe_atomic_seg*>(theirs + 32) = {htobe64(5), 0};  // fetch-add: compare unused
  mlx5dv_set_data_seg(reinterpret_cast<mlx5_wqe_data_seg*>(theirs + 48), 8, 0x11, 0x1000);
  EXPECT_EQ(std::memcmp(ours, theirs, sizeof ours), 0);
  EXPECT_EQ(basic_blocks(3), 1u);
  EXPECT_EQ(basic_blocks(4), 1u);
  EXPECT_EQ(basic_blocks(5), 2u);
}

TEST(GdaMlx5, DoorbellsAreWhatRdmaCorePosts) {
  // The send doorbell record: htobe32(cur_post & 0xffff) (mlx5 post_send).
  for (std::uint32_t pi : {0u, 1u, 0x1234u, 0xffffu}) {
    const std::uint32_t record = send_doorbell_record(static_cast<std::uint16_t>(pi));
    EXPECT_EQ(record, htobe32(pi & 0xffff));
  }
  // The doorbell register gets the ctrl segment's first 8 bytes as they lie.
  mlx5_wqe_ctrl_seg ctrl;
  mlx5dv_set_ctrl_seg(&ctrl, 0xbeef, MLX5_OPCODE_RDMA_WRITE, 0, 0x123456, 0, 3, 0, 0);
  const std::uint64_t value = doorbell_value(*reinterpret_cast<const CtrlSegment*>(&ctrl));
  EXPECT_EQ(std::memcmp(&value, &ctrl, 8), 0);
  // The CQ's consumer index word: htobe32(ci & 0xffffff).
  EXPECT_EQ(cq_consumer_record(0x1abcdef0), htobe32(0xbcdef0));
}

TEST(GdaMlx5, CqesReadAsRdmaCoreReadsThem) {
  for (int i = 0; i < 1000; ++i) {
    alignas(64) mlx5_cqe64 cqe;
    for (std::size_t b = 0; b < sizeof cqe; b += 8) {
      const std::uint64_t bits = random_bits()();
      std::memcpy(reinterpret_cast<char*>(&cqe) + b, &bits, 8);
    }
    const Completion c = read_cqe(&cqe);
    EXPECT_EQ(c.opcode, mlx5dv_get_cqe_opcode(&cqe));
    EXPECT_EQ(c.owner, mlx5dv_get_cqe_owner(&cqe));
    EXPECT_EQ(c.wqe_counter, be16toh(cqe.wqe_counter));
    EXPECT_EQ(c.qp_number, be32toh(cqe.sop_drop_qpn) & 0xffffff);
    EXPECT_EQ(c.bytes, be32toh(cqe.byte_cnt));
    const auto* error = reinterpret_cast<const mlx5_err_cqe*>(&cqe);
    EXPECT_EQ(c.syndrome, error->syndrome);
    EXPECT_EQ(c.vendor_syndrome, error->vendor_err_synd);
  }
}

TEST(GdaMlx5, ACqeIsReadyInTheRingPassItsOwnerBitNames) {
  // rdma-core's mlx5 get_sw_cqe: valid opcode, and owner == !!(n & entries).
  constexpr unsigned kLogEntries = 4;
  alignas(64) mlx5_cqe64 cqe;
  std::memset(&cqe, 0, sizeof cqe);
  for (std::uint32_t n : {0u, 5u, 15u, 16u, 17u, 31u, 32u, 100u}) {
    for (std::uint8_t owner : {0, 1}) {
      for (std::uint8_t opcode : {MLX5_CQE_REQ, MLX5_CQE_REQ_ERR, MLX5_CQE_INVALID}) {
        cqe.op_own = static_cast<std::uint8_t>(opcode << 4 | owner);
        const bool rdma_core_ready =
            mlx5dv_get_cqe_opcode(&cqe) != MLX5_CQE_INVALID && !((cqe.op_own & 1) ^ !!(n & (1u << kLogEntries)));
        EXPECT_EQ(cqe_ready(&cqe, n, kLogEntries), rdma_core_ready) << "n " << n << " op_own " << int(cqe.op_own);
      }
    }
  }
}

}  // namespace
}  // namespace ferry::mlx5

// What a GPU thread writes and reads to drive a ConnectX (mlx5) queue pair
// itself (IBGDA): send work-queue entries (WQEs), the doorbell record and
// doorbell, and completion-queue entries (CQEs), in the layouts of the mlx5
// programmer's reference as rdma-core's mlx5dv.h declares them. Compiles
// under nvcc, hipcc and a plain C++ compiler: the kernels and the host use
// the same encoders, unit-tested byte for byte against rdma-core's own
// mlx5dv_set_*_seg (tests/unit/gda_mlx5_test.cc).
//
// A send WQE is one or more 64-byte basic blocks of 16-byte segments; the
// NIC reads every multi-byte field big-endian. The control segment opens
// each WQE and counts its segments (ds); the NIC takes a WQE once the
// doorbell record holds a producer index past it and the doorbell (the
// UAR's register) was written with the WQE's first 8 bytes.
#pragma once

#include <cstdint>

#if defined(__HIPCC__)
#include <hip/hip_runtime.h>
#endif

#if defined(__CUDACC__) || defined(__HIPCC__)
#define FERRY_MLX5_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define FERRY_MLX5_HOST_DEVICE inline
#endif

namespace ferry::mlx5 {

// Send opcodes (ctrl segment, low byte of its first word).
constexpr std::uint8_t kOpcodeNop = 0x00;
constexpr std::uint8_t kOpcodeRdmaWrite = 0x08;
constexpr std::uint8_t kOpcodeRdmaWriteImm = 0x09;
constexpr std::uint8_t kOpcodeAtomicCompareSwap = 0x11;
constexpr std::uint8_t kOpcodeAtomicFetchAdd = 0x12;

// The ctrl segment's fm_ce_se byte.
constexpr std::uint8_t kCompletionAlways = 2 << 2;         // a CQE for this WQE
constexpr std::uint8_t kFenceInitiatorSmall = 1 << 5;      // after earlier WQEs' local reads
constexpr std::uint8_t kFenceStrongOrdering = 4 << 5;      // after earlier WQEs complete

constexpr unsigned kSegmentBytes = 16;
constexpr unsigned kBasicBlockBytes = 64;

// CQE opcodes (op_own >> 4).
constexpr std::uint8_t kCqeRequester = 0x0;
constexpr std::uint8_t kCqeRequesterError = 0xd;
constexpr std::uint8_t kCqeResponderError = 0xe;
constexpr std::uint8_t kCqeInvalid = 0xf;
constexpr unsigned kCqeBytes = 64;

// Doorbell record words: a QP's [receive, send] counters, a CQ's [consumer
// index, arm].
constexpr int kSendDoorbellWord = 1;
constexpr int kCqConsumerWord = 0;

FERRY_MLX5_HOST_DEVICE std::uint16_t big_endian16(std::uint16_t v) {
  return static_cast<std::uint16_t>((v >> 8) | (v << 8));
}
FERRY_MLX5_HOST_DEVICE std::uint32_t big_endian32(std::uint32_t v) {
  return (v >> 24) | ((v >> 8) & 0xff00u) | ((v << 8) & 0xff0000u) | (v << 24);
}
FERRY_MLX5_HOST_DEVICE std::uint64_t big_endian64(std::uint64_t v) {
  return (static_cast<std::uint64_t>(big_endian32(static_cast<std::uint32_t>(v))) << 32) |
         big_endian32(static_cast<std::uint32_t>(v >> 32));
}

// Segments as the NIC reads them; every field already big-endian.
struct CtrlSegment {
  std::uint32_t opmod_index_opcode;  // opmod << 24 | WQE index << 8 | opcode
  std::uint32_t qpn_ds;              // QP number << 8 | segments (16 bytes each)
  std::uint8_t signature;
  std::uint8_t reserved[2];
  std::uint8_t fm_ce_se;
  std::uint32_t immediate;           // as the verbs caller gave it (already big-endian)
};
struct RemoteAddressSegment {
  std::uint64_t address;
  std::uint32_t rkey;
  std::uint32_t reserved;
};
struct DataSegment {
  std::uint32_t bytes;
  std::uint32_t lkey;
  std::uint64_t address;
};
struct AtomicSegment {
  std::uint64_t swap_or_add;
  std::uint64_t compare;
};
static_assert(sizeof(CtrlSegment) == kSegmentBytes && sizeof(RemoteAddressSegment) == kSegmentBytes &&
                  sizeof(DataSegment) == kSegmentBytes && sizeof(AtomicSegment) == kSegmentBytes,
              "mlx5 segments are 16 bytes");

FERRY_MLX5_HOST_DEVICE void write_ctrl(CtrlSegment* seg, std::uint16_t wqe_index, std::uint8_t opcode,
                                       std::uint8_t opmod, std::uint32_t qp_number, std::uint8_t fm_ce_se,
                                       std::uint8_t segments, std::uint32_t immediate) {
  seg->opmod_index_opcode =
      big_endian32((static_cast<std::uint32_t>(opmod) << 24) | (static_cast<std::uint32_t>(wqe_index) << 8) | opcode);
  seg->qpn_ds = big_endian32((qp_number << 8) | segments);
  seg->signature = 0;
  seg->reserved[0] = seg->reserved[1] = 0;
  seg->fm_ce_se = fm_ce_se;
  seg->immediate = immediate;
}

FERRY_MLX5_HOST_DEVICE void write_remote_address(RemoteAddressSegment* seg, std::uint64_t address,
                                                 std::uint32_t rkey) {
  seg->address = big_endian64(address);
  seg->rkey = big_endian32(rkey);
  seg->reserved = 0;
}

FERRY_MLX5_HOST_DEVICE void write_data(DataSegment* seg, std::uint32_t bytes, std::uint32_t lkey,
                                       std::uint64_t address) {
  seg->bytes = big_endian32(bytes);
  seg->lkey = big_endian32(lkey);
  seg->address = big_endian64(address);
}

FERRY_MLX5_HOST_DEVICE void write_atomic(AtomicSegment* seg, std::uint64_t swap_or_add, std::uint64_t compare) {
  seg->swap_or_add = big_endian64(swap_or_add);
  seg->compare = big_endian64(compare);
}

// A WQE's place in the send queue and what it moves. local: registered
// memory here (lkey), remote: the peer's (rkey).
struct WqeTarget {
  std::uint16_t index;       // the producer counter's value for this WQE
  std::uint32_t qp_number;
  std::uint8_t fm_ce_se;     // kCompletionAlways to get a CQE, fences
};

// RDMA write (with_immediate: RDMA write with immediate, which the peer's
// receive queue sees as a completion carrying `immediate`). One basic
// block: ctrl + remote address + data. Returns the segments written.
FERRY_MLX5_HOST_DEVICE unsigned write_rdma_write(void* wqe, const WqeTarget& at, std::uint64_t local,
                                                 std::uint32_t lkey, std::uint32_t bytes, std::uint64_t remote,
                                                 std::uint32_t rkey, bool with_immediate = false,
                                                 std::uint32_t immediate = 0) {
  auto* segments = static_cast<unsigned char*>(wqe);
  write_ctrl(reinterpret_cast<CtrlSegment*>(segments), at.index,
             with_immediate ? kOpcodeRdmaWriteImm : kOpcodeRdmaWrite, 0, at.qp_number, at.fm_ce_se, 3,
             with_immediate ? immediate : 0);
  write_remote_address(reinterpret_cast<RemoteAddressSegment*>(segments + kSegmentBytes), remote, rkey);
  write_data(reinterpret_cast<DataSegment*>(segments + 2 * kSegmentBytes), bytes, lkey, local);
  return 3;
}

// An 8-byte atomic on the peer's memory (fetch-and-add: compare unused);
// the old value lands in local. One basic block: ctrl + remote address +
// atomic + data.
FERRY_MLX5_HOST_DEVICE unsigned write_atomic_op(void* wqe, const WqeTarget& at, bool compare_swap,
                                                std::uint64_t local, std::uint32_t lkey, std::uint64_t remote,
                                                std::uint32_t rkey, std::uint64_t swap_or_add,
                                                std::uint64_t compare) {
  auto* segments = static_cast<unsigned char*>(wqe);
  write_ctrl(reinterpret_cast<CtrlSegment*>(segments), at.index,
             compare_swap ? kOpcodeAtomicCompareSwap : kOpcodeAtomicFetchAdd, 0, at.qp_number, at.fm_ce_se, 4, 0);
  write_remote_address(reinterpret_cast<RemoteAddressSegment*>(segments + kSegmentBytes), remote, rkey);
  write_atomic(reinterpret_cast<AtomicSegment*>(segments + 2 * kSegmentBytes), swap_or_add,
               compare_swap ? compare : 0);
  write_data(reinterpret_cast<DataSegment*>(segments + 3 * kSegmentBytes), 8, lkey, local);
  return 4;
}

// Basic blocks a WQE of `segments` takes in the send queue.
FERRY_MLX5_HOST_DEVICE unsigned basic_blocks(unsigned segments) {
  return (segments * kSegmentBytes + kBasicBlockBytes - 1) / kBasicBlockBytes;
}

// The send doorbell record's word once WQEs up to (not including)
// producer_index are posted.
FERRY_MLX5_HOST_DEVICE std::uint32_t send_doorbell_record(std::uint16_t producer_index) {
  return big_endian32(producer_index);
}

// The 8 bytes written to the UAR's doorbell register for the WQE that
// starts at ctrl: its first two words, as they lie in memory.
FERRY_MLX5_HOST_DEVICE std::uint64_t doorbell_value(const CtrlSegment& ctrl) {
  const auto* words = reinterpret_cast<const std::uint32_t*>(&ctrl);
  // Memory order: word 0 at the lower address (a little-endian 64-bit store).
  return static_cast<std::uint64_t>(words[0]) | (static_cast<std::uint64_t>(words[1]) << 32);
}

// The CQ's consumer-index word once CQEs up to consumer_index are taken.
FERRY_MLX5_HOST_DEVICE std::uint32_t cq_consumer_record(std::uint32_t consumer_index) {
  return big_endian32(consumer_index & 0xffffffu);
}

// A 64-byte CQE's fields a poller needs, from the bytes as the NIC wrote
// them (offsets of mlx5_cqe64 and mlx5_err_cqe).
struct Completion {
  std::uint8_t opcode;        // kCqeRequester, kCqeRequesterError, ...
  std::uint8_t owner;         // the ownership bit
  std::uint16_t wqe_counter;  // the WQE index this CQE completes
  std::uint32_t qp_number;
  std::uint32_t bytes;
  std::uint8_t syndrome;      // error CQEs: why
  std::uint8_t vendor_syndrome;
};

FERRY_MLX5_HOST_DEVICE std::uint32_t load_big_endian32(const unsigned char* p) {
  return (static_cast<std::uint32_t>(p[0]) << 24) | (static_cast<std::uint32_t>(p[1]) << 16) |
         (static_cast<std::uint32_t>(p[2]) << 8) | p[3];
}

FERRY_MLX5_HOST_DEVICE Completion read_cqe(const void* cqe) {
  const auto* bytes = static_cast<const unsigned char*>(cqe);
  Completion c;
  c.opcode = static_cast<std::uint8_t>(bytes[63] >> 4);
  c.owner = static_cast<std::uint8_t>(bytes[63] & 1);
  c.wqe_counter = static_cast<std::uint16_t>((bytes[60] << 8) | bytes[61]);
  c.qp_number = load_big_endian32(bytes + 56) & 0xffffffu;
  c.bytes = load_big_endian32(bytes + 44);
  c.syndrome = bytes[55];
  c.vendor_syndrome = bytes[54];
  return c;
}

// Whether the CQE at consumer_index of a CQ of 2^log_entries entries is
// software's to read: the NIC wrote it in the current pass over the ring
// (its ownership bit equals the pass's parity) and it is not a fresh,
// never-written entry.
FERRY_MLX5_HOST_DEVICE bool cqe_ready(const void* cqe, std::uint32_t consumer_index, unsigned log_entries) {
  const std::uint8_t op_own = static_cast<const unsigned char*>(cqe)[63];
  const std::uint8_t pass_parity = static_cast<std::uint8_t>((consumer_index >> log_entries) & 1);
  return (op_own >> 4) != kCqeInvalid && (op_own & 1) == pass_parity;
}

}  // namespace ferry::mlx5

// The engine worker's doorbell, shared by the host, the persistent kernel
// and the emulated device's worker thread: compiles under nvcc and a plain
// C++ compiler.
//
// The host writes a work item as LL words (4 data bytes and a 4-byte flag in
// one 8-byte store). The worker reads the whole doorbell in one PCIe round
// trip (a warp, 16 bytes a lane) and knows the item arrived when every word
// it needs carries the call's flag: no separate "posted" word to read
// first, which would cost a second round trip (bench/mailbox-latency,
// bench/RESULTS.md).
#pragma once

#include <cstdint>
#include <type_traits>

#include "engine/core/reduce_common.h"
#include "engine/collectives/worker.h"

namespace ferry {

struct LlWord {
  std::uint32_t data;
  std::uint32_t flag;
};
static_assert(sizeof(LlWord) == 8, "an LL word is one 8-byte store");
static_assert(sizeof(Mailbox::doorbell) == kDoorbellWords * sizeof(LlWord), "the doorbell is LL words");

// The flag of call `sequence`: never 0, which fresh memory holds, and
// different for consecutive calls.
FERRY_HOST_DEVICE std::uint32_t doorbell_flag(std::uint64_t sequence) {
  return static_cast<std::uint32_t>(sequence % 0xffffffffu) + 1;
}

// Doorbell layout, in 4-byte payload words:
//   0: words used (bits 0-7), kind (8-15), type (16-23), op (24-31)
//   1: blocks (0-15), inputs or copies (16-23), outputs (24-31)
//   reduce: 2-3 count, then 2 words per input pointer and per output pointer
//   copies: 2 words each for source, destination and bytes, per copy
// An item that does not fit, or lists more than kInlineRanks ranks (its
// tables), says kind kInMailbox; the worker then reads Mailbox::item (one
// more round trip).
constexpr std::uint32_t kInMailbox = 0xff;

namespace doorbell_detail {
FERRY_HOST_DEVICE void put64(std::uint32_t* words, int* at, std::uint64_t value) {
  words[(*at)++] = static_cast<std::uint32_t>(value);
  words[(*at)++] = static_cast<std::uint32_t>(value >> 32);
}
FERRY_HOST_DEVICE std::uint64_t get64(const std::uint32_t* words, int* at) {
  const std::uint64_t low = words[(*at)++];
  return low | static_cast<std::uint64_t>(words[(*at)++]) << 32;
}
}  // namespace doorbell_detail

// Fills words[0..] with item; returns the words used.
inline int encode_doorbell(const WorkItem& item, std::uint32_t* words) {
  using doorbell_detail::put64;
  int at = 2;
  std::uint32_t kind = static_cast<std::uint32_t>(item.kind), type = 0, op = 0, first = 0, second = 0;
  if (item.kind == WorkKind::kDirectReduce) {
    const DirectReduceArgs& r = item.reduce;
    if (r.table || 2 + 2 + 2 * (r.ninputs + r.noutputs) > kDoorbellWords) {
      kind = kInMailbox;
    } else {
      type = static_cast<std::uint32_t>(r.type);
      op = static_cast<std::uint32_t>(r.op);
      first = static_cast<std::uint32_t>(r.ninputs);
      second = static_cast<std::uint32_t>(r.noutputs);
      put64(words, &at, r.count);
      for (int i = 0; i < r.ninputs; ++i) put64(words, &at, reinterpret_cast<std::uintptr_t>(r.inputs[i]));
      for (int k = 0; k < r.noutputs; ++k) put64(words, &at, reinterpret_cast<std::uintptr_t>(r.outputs[k]));
    }
  } else if ((item.kind == WorkKind::kLlAllreduce || item.kind == WorkKind::kLl128Allreduce) &&
             item.ll.nranks > kInlineRanks) {
    kind = kInMailbox;
  } else if (item.kind == WorkKind::kLlAllreduce || item.kind == WorkKind::kLl128Allreduce) {
    const LlAllreduceArgs& l = item.ll;
    type = static_cast<std::uint32_t>(l.type);
    op = static_cast<std::uint32_t>(l.op);
    first = static_cast<std::uint32_t>(l.rank);
    second = static_cast<std::uint32_t>(l.nranks);
    put64(words, &at, l.count);
    words[at++] = l.flag;
    words[at++] = l.parity << 31 | (l.timeout_ms & 0x7fffffffu);
    put64(words, &at, reinterpret_cast<std::uintptr_t>(l.input));
    put64(words, &at, reinterpret_cast<std::uintptr_t>(l.output));
    for (int r = 0; r < l.nranks; ++r) put64(words, &at, reinterpret_cast<std::uintptr_t>(l.buffers[r]));
  } else if (item.kind == WorkKind::kLlBcast && item.ll_bcast.nranks > kInlineRanks) {
    kind = kInMailbox;
  } else if (item.kind == WorkKind::kLlBcast) {
    const LlBcastArgs& b = item.ll_bcast;
    first = static_cast<std::uint32_t>(b.rank);
    second = static_cast<std::uint32_t>(b.nranks);
    type = static_cast<std::uint32_t>(b.root);
    put64(words, &at, b.bytes);
    words[at++] = b.flag;
    words[at++] = b.parity << 31 | (b.timeout_ms & 0x7fffffffu);
    put64(words, &at, reinterpret_cast<std::uintptr_t>(b.buffer));
    for (int r = 0; r < b.nranks; ++r) put64(words, &at, reinterpret_cast<std::uintptr_t>(b.buffers[r]));
  } else if (item.kind == WorkKind::kLlAlltoallv) {
    const LlAlltoallvArgs& a = item.ll_alltoallv;
    if (a.nranks > kInlineRanks || 2 + 2 + 8 * a.nranks > kDoorbellWords) {
      kind = kInMailbox;
    } else {
      first = static_cast<std::uint32_t>(a.rank);
      second = static_cast<std::uint32_t>(a.nranks);
      words[at++] = a.flag;
      words[at++] = a.parity << 31 | (a.timeout_ms & 0x7fffffffu);
      for (int r = 0; r < a.nranks; ++r) {
        put64(words, &at, reinterpret_cast<std::uintptr_t>(a.send[r]));
        words[at++] = static_cast<std::uint32_t>(a.send_bytes[r]);
        put64(words, &at, reinterpret_cast<std::uintptr_t>(a.recv[r]));
        words[at++] = static_cast<std::uint32_t>(a.recv_bytes[r]);
        put64(words, &at, reinterpret_cast<std::uintptr_t>(a.buffers[r]));
      }
    }
  } else {
    const CopyListArgs& c = item.copies;
    if (2 + 6 * c.count > kDoorbellWords) {
      kind = kInMailbox;
    } else {
      first = static_cast<std::uint32_t>(c.count);
      for (int i = 0; i < c.count; ++i) {
        put64(words, &at, reinterpret_cast<std::uintptr_t>(c.sources[i]));
        put64(words, &at, reinterpret_cast<std::uintptr_t>(c.destinations[i]));
        put64(words, &at, c.bytes[i]);
      }
    }
  }
  if (kind == kInMailbox) at = 2;
  words[0] = static_cast<std::uint32_t>(at) | kind << 8 | type << 16 | op << 24;
  words[1] = static_cast<std::uint32_t>(item.blocks) | first << 16 | second << 24;
  return at;
}

// The words the doorbell says it uses (from word 0).
FERRY_HOST_DEVICE int doorbell_words(std::uint32_t word0) { return static_cast<int>(word0 & 0xff); }

// Whether the item waits in Mailbox::item (from word 0).
FERRY_HOST_DEVICE bool doorbell_in_mailbox(std::uint32_t word0) { return (word0 >> 8 & 0xff) == kInMailbox; }

// The worker blocks the item asks for (from word 1).
FERRY_HOST_DEVICE int doorbell_blocks(std::uint32_t word1) { return static_cast<int>(word1 & 0xffff); }

// Rebuilds the item from the words; false when it waits in Mailbox::item.
FERRY_HOST_DEVICE bool decode_doorbell(const std::uint32_t* words, WorkItem* item) {
  using doorbell_detail::get64;
  if (doorbell_in_mailbox(words[0])) return false;
  const std::uint32_t kind = words[0] >> 8 & 0xff;
  item->kind = static_cast<WorkKind>(kind);
  item->blocks = static_cast<std::int32_t>(words[1] & 0xffff);
  const int first = static_cast<int>(words[1] >> 16 & 0xff);
  int at = 2;
  if (item->kind == WorkKind::kDirectReduce) {
    DirectReduceArgs& r = item->reduce;
    r.type = static_cast<DataType>(words[0] >> 16 & 0xff);
    r.op = static_cast<ReduceOp>(words[0] >> 24 & 0xff);
    r.ninputs = first;
    r.noutputs = static_cast<int>(words[1] >> 24 & 0xff);
    r.count = get64(words, &at);
    for (int i = 0; i < r.ninputs; ++i) r.inputs[i] = reinterpret_cast<const void*>(get64(words, &at));
    for (int k = 0; k < r.noutputs; ++k) r.outputs[k] = reinterpret_cast<void*>(get64(words, &at));
  } else if (item->kind == WorkKind::kLlAllreduce || item->kind == WorkKind::kLl128Allreduce) {
    LlAllreduceArgs& l = item->ll;
    l.type = static_cast<DataType>(words[0] >> 16 & 0xff);
    l.op = static_cast<ReduceOp>(words[0] >> 24 & 0xff);
    l.rank = first;
    l.nranks = static_cast<int>(words[1] >> 24 & 0xff);
    l.count = get64(words, &at);
    l.flag = words[at++];
    l.parity = words[at] >> 31;
    l.timeout_ms = words[at++] & 0x7fffffffu;
    l.input = reinterpret_cast<const void*>(get64(words, &at));
    l.output = reinterpret_cast<void*>(get64(words, &at));
    for (int r = 0; r < l.nranks; ++r) l.buffers[r] = reinterpret_cast<void*>(get64(words, &at));
  } else if (item->kind == WorkKind::kLlBcast) {
    LlBcastArgs& b = item->ll_bcast;
    b.root = static_cast<std::int32_t>(words[0] >> 16 & 0xff);
    b.rank = first;
    b.nranks = static_cast<int>(words[1] >> 24 & 0xff);
    b.bytes = get64(words, &at);
    b.flag = words[at++];
    b.parity = words[at] >> 31;
    b.timeout_ms = words[at++] & 0x7fffffffu;
    b.buffer = reinterpret_cast<void*>(get64(words, &at));
    for (int r = 0; r < b.nranks; ++r) b.buffers[r] = reinterpret_cast<void*>(get64(words, &at));
  } else if (item->kind == WorkKind::kLlAlltoallv) {
    LlAlltoallvArgs& a = item->ll_alltoallv;
    a.rank = first;
    a.nranks = static_cast<int>(words[1] >> 24 & 0xff);
    a.flag = words[at++];
    a.parity = words[at] >> 31;
    a.timeout_ms = words[at++] & 0x7fffffffu;
    for (int r = 0; r < a.nranks; ++r) {
      a.send[r] = reinterpret_cast<const void*>(get64(words, &at));
      a.send_bytes[r] = words[at++];
      a.recv[r] = reinterpret_cast<void*>(get64(words, &at));
      a.recv_bytes[r] = words[at++];
      a.buffers[r] = reinterpret_cast<void*>(get64(words, &at));
    }
  } else {
    CopyListArgs& c = item->copies;
    c.count = first;
    for (int i = 0; i < c.count; ++i) {
      c.sources[i] = reinterpret_cast<const void*>(get64(words, &at));
      c.destinations[i] = reinterpret_cast<void*>(get64(words, &at));
      c.bytes[i] = get64(words, &at);
    }
  }
  return true;
}

// ---- The LL protocol's lines --------------------------------------------

// A 16-byte line: two LL words, 8 data bytes. A chunk of 16 data bytes is
// two lines; sender s's chunk c for a call of parity p among n ranks sits
// in the receiver's buffer at ll_chunk_offset(p, s, c, n).
struct alignas(16) LlLine {
  std::uint32_t data0, flag0, data1, flag1;
};
static_assert(sizeof(LlLine) == 16, "an LL line is one 16-byte store");
constexpr std::size_t kLlChunkBytes = 16;                 // data bytes per chunk
constexpr std::size_t kLlChunkLineBytes = 2 * sizeof(LlLine);
static_assert(kLlSlotAlign % kLlChunkLineBytes == 0 && kLlChunkLineBytes == 2 * kLlChunkBytes,
              "a slot holds whole chunks, as many data bytes as half its size");

FERRY_HOST_DEVICE std::size_t ll_chunk_offset(std::uint32_t parity, int sender, std::size_t chunk, int nranks) {
  return (static_cast<std::size_t>(parity) * nranks + sender) * ll_slot_bytes(nranks) + chunk * kLlChunkLineBytes;
}

// ---- The LL128 protocol's lines --------------------------------------------

// A 128-byte line: 120 data bytes, then the call's flag in both halves of
// the last 8-byte word. Eight lanes of a warp store a line, 16 bytes each,
// in one instruction, and eight lanes of the receiver load it the same way;
// the line moves as one 128-byte transaction, so the flag in it says the
// data in it arrived (NCCL's LL128 rests on the same property of NVLink).
// Sender s's line l for a call of parity p among n ranks sits in the
// receiver's buffer at ll128_line_offset(p, s, l, n).
constexpr std::size_t kLl128LineBytes = 128;
constexpr std::size_t kLl128LineData = 120;
constexpr int kLl128LanesPerLine = 8;
static_assert(kLl128LineBytes == kLl128LanesPerLine * 16 && kLl128LineData == kLl128LineBytes - 8,
              "a line is eight 16-byte stores, the last carrying 8 data bytes and the flag");
static_assert(kLlSlotAlign % kLl128LineBytes == 0, "a slot holds whole LL128 lines");
// What LL128 reduces: sums, minima and maxima of 4- and 8-byte numbers (an
// element of up to 8 bytes never straddles two lines or two lanes). Every
// other pair takes LL; each pair is a kernel ptxas compiles.
template <typename T, ReduceOp Op>
constexpr bool kLl128Reduces =
    (std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, std::int32_t> ||
     std::is_same_v<T, std::int64_t> || std::is_same_v<T, std::uint64_t>) &&
    (Op == ReduceOp::kSum || Op == ReduceOp::kMin || Op == ReduceOp::kMax);
static_assert(kLl128LineData % 8 == 0, "every element LL128 reduces divides a line's data and a lane's");

namespace ll128_detail {
struct Reduces {
  bool reduces = false;
  template <typename T, ReduceOp Op>
  FERRY_HOST_DEVICE void run() {
    reduces = kLl128Reduces<T, Op>;
  }
};
}  // namespace ll128_detail

// kLl128Reduces for a call's type and op.
FERRY_HOST_DEVICE bool ll128_reduces(DataType type, ReduceOp op) {
  ll128_detail::Reduces probe;
  return dispatch_reduction(type, op, probe) && probe.reduces;
}

FERRY_HOST_DEVICE std::size_t ll128_line_offset(std::uint32_t parity, int sender, std::size_t line, int nranks) {
  return (static_cast<std::size_t>(parity) * nranks + sender) * ll_slot_bytes(nranks) + line * kLl128LineBytes;
}

// The flag word of a line: the call's flag in both halves, so that no LL
// word (4 data bytes and an older call's flag) a slot held before reads as it.
FERRY_HOST_DEVICE std::uint64_t ll128_flag_word(std::uint32_t flag) {
  return static_cast<std::uint64_t>(flag) << 32 | flag;
}

}  // namespace ferry

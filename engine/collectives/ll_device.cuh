// The LL protocol on the device: one-shot allreduce, bcast and alltoallv,
// each as one block's share of a call (worker.cu picks the call's blocks
// and reduction). A sender stores 16 data bytes a chunk as two lines, the
// call's flag beside every 4 bytes (worker_common.h), so a receiver that
// sees the flag in every word of a chunk has its data. Loads of user
// buffers bypass L1 (ld.global.cg): a kernel that outlives many calls must
// not see a previous call's data.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "engine/gpu/runtime_device.cuh"
#include "engine/collectives/worker_common.h"
#include "engine/core/pack_device.cuh"

namespace ferry {
namespace ll {

__device__ __forceinline__ void store_line(void* at, std::uint32_t data0, std::uint32_t data1, std::uint32_t flag) {
  volatile_store_16(at, data0, flag, data1, flag);
}

// The abandon word (peer_watch.h) in mapped host memory, or nullptr: set on
// each device by the worker when it is made (worker.cu).
static __device__ const volatile std::uint32_t* g_abandon_word = nullptr;

// A bounded wait's limit, set only once a wait has spun a while: a call
// whose data is already there needs none, and a deadline set at the start
// of every call measured slower on an 8-byte LL allreduce
// (bench/RESULTS.md).
class WaitLimit {
 public:
  __device__ explicit WaitLimit(std::uint32_t timeout_ms) : timeout_ms_(timeout_ms) {}
  // Called every kSpinsPerCheck spins: true once the limit has passed since
  // the first check, or a peer this process waits for has ended.
  __device__ bool passed() {
    if (g_abandon_word && *g_abandon_word) return true;
    if (timeout_ms_ == 0) return false;
    const std::uint64_t now = now_ns();
    if (deadline_ == 0) deadline_ = now + timeout_ms_ * 1000000ull;
    return now > deadline_;
  }
  static constexpr unsigned kSpinsPerCheck = 1024;

 private:
  std::uint32_t timeout_ms_;
  std::uint64_t deadline_ = 0;
};

// Waits until both lines of a chunk carry flag; false on timeout.
static __device__ bool wait_chunk(const void* at, std::uint32_t flag, WaitLimit& limit, uint4* data) {
  for (unsigned spins = 0;; ++spins) {
    std::uint32_t a0, f0, a1, f1, b0, g0, b1, g1;
    volatile_load_16(at, &a0, &f0, &a1, &f1);
    volatile_load_16(static_cast<const char*>(at) + sizeof(LlLine), &b0, &g0, &b1, &g1);
    if (f0 == flag && f1 == flag && g0 == flag && g1 == flag) {
      *data = make_uint4(a0, a1, b0, b1);
      return true;
    }
    if (spins % WaitLimit::kSpinsPerCheck == WaitLimit::kSpinsPerCheck - 1 && limit.passed()) return false;
  }
}

// Up to 16 bytes at `at`, `valid` of them (zeros after): 8- or 4-byte loads
// where `at` allows, bytes otherwise; every bound is a constant, so the
// values stay in registers and every load issues before any is used.
static __device__ uint4 load_bytes(const unsigned char* at, int valid) {
  const std::uintptr_t address = reinterpret_cast<std::uintptr_t>(at);
  std::uint64_t word[2] = {0, 0};
  if (address % 8 == 0 && valid % 8 == 0) {
#pragma unroll
    for (int w = 0; w < 2; ++w)
      if (w < valid / 8) word[w] = load_cg(reinterpret_cast<const unsigned long long*>(at) + w);
  } else if (address % 4 == 0 && valid % 4 == 0) {
    std::uint32_t part[4] = {0, 0, 0, 0};
#pragma unroll
    for (int w = 0; w < 4; ++w)
      if (w < valid / 4) part[w] = load_cg(reinterpret_cast<const unsigned*>(at) + w);
    memcpy(word, part, 16);
  } else {
    unsigned char b[16];
#pragma unroll
    for (int i = 0; i < 16; ++i) b[i] = i < valid ? load_cg(at + i) : 0;
    memcpy(word, b, 16);
  }
  uint4 v;
  memcpy(&v, word, 16);
  return v;
}

// The first `valid` of v's 16 bytes to `at`, in the widest stores `at`
// allows (as load_bytes).
static __device__ void store_bytes(unsigned char* at, int valid, uint4 v) {
  const std::uintptr_t address = reinterpret_cast<std::uintptr_t>(at);
  if (address % 8 == 0 && valid % 8 == 0) {
    std::uint64_t word[2];
    memcpy(word, &v, 16);
#pragma unroll
    for (int w = 0; w < 2; ++w)
      if (w < valid / 8) reinterpret_cast<unsigned long long*>(at)[w] = word[w];
  } else if (address % 4 == 0 && valid % 4 == 0) {
    std::uint32_t part[4];
    memcpy(part, &v, 16);
#pragma unroll
    for (int w = 0; w < 4; ++w)
      if (w < valid / 4) reinterpret_cast<unsigned*>(at)[w] = part[w];
  } else {
    unsigned char b[16];
    memcpy(b, &v, 16);
#pragma unroll
    for (int i = 0; i < 16; ++i)
      if (i < valid) at[i] = b[i];
  }
}

// The data bytes of chunk c, at most a chunk.
__device__ __forceinline__ int chunk_valid(std::size_t c, std::size_t bytes) {
  const std::size_t left = bytes - c * kLlChunkBytes;
  return static_cast<int>(left < kLlChunkBytes ? left : kLlChunkBytes);
}

// 16 data bytes of chunk c of buffer (zeros past bytes). A short or
// unaligned chunk is read in the widest loads its address allows (one
// 8-byte load for an 8-byte call, which byte loads made measurably slower
// than a 32-byte call; bench/RESULTS.md).
static __device__ uint4 load_chunk(const unsigned char* buffer, std::size_t c, std::size_t bytes) {
  const unsigned char* at = buffer + c * kLlChunkBytes;
  if (reinterpret_cast<std::uintptr_t>(at) % 16 == 0 && (c + 1) * kLlChunkBytes <= bytes)
    return load_cg(reinterpret_cast<const uint4*>(at));
  return load_bytes(at, chunk_valid(c, bytes));
}

static __device__ void store_chunk(unsigned char* buffer, std::size_t c, std::size_t bytes, uint4 v) {
  unsigned char* at = buffer + c * kLlChunkBytes;
  if (reinterpret_cast<std::uintptr_t>(at) % 16 == 0 && (c + 1) * kLlChunkBytes <= bytes) {
    *reinterpret_cast<uint4*>(at) = v;
    return;
  }
  store_bytes(at, chunk_valid(c, bytes), v);
}

// This thread's chunks of an LL call shared by `blocks` blocks: chunk c
// belongs to thread c mod (blocks x threads), on every rank alike.
struct ChunkWalk {
  std::size_t first, stride;
  __device__ ChunkWalk(unsigned block, unsigned blocks)
      : first(static_cast<std::size_t>(block) * blockDim.x + threadIdx.x),
        stride(static_cast<std::size_t>(blocks) * blockDim.x) {}
};

static __device__ std::size_t chunks_of(std::size_t bytes) { return (bytes + kLlChunkBytes - 1) / kLlChunkBytes; }

// How an LL allreduce reduces a 16-byte pack of peer data into its own:
// the one step that depends on (type, op). The pairs most calls reduce
// each get a body of their own, inlined into the kernel (TypedPackReduce);
// every other pair shares one body that picks its reduction per pack
// (AnyPackReduce). A body per pair behind a call measured slower on an
// 8-byte call, mostly the call's saved registers coming back from local
// memory, which the worker's fences leave out of L1; choosing per pack
// measured slower than a body of its own, at 8 bytes and more so at
// 32-256 KiB between two ranks (bench/RESULTS.md).
template <typename T, ReduceOp Op>
struct TypedPackReduce {
  __device__ void operator()(uint4& acc, const uint4& value) const {
    Pack<T> into, from;
    memcpy(&into, &acc, 16);
    memcpy(&from, &value, 16);
    into = reduce_pack<T, Op>(into, from);
    memcpy(&acc, &into, 16);
  }
};

struct AnyPackReduce {
  DataType type;
  ReduceOp op;

  struct Visitor {
    uint4& acc;
    const uint4& value;
    template <typename T, ReduceOp Op>
    __device__ void run() {
      TypedPackReduce<T, Op>{}(acc, value);
    }
  };
  __device__ void operator()(uint4& acc, const uint4& value) const {
    Visitor visitor{acc, value};
    dispatch_reduction(type, op, visitor);
  }
};

// The size of a (type, op) pair's element, through dispatch_reduction.
struct ElementBytes {
  std::size_t bytes = 0;
  template <typename T, ReduceOp Op>
  __device__ void run() {
    bytes = sizeof(T);
  }
};

// Rank p's receive buffer: inline, or past kInlineRanks from the table.
template <typename LlArgs>
__device__ __forceinline__ void* peer_buffer(const LlArgs& a, int p) {
  return p < kInlineRanks ? a.buffers[p] : load_cg(a.buffer_table + p);
}

// An alltoallv's blocks with peer p: inline, or past kInlineRanks from the
// call's table (read past L1: the next call rewrites it).
__device__ __forceinline__ LlBlocks blocks_with(const LlAlltoallvArgs& a, int p) {
  if (p < kInlineRanks) return {a.send[p], a.send_bytes[p], a.recv[p], a.recv_bytes[p]};
  const LlBlocks* b = a.block_table + p;
  return {load_cg(&b->send), load_cg(&b->send_bytes), load_cg(&b->recv), load_cg(&b->recv_bytes)};
}

// Every thread sends its chunks to every peer first, then reduces, in rank
// order (the same result on every rank), what arrives for them. Its own
// chunk is read again for the reduction: no other thread writes it, even
// in place.
template <typename PackReduce>
__device__ __forceinline__ bool allreduce_share(const LlAllreduceArgs& a, std::size_t element_bytes,
                                                PackReduce reduce, unsigned block, unsigned blocks) {
  const std::size_t bytes = a.count * element_bytes;
  const std::size_t chunks = chunks_of(bytes);
  const auto* input = static_cast<const unsigned char*>(a.input);
  const ChunkWalk walk(block, blocks);
  for (std::size_t c = walk.first; c < chunks; c += walk.stride) {
    const uint4 own = load_chunk(input, c, bytes);
    for (int p = 0; p < a.nranks; ++p) {
      if (p == a.rank) continue;
      char* line = static_cast<char*>(peer_buffer(a, p)) + ll_chunk_offset(a.parity, a.rank, c, a.nranks);
      store_line(line, own.x, own.y, a.flag);
      store_line(line + sizeof(LlLine), own.z, own.w, a.flag);
    }
  }
  WaitLimit limit(a.timeout_ms);
  bool ok = true;
  const char* own_buffer = static_cast<const char*>(peer_buffer(a, a.rank));
  for (std::size_t c = walk.first; c < chunks && ok; c += walk.stride) {
    uint4 acc;
    const uint4 own = load_chunk(input, c, bytes);  // in flight while the peers' lines are polled
    for (int r = 0; r < a.nranks && ok; ++r) {
      uint4 data;
      if (r == a.rank) {
        data = own;
      } else {
        ok = wait_chunk(own_buffer + ll_chunk_offset(a.parity, r, c, a.nranks), a.flag, limit, &data);
      }
      if (r == 0)
        acc = data;
      else
        reduce(acc, data);
    }
    if (ok) store_chunk(static_cast<unsigned char*>(a.output), c, bytes, acc);
  }
  return ok;
}

// Where an LL call's lines go and come from.
struct Route {
  std::uint32_t parity;
  int nranks;
  std::uint32_t flag;
};

// This thread's chunks of src into sender's slot of a receiver's buffer.
static __device__ void send_chunks(void* receiver_buffer, const Route& route, int sender, const void* src,
                                   std::size_t bytes, const ChunkWalk& walk) {
  for (std::size_t c = walk.first; c < chunks_of(bytes); c += walk.stride) {
    const uint4 v = load_chunk(static_cast<const unsigned char*>(src), c, bytes);
    char* line = static_cast<char*>(receiver_buffer) + ll_chunk_offset(route.parity, sender, c, route.nranks);
    store_line(line, v.x, v.y, route.flag);
    store_line(line + sizeof(LlLine), v.z, v.w, route.flag);
  }
}

// This thread's chunks from sender's slot of this rank's buffer into dst;
// false on timeout.
static __device__ bool receive_chunks(const void* own_buffer, const Route& route, int sender, void* dst,
                                      std::size_t bytes, WaitLimit& limit, const ChunkWalk& walk) {
  for (std::size_t c = walk.first; c < chunks_of(bytes); c += walk.stride) {
    uint4 v;
    if (!wait_chunk(static_cast<const char*>(own_buffer) + ll_chunk_offset(route.parity, sender, c, route.nranks),
                    route.flag, limit, &v))
      return false;
    store_chunk(static_cast<unsigned char*>(dst), c, bytes, v);
  }
  return true;
}

// The root stores its chunks into every other rank's buffer; the others
// wait for them. False on timeout.
static __device__ bool bcast_share(const LlBcastArgs& b, unsigned block, unsigned blocks) {
  const Route route{b.parity, b.nranks, b.flag};
  const ChunkWalk walk(block, blocks);
  if (b.rank == b.root) {
    for (int p = 0; p < b.nranks; ++p)
      if (p != b.root) send_chunks(peer_buffer(b, p), route, b.root, b.buffer, b.bytes, walk);
    return true;
  }
  WaitLimit limit(b.timeout_ms);
  return receive_chunks(peer_buffer(b, b.rank), route, b.root, b.buffer, b.bytes, limit, walk);
}

// Every block goes to its peer first, this rank's own block is copied, then
// the peers' blocks are waited for. False on timeout.
static __device__ bool alltoallv_share(const LlAlltoallvArgs& a, unsigned block, unsigned blocks) {
  const Route route{a.parity, a.nranks, a.flag};
  const ChunkWalk walk(block, blocks);
  for (int p = 0; p < a.nranks; ++p) {
    if (p == a.rank) continue;
    const LlBlocks blocks = blocks_with(a, p);
    if (blocks.send_bytes > 0) send_chunks(peer_buffer(a, p), route, a.rank, blocks.send, blocks.send_bytes, walk);
  }
  const LlBlocks mine = blocks_with(a, a.rank);
  const std::size_t own = mine.recv_bytes;
  for (std::size_t c = walk.first; c < chunks_of(own); c += walk.stride)
    store_chunk(static_cast<unsigned char*>(mine.recv), c, own,
                load_chunk(static_cast<const unsigned char*>(mine.send), c, own));
  WaitLimit limit(a.timeout_ms);
  bool ok = true;
  const void* own_buffer = peer_buffer(a, a.rank);
  for (int p = 0; p < a.nranks && ok; ++p) {
    if (p == a.rank) continue;
    const LlBlocks blocks = blocks_with(a, p);
    if (blocks.recv_bytes > 0) ok = receive_chunks(own_buffer, route, p, blocks.recv, blocks.recv_bytes, limit, walk);
  }
  return ok;
}

}  // namespace ll
}  // namespace ferry

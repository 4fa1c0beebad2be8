// The engine worker on CUDA: one persistent kernel per communicator and
// device (worker.h). Block 0 polls the mailbox in mapped host memory; an
// item small enough for one block runs there alone, a larger one is
// published in device memory to the other blocks, which poll that instead
// (an L2 load rather than a PCIe round trip), and the blocks it asks for
// share it; each reports its share done in the mailbox itself: no block
// waits for another. Loads of user and peer buffers bypass L1
// (ld.global.cg): a kernel that outlives many calls must not see a
// previous call's data.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "engine/collectives/device_sync.cuh"
#include "engine/core/pack_device.cuh"
#include "engine/collectives/worker.h"
#include "engine/collectives/worker_common.h"
#ifdef FERRY_WORKER_TIMELINE
#include <cstdio>

#include "engine/common/params.h"
#endif

namespace ferry {
namespace {

constexpr int kWorkerThreads = 512;

Status from_cuda(cudaError_t error, const char* what) {
  if (error == cudaSuccess) return Status::kOk;
  cudaGetLastError();
  FERRY_WARN(Coll, "engine worker: %s: %s", what, cudaGetErrorString(error));
  return Status::kGpuError;
}
#define FERRY_CUDA(call) from_cuda((call), #call)
constexpr int kUnroll = 4;  // independent 16-byte loads in flight per thread and input

#ifdef FERRY_WORKER_TIMELINE
// Diagnostic builds only (cmake -DFERRY_WORKER_TIMELINE=ON): block 0's time
// in each phase of its items, summed on the GPU and printed (FERRY_STATS)
// when the worker goes away. Phases: the doorbell seen to the item decoded
// and every thread told; the block's share; the fence before the report.
enum TimelinePhase { kTimelineTake, kTimelineRun, kTimelineFence, kTimelinePhases };
__device__ unsigned long long g_timeline_ns[kTimelinePhases];
__device__ unsigned long long g_timeline_items;
#endif

// What the worker's blocks share in device memory. Block 0 passes an item
// shared among all blocks on as its doorbell words, again as LL words
// flagged with the item's sequence (and the sequence itself as two more),
// so the other blocks see it complete in one read of L2.
struct WorkerState {
  std::uint64_t left_launch;  // blocks of this launch number (and earlier) leave
  std::uint64_t reserved;
  std::uint64_t words[kDoorbellWords];
  std::uint64_t sequence[2];  // low and high halves
  WorkItem item;              // an item too large for the doorbell
};
static_assert(sizeof(WorkItem) % sizeof(std::uint64_t) == 0, "work items are copied in 8-byte words");

// This block's share of a direct reduce (kernels.cu's, over block/blocks).
template <typename T, ReduceOp Op>
__device__ __forceinline__ void reduce_share(const DirectReduceArgs& a, unsigned block, unsigned blocks) {
  bool aligned = true;
  for (int r = 0; r < a.ninputs; ++r) aligned = aligned && reinterpret_cast<std::uintptr_t>(a.inputs[r]) % 16 == 0;
  for (int k = 0; k < a.noutputs; ++k) aligned = aligned && reinterpret_cast<std::uintptr_t>(a.outputs[k]) % 16 == 0;
  const std::size_t packs = aligned ? a.count / Pack<T>::kCount : 0;
  const std::size_t stride = static_cast<std::size_t>(blocks) * kWorkerThreads * kUnroll;
  for (std::size_t base = static_cast<std::size_t>(block) * kWorkerThreads * kUnroll + threadIdx.x; base < packs;
       base += stride) {
    Pack<T> acc[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const std::size_t p = base + u * kWorkerThreads;
      if (p < packs) acc[u] = load_cg(static_cast<const Pack<T>*>(a.inputs[0]) + p);
    }
    for (int r = 1; r < a.ninputs; ++r) {
      Pack<T> in[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const std::size_t p = base + u * kWorkerThreads;
        if (p < packs) in[u] = load_cg(static_cast<const Pack<T>*>(a.inputs[r]) + p);
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) acc[u] = reduce_pack<T, Op>(acc[u], in[u]);
    }
    for (int k = 0; k < a.noutputs; ++k) {
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const std::size_t p = base + u * kWorkerThreads;
        if (p < packs) static_cast<Pack<T>*>(a.outputs[k])[p] = acc[u];
      }
    }
  }
  for (std::size_t i = packs * Pack<T>::kCount + static_cast<std::size_t>(block) * kWorkerThreads + threadIdx.x;
       i < a.count; i += static_cast<std::size_t>(blocks) * kWorkerThreads) {
    T acc = load_cg(static_cast<const T*>(a.inputs[0]) + i);
    for (int r = 1; r < a.ninputs; ++r) acc = reduce<T, Op>(acc, load_cg(static_cast<const T*>(a.inputs[r]) + i));
    for (int k = 0; k < a.noutputs; ++k) static_cast<T*>(a.outputs[k])[i] = acc;
  }
}

struct WorkerReduce {
  const DirectReduceArgs& args;
  unsigned block, blocks;

  template <typename T, ReduceOp Op>
  __device__ void run() {
    reduce_share<T, Op>(args, block, blocks);
  }
};

// This block's share of each copy (pack_device.cuh).
__device__ __noinline__ void copy_share(const CopyListArgs& c, unsigned block, unsigned blocks) {
  copy_list_part<kWorkerThreads, kUnroll>(c, block, blocks);
}

// ---- The LL protocol: one-shot allreduce, bcast, alltoallv ------------------

__device__ __forceinline__ void store_line(void* at, std::uint32_t data0, std::uint32_t data1, std::uint32_t flag) {
  asm volatile("st.volatile.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(at), "r"(data0), "r"(flag), "r"(data1),
               "r"(flag)
               : "memory");
}

// A bounded wait's limit, set only once a wait has spun a while: a call
// whose data is already there needs none, and a deadline set at the start
// of every call measured 0.25 us slower on an 8-byte LL allreduce on one
// H200 (bench/RESULTS.md).
class WaitLimit {
 public:
  __device__ explicit WaitLimit(std::uint32_t timeout_ms) : timeout_ms_(timeout_ms) {}
  // Called every kSpinsPerCheck spins: true once the limit has passed since
  // the first check.
  __device__ bool passed() {
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
__device__ bool wait_chunk(const void* at, std::uint32_t flag, WaitLimit& limit, uint4* data) {
  for (unsigned spins = 0;; ++spins) {
    std::uint32_t a0, f0, a1, f1, b0, g0, b1, g1;
    asm volatile("ld.volatile.global.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(a0), "=r"(f0), "=r"(a1), "=r"(f1)
                 : "l"(at)
                 : "memory");
    asm volatile("ld.volatile.global.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(b0), "=r"(g0), "=r"(b1), "=r"(g1)
                 : "l"(static_cast<const char*>(at) + sizeof(LlLine))
                 : "memory");
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
__device__ uint4 load_bytes(const unsigned char* at, int valid) {
  const std::uintptr_t address = reinterpret_cast<std::uintptr_t>(at);
  std::uint64_t word[2] = {0, 0};
  if (address % 8 == 0 && valid % 8 == 0) {
#pragma unroll
    for (int w = 0; w < 2; ++w)
      if (w < valid / 8) word[w] = __ldcg(reinterpret_cast<const unsigned long long*>(at) + w);
  } else if (address % 4 == 0 && valid % 4 == 0) {
    std::uint32_t part[4] = {0, 0, 0, 0};
#pragma unroll
    for (int w = 0; w < 4; ++w)
      if (w < valid / 4) part[w] = __ldcg(reinterpret_cast<const unsigned*>(at) + w);
    memcpy(word, part, 16);
  } else {
    unsigned char b[16];
#pragma unroll
    for (int i = 0; i < 16; ++i) b[i] = i < valid ? __ldcg(at + i) : 0;
    memcpy(word, b, 16);
  }
  uint4 v;
  memcpy(&v, word, 16);
  return v;
}

__device__ void store_bytes(unsigned char* at, int valid, uint4 v) {
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
// 8-byte load for an 8-byte call, where byte loads cost it 0.5-0.8 us more
// than a 32-byte call on 2x H200).
__device__ uint4 load_chunk(const unsigned char* buffer, std::size_t c, std::size_t bytes) {
  const unsigned char* at = buffer + c * kLlChunkBytes;
  if (reinterpret_cast<std::uintptr_t>(at) % 16 == 0 && (c + 1) * kLlChunkBytes <= bytes)
    return __ldcg(reinterpret_cast<const uint4*>(at));
  return load_bytes(at, chunk_valid(c, bytes));
}

__device__ void store_chunk(unsigned char* buffer, std::size_t c, std::size_t bytes, uint4 v) {
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

__device__ std::size_t chunks_of(std::size_t bytes) { return (bytes + kLlChunkBytes - 1) / kLlChunkBytes; }

// How an LL allreduce reduces a 16-byte pack of peer data into its own:
// the one step that depends on (type, op). The pairs most calls reduce
// each get a body of their own, inlined into the kernel (TypedPackReduce);
// every other pair shares one body that picks its reduction per pack
// (AnyPackReduce). A body per pair behind a call cost an 8-byte call
// 0.6 us on one H200, mostly the call's saved registers coming back from
// local memory, which the worker's fences leave out of L1; choosing per
// pack cost 0.15 us more than a body of its own at 8 bytes, and up to 0.7
// at 32-256 KiB between two ranks (bench/RESULTS.md).
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

struct ElementBytes {
  std::size_t bytes = 0;
  template <typename T, ReduceOp Op>
  __device__ void run() {
    bytes = sizeof(T);
  }
};

// Every thread sends its chunks to every peer first, then reduces, in rank
// order (the same result on every rank), what arrives for them. Its own
// chunk is read again for the reduction: no other thread writes it, even
// in place.
template <typename PackReduce>
__device__ __forceinline__ bool ll_allreduce_share(const LlAllreduceArgs& a, std::size_t element_bytes,
                                                   PackReduce reduce, unsigned block, unsigned blocks) {
  const std::size_t bytes = a.count * element_bytes;
  const std::size_t chunks = chunks_of(bytes);
  const auto* input = static_cast<const unsigned char*>(a.input);
  const ChunkWalk walk(block, blocks);
  for (std::size_t c = walk.first; c < chunks; c += walk.stride) {
    const uint4 own = load_chunk(input, c, bytes);
    for (int p = 0; p < a.nranks; ++p) {
      if (p == a.rank) continue;
      char* line = static_cast<char*>(a.buffers[p]) + ll_chunk_offset(a.parity, a.rank, c, a.nranks);
      store_line(line, own.x, own.y, a.flag);
      store_line(line + sizeof(LlLine), own.z, own.w, a.flag);
    }
  }
  WaitLimit limit(a.timeout_ms);
  bool ok = true;
  for (std::size_t c = walk.first; c < chunks && ok; c += walk.stride) {
    uint4 acc;
    const uint4 own = load_chunk(input, c, bytes);  // in flight while the peers' lines are polled
    for (int r = 0; r < a.nranks && ok; ++r) {
      uint4 data;
      if (r == a.rank) {
        data = own;
      } else {
        ok = wait_chunk(static_cast<const char*>(a.buffers[a.rank]) + ll_chunk_offset(a.parity, r, c, a.nranks),
                        a.flag, limit, &data);
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
struct LlRoute {
  std::uint32_t parity;
  int nranks;
  std::uint32_t flag;
};

// This thread's chunks of src into sender's slot of a receiver's buffer.
__device__ void ll_send(void* receiver_buffer, const LlRoute& route, int sender, const void* src, std::size_t bytes,
                        const ChunkWalk& walk) {
  for (std::size_t c = walk.first; c < chunks_of(bytes); c += walk.stride) {
    const uint4 v = load_chunk(static_cast<const unsigned char*>(src), c, bytes);
    char* line = static_cast<char*>(receiver_buffer) + ll_chunk_offset(route.parity, sender, c, route.nranks);
    store_line(line, v.x, v.y, route.flag);
    store_line(line + sizeof(LlLine), v.z, v.w, route.flag);
  }
}

// This thread's chunks from sender's slot of this rank's buffer into dst;
// false on timeout.
__device__ bool ll_receive(const void* own_buffer, const LlRoute& route, int sender, void* dst, std::size_t bytes,
                           WaitLimit& limit, const ChunkWalk& walk) {
  for (std::size_t c = walk.first; c < chunks_of(bytes); c += walk.stride) {
    uint4 v;
    if (!wait_chunk(static_cast<const char*>(own_buffer) + ll_chunk_offset(route.parity, sender, c, route.nranks),
                    route.flag, limit, &v))
      return false;
    store_chunk(static_cast<unsigned char*>(dst), c, bytes, v);
  }
  return true;
}

__device__ bool ll_bcast_share(const LlBcastArgs& b, unsigned block, unsigned blocks) {
  const LlRoute route{b.parity, b.nranks, b.flag};
  const ChunkWalk walk(block, blocks);
  if (b.rank == b.root) {
    for (int p = 0; p < b.nranks; ++p)
      if (p != b.root) ll_send(b.buffers[p], route, b.root, b.buffer, b.bytes, walk);
    return true;
  }
  WaitLimit limit(b.timeout_ms);
  return ll_receive(b.buffers[b.rank], route, b.root, b.buffer, b.bytes, limit, walk);
}

__device__ bool ll_alltoallv_share(const LlAlltoallvArgs& a, unsigned block, unsigned blocks) {
  const LlRoute route{a.parity, a.nranks, a.flag};
  const ChunkWalk walk(block, blocks);
  for (int p = 0; p < a.nranks; ++p)
    if (p != a.rank && a.send_bytes[p] > 0) ll_send(a.buffers[p], route, a.rank, a.send[p], a.send_bytes[p], walk);
  const std::size_t own = a.recv_bytes[a.rank];
  for (std::size_t c = walk.first; c < chunks_of(own); c += walk.stride)
    store_chunk(static_cast<unsigned char*>(a.recv[a.rank]), c, own,
                load_chunk(static_cast<const unsigned char*>(a.send[a.rank]), c, own));
  WaitLimit limit(a.timeout_ms);
  bool ok = true;
  for (int p = 0; p < a.nranks && ok; ++p)
    if (p != a.rank && a.recv_bytes[p] > 0)
      ok = ll_receive(a.buffers[a.rank], route, p, a.recv[p], a.recv_bytes[p], limit, walk);
  return ok;
}

// ---- The LL128 protocol: one-shot allreduce ---------------------------------

constexpr unsigned kFullWarp = 0xffffffffu;

// A lane's part of line l: 16 data bytes for lanes 0-6 of its eight, 8 for
// lane 7 (whose other 8 carry the flag); fewer at the end of the data.
struct Ll128Part {
  std::size_t offset;  // into the data
  int valid;           // data bytes this lane carries here (0: none)
};
__device__ Ll128Part ll128_part(std::size_t line, unsigned lane_in_line, std::size_t bytes) {
  const std::size_t offset = line * kLl128LineData + lane_in_line * 16;
  const std::size_t carries = lane_in_line == kLl128LanesPerLine - 1 ? 8 : 16;
  return {offset, offset >= bytes ? 0 : static_cast<int>(bytes - offset < carries ? bytes - offset : carries)};
}

__device__ __forceinline__ void store_ll128(void* at, std::uint64_t low, std::uint64_t high) {
  asm volatile("st.volatile.global.v2.u64 [%0], {%1, %2};" ::"l"(at), "l"(low), "l"(high) : "memory");
}
__device__ __forceinline__ void load_ll128(const void* at, std::uint64_t* low, std::uint64_t* high) {
  asm volatile("ld.volatile.global.v2.u64 {%0, %1}, [%2];" : "=l"(*low), "=l"(*high) : "l"(at) : "memory");
}

// The lines of an LL128 call shared by `blocks` blocks go to warps,
// kLl128Unroll batches of four lines at a time (eight lanes a line, every
// load of a batch in flight at once), on every rank alike. Every loop over
// them is uniform across the warp, so a line's eight stores (and loads)
// issue as one instruction: the line's atomicity needs that.
constexpr int kLl128Unroll = 1;  // lines a lane has in flight (4 ran ptxas out of 24 GB)
constexpr unsigned kLinesPerWarpBatch = 32 / kLl128LanesPerLine;

struct Ll128Walk {
  std::size_t first, stride;  // in lines
  unsigned line_in_batch, lane_in_line;
  __device__ Ll128Walk(unsigned block, unsigned blocks) {
    const unsigned warps_per_block = blockDim.x / 32;
    const std::size_t lines_per_warp = kLinesPerWarpBatch * kLl128Unroll;
    first = (static_cast<std::size_t>(block) * warps_per_block + threadIdx.x / 32) * lines_per_warp;
    stride = static_cast<std::size_t>(blocks) * warps_per_block * lines_per_warp;
    line_in_batch = threadIdx.x % 32 / kLl128LanesPerLine;
    lane_in_line = threadIdx.x % kLl128LanesPerLine;
  }
  __device__ std::size_t line(std::size_t base, int u) const { return base + u * kLinesPerWarpBatch + line_in_batch; }
};

__device__ std::size_t ll128_lines_of(std::size_t bytes) { return (bytes + kLl128LineData - 1) / kLl128LineData; }

// Waits until this lane's lines (those `active`) carry flag, for the whole
// warp at once (the wait is warp-uniform); false on timeout.
__device__ bool wait_ll128(const char* const (&at)[kLl128Unroll], const bool (&active)[kLl128Unroll], bool flag_lane,
                           std::uint64_t flag_word, WaitLimit& limit, uint4 (&data)[kLl128Unroll]) {
  for (unsigned spins = 0;; ++spins) {
    std::uint64_t low[kLl128Unroll], high[kLl128Unroll];
#pragma unroll
    for (int u = 0; u < kLl128Unroll; ++u) {
      low[u] = high[u] = 0;
      if (active[u]) load_ll128(at[u], &low[u], &high[u]);
    }
    bool missing = false;
#pragma unroll
    for (int u = 0; u < kLl128Unroll; ++u) missing = missing || (active[u] && flag_lane && high[u] != flag_word);
    if (!__any_sync(kFullWarp, missing)) {
#pragma unroll
      for (int u = 0; u < kLl128Unroll; ++u) {
        if (flag_lane) high[u] = 0;
        data[u] = make_uint4(static_cast<unsigned>(low[u]), static_cast<unsigned>(low[u] >> 32),
                             static_cast<unsigned>(high[u]), static_cast<unsigned>(high[u] >> 32));
      }
      return true;
    }
    if (spins % WaitLimit::kSpinsPerCheck == WaitLimit::kSpinsPerCheck - 1 && __any_sync(kFullWarp, limit.passed()))
      return false;
  }
}

// This warp's lines of the input (bytes of it) into every peer's buffer:
// the same for every element type, so compiled once.
__device__ __noinline__ void ll128_send_share(const LlAllreduceArgs& a, std::size_t bytes, unsigned block,
                                              unsigned blocks) {
  const std::size_t lines = ll128_lines_of(bytes);
  const auto* input = static_cast<const unsigned char*>(a.input);
  const Ll128Walk walk(block, blocks);
  const std::uint64_t flag_word = ll128_flag_word(a.flag);
  const bool flag_lane = walk.lane_in_line == kLl128LanesPerLine - 1;
  const std::size_t lane_offset = walk.lane_in_line * 16;
  for (std::size_t base = walk.first; base < lines; base += walk.stride) {
    std::uint64_t low[kLl128Unroll], high[kLl128Unroll];
    bool active[kLl128Unroll];
#pragma unroll
    for (int u = 0; u < kLl128Unroll; ++u) {
      const std::size_t line = walk.line(base, u);
      active[u] = line < lines;
      const Ll128Part part = ll128_part(line, walk.lane_in_line, bytes);
      const uint4 own = active[u] ? load_bytes(input + part.offset, part.valid) : make_uint4(0, 0, 0, 0);
      low[u] = static_cast<std::uint64_t>(own.y) << 32 | own.x;
      high[u] = flag_lane ? flag_word : static_cast<std::uint64_t>(own.w) << 32 | own.z;
    }
    for (int p = 0; p < a.nranks; ++p) {
      if (p == a.rank) continue;
      char* slot = static_cast<char*>(a.buffers[p]) + ll128_line_offset(a.parity, a.rank, 0, a.nranks) + lane_offset;
      __syncwarp();
#pragma unroll
      for (int u = 0; u < kLl128Unroll; ++u)
        if (active[u]) store_ll128(slot + walk.line(base, u) * kLl128LineBytes, low[u], high[u]);
    }
  }
}

// One-shot over LL128, once every warp has stored its lines of the input
// into every peer's buffer (ll128_send_share): reduces, in rank order, the
// lines that arrive.
template <typename T, ReduceOp Op>
__device__ __forceinline__ bool ll128_allreduce_share(const LlAllreduceArgs& a, unsigned block, unsigned blocks) {
  const std::size_t bytes = a.count * sizeof(T);
  const std::size_t lines = ll128_lines_of(bytes);
  const auto* input = static_cast<const unsigned char*>(a.input);
  const Ll128Walk walk(block, blocks);
  const std::uint64_t flag_word = ll128_flag_word(a.flag);
  const bool flag_lane = walk.lane_in_line == kLl128LanesPerLine - 1;
  const std::size_t lane_offset = walk.lane_in_line * 16;
  WaitLimit limit(a.timeout_ms);
  bool ok = true;
  for (std::size_t base = walk.first; base < lines && ok; base += walk.stride) {
    bool active[kLl128Unroll];
    Ll128Part part[kLl128Unroll];
#pragma unroll
    for (int u = 0; u < kLl128Unroll; ++u) {
      active[u] = walk.line(base, u) < lines;
      part[u] = ll128_part(walk.line(base, u), walk.lane_in_line, bytes);
    }
    Pack<T> acc[kLl128Unroll];
    for (int r = 0; r < a.nranks && ok; ++r) {
      uint4 data[kLl128Unroll];
      if (r == a.rank) {
#pragma unroll
        for (int u = 0; u < kLl128Unroll; ++u)
          data[u] = active[u] ? load_bytes(input + part[u].offset, part[u].valid) : make_uint4(0, 0, 0, 0);
      } else {
        const char* slot =
            static_cast<const char*>(a.buffers[a.rank]) + ll128_line_offset(a.parity, r, 0, a.nranks) + lane_offset;
        const char* at[kLl128Unroll];
#pragma unroll
        for (int u = 0; u < kLl128Unroll; ++u) at[u] = slot + (active[u] ? walk.line(base, u) : 0) * kLl128LineBytes;
        __syncwarp();
        ok = wait_ll128(at, active, flag_lane, flag_word, limit, data);
      }
#pragma unroll
      for (int u = 0; u < kLl128Unroll; ++u) {
        Pack<T> value;
        memcpy(&value, &data[u], 16);
        acc[u] = r == 0 ? value : reduce_pack<T, Op>(acc[u], value);
      }
    }
#pragma unroll
    for (int u = 0; u < kLl128Unroll; ++u) {
      uint4 result;
      memcpy(&result, &acc[u], 16);
      if (ok && active[u] && part[u].valid > 0)
        store_bytes(static_cast<unsigned char*>(a.output) + part[u].offset, part[u].valid, result);
    }
  }
  return ok;
}

struct WorkerLl128Allreduce {
  const LlAllreduceArgs& args;
  unsigned block, blocks;
  bool ok = true;

  template <typename T, ReduceOp Op>
  __device__ void run() {
    if constexpr (kLl128Reduces<T, Op>) ok = ll128_allreduce_share<T, Op>(args, block, blocks);
  }
};

// Direct reduces and LL128 allreduces: one function per kind of item,
// every (type, op) pair's body inlined into it, so the kernel calls a
// handful of functions rather than one per pair. Each call site costs
// every thread a save area of stack, and the driver sets aside stack for
// every thread the GPU can hold: with a call per pair, 25 KB a thread,
// 6.4 GB of an H200 while the worker runs (bench/worker-latency).
__device__ __noinline__ bool direct_reduce_item(const DirectReduceArgs& args, unsigned block, unsigned blocks) {
  WorkerReduce visitor{args, block, blocks};
  return dispatch_reduction(args.type, args.op, visitor);
}

__device__ __noinline__ int ll128_allreduce_item(const LlAllreduceArgs& args, unsigned block, unsigned blocks) {
  if (!ll128_reduces(args.type, args.op)) return -1;
  ElementBytes element;
  dispatch_reduction(args.type, args.op, element);
  ll128_send_share(args, args.count * element.bytes, block, blocks);
  WorkerLl128Allreduce visitor{args, block, blocks};
  dispatch_reduction(args.type, args.op, visitor);
  return visitor.ok;
}

// An LL allreduce: 1 done, 0 timed out, -1 a pair MPI does not define.
// Sums of floats, doubles and 32- and 64-bit integers, and minima and
// maxima of doubles (time steps, norms) have bodies of their own.
__device__ __forceinline__ int ll_allreduce_item(const LlAllreduceArgs& a, unsigned block, unsigned blocks) {
  using Op = ReduceOp;
  const auto is = [&](DataType type, ReduceOp op) { return a.type == type && a.op == op; };
  if (is(DataType::kFloat32, Op::kSum))
    return ll_allreduce_share(a, 4, TypedPackReduce<float, Op::kSum>{}, block, blocks);
  if (is(DataType::kFloat64, Op::kSum))
    return ll_allreduce_share(a, 8, TypedPackReduce<double, Op::kSum>{}, block, blocks);
  if (is(DataType::kFloat64, Op::kMin))
    return ll_allreduce_share(a, 8, TypedPackReduce<double, Op::kMin>{}, block, blocks);
  if (is(DataType::kFloat64, Op::kMax))
    return ll_allreduce_share(a, 8, TypedPackReduce<double, Op::kMax>{}, block, blocks);
  if (is(DataType::kInt32, Op::kSum))
    return ll_allreduce_share(a, 4, TypedPackReduce<std::int32_t, Op::kSum>{}, block, blocks);
  if (is(DataType::kInt64, Op::kSum))
    return ll_allreduce_share(a, 8, TypedPackReduce<std::int64_t, Op::kSum>{}, block, blocks);
  ElementBytes element;
  if (!dispatch_reduction(a.type, a.op, element)) return -1;
  return ll_allreduce_share(a, element.bytes, AnyPackReduce{a.type, a.op}, block, blocks);
}

// Runs this block's share; returns 0 or the Status the item failed with.
__device__ std::int32_t run_share(const WorkItem& item, unsigned block, unsigned blocks) {
  constexpr std::int32_t kFine = 0;
  const std::int32_t unsupported = static_cast<std::int32_t>(Status::kUnsupported);
  const std::int32_t timed_out = static_cast<std::int32_t>(Status::kTimeout);
  switch (item.kind) {
    case WorkKind::kCopies:
      copy_share(item.copies, block, blocks);
      return kFine;
    case WorkKind::kDirectReduce:
      return direct_reduce_item(item.reduce, block, blocks) ? kFine : unsupported;
    case WorkKind::kLlAllreduce: {
      const int done = ll_allreduce_item(item.ll, block, blocks);
      if (done < 0) return unsupported;
      return __syncthreads_and(done) ? kFine : timed_out;
    }
    case WorkKind::kLl128Allreduce: {
      const int done = ll128_allreduce_item(item.ll, block, blocks);
      if (done < 0) return unsupported;
      return __syncthreads_and(done) ? kFine : timed_out;
    }
    case WorkKind::kLlBcast:
      return __syncthreads_and(ll_bcast_share(item.ll_bcast, block, blocks)) ? kFine : timed_out;
    case WorkKind::kLlAlltoallv:
      return __syncthreads_and(ll_alltoallv_share(item.ll_alltoallv, block, blocks)) ? kFine : timed_out;
  }
  return unsupported;
}

// Copies an item in 8-byte words; volatile loads, since the source (host
// memory, or the leader's copy) changes under a running kernel.
__device__ void copy_item(WorkItem* to, const WorkItem* from) {
  auto* dst = reinterpret_cast<std::uint64_t*>(to);
  const auto* src = reinterpret_cast<const volatile std::uint64_t*>(from);
  for (unsigned i = threadIdx.x; i < sizeof(WorkItem) / 8; i += blockDim.x) dst[i] = src[i];
}

// One lane's 16 bytes of the doorbell, read uncached.
__device__ __forceinline__ void read_doorbell(const Mailbox* box, unsigned lane, std::uint64_t* low,
                                              std::uint64_t* high) {
  asm volatile("ld.volatile.global.v2.u64 {%0, %1}, [%2];" : "=l"(*low), "=l"(*high) : "l"(box->doorbell + 2 * lane)
               : "memory");
}

// Warp 0 of the leader block: waits until the doorbell holds call `sequence`
// (then its payload words are in `words`), or for stop or idle. Returns
// true when the call arrived. Every lane reads 16 bytes of the doorbell in
// each round: one PCIe round trip brings the whole item. (Keeping three
// rounds in flight measured slower on the GPU machine: 10.3-11.8 against
// 8.3-9.6 us for an 8 B to 8 KiB LL allreduce.)
__device__ bool wait_doorbell(const Mailbox* box, std::uint64_t sequence, std::int64_t idle_ns,
                              std::uint32_t* words) {
  constexpr unsigned kWarp = 0xffffffffu;
  const unsigned lane = threadIdx.x;
  const std::uint32_t flag = doorbell_flag(sequence);
  const std::uint64_t since = now_ns();
  for (;;) {
    std::uint64_t low, high;
    read_doorbell(box, lane, &low, &high);
    const std::uint64_t stop = lane == 0 ? *reinterpret_cast<const volatile std::uint64_t*>(&box->stop) : 0;
    const int used = __shfl_sync(kWarp, low >> 32 == flag ? doorbell_words(static_cast<std::uint32_t>(low)) : 0, 0);
    const bool mine = used > 0 && (static_cast<int>(2 * lane) >= used || low >> 32 == flag) &&
                      (static_cast<int>(2 * lane + 1) >= used || high >> 32 == flag);
    if (__all_sync(kWarp, mine)) {
      if (static_cast<int>(2 * lane) < used) words[2 * lane] = static_cast<std::uint32_t>(low);
      if (static_cast<int>(2 * lane + 1) < used) words[2 * lane + 1] = static_cast<std::uint32_t>(high);
      __syncwarp();
      return true;
    }
    const bool leave = stop != 0 || static_cast<std::int64_t>(now_ns() - since) > idle_ns;
    if (__shfl_sync(kWarp, leave, 0)) return false;
  }
}

// Warp 0 of block 0: hands a shared item's doorbell words and sequence on
// to the other blocks.
__device__ void publish(WorkerState* state, const std::uint32_t* words, int used, std::uint64_t sequence) {
  const std::uint64_t flag = static_cast<std::uint64_t>(doorbell_flag(sequence)) << 32;
  for (int i = threadIdx.x; i < used; i += 32) reinterpret_cast<volatile std::uint64_t*>(state->words)[i] = flag | words[i];
  if (threadIdx.x == 0) {
    reinterpret_cast<volatile std::uint64_t*>(state->sequence)[0] = flag | static_cast<std::uint32_t>(sequence);
    reinterpret_cast<volatile std::uint64_t*>(state->sequence)[1] = flag | static_cast<std::uint32_t>(sequence >> 32);
  }
}

// Warp 0 of another block: waits until block 0 publishes an item newer than
// the one flagged `last`, or leaves. Returns true with the item's words and
// sequence; false when block 0 left and published nothing new.
__device__ bool wait_published(const WorkerState* state, std::uint32_t last, std::uint64_t launch,
                               std::uint32_t* words, std::uint64_t* sequence) {
  constexpr unsigned kWarp = 0xffffffffu;
  const unsigned lane = threadIdx.x;
  for (bool leaving = false;;) {
    std::uint64_t low, high, sequence_low = 0, sequence_high = 0;
    asm volatile("ld.volatile.global.v2.u64 {%0, %1}, [%2];" : "=l"(low), "=l"(high) : "l"(state->words + 2 * lane)
                 : "memory");
    if (lane == 0)
      asm volatile("ld.volatile.global.v2.u64 {%0, %1}, [%2];"
                   : "=l"(sequence_low), "=l"(sequence_high)
                   : "l"(state->sequence)
                   : "memory");
    const std::uint32_t flag = __shfl_sync(kWarp, static_cast<std::uint32_t>(low >> 32), 0);
    if (flag != last && flag != 0) {
      const int used = __shfl_sync(kWarp, doorbell_words(static_cast<std::uint32_t>(low)), 0);
      const bool mine = (static_cast<int>(2 * lane) >= used || low >> 32 == flag) &&
                        (static_cast<int>(2 * lane + 1) >= used || high >> 32 == flag) &&
                        (lane != 0 || (sequence_low >> 32 == flag && sequence_high >> 32 == flag));
      if (__all_sync(kWarp, mine)) {
        if (static_cast<int>(2 * lane) < used) words[2 * lane] = static_cast<std::uint32_t>(low);
        if (static_cast<int>(2 * lane + 1) < used) words[2 * lane + 1] = static_cast<std::uint32_t>(high);
        if (lane == 0) *sequence = (sequence_high & 0xffffffffu) << 32 | (sequence_low & 0xffffffffu);
        __syncwarp();
        // Acquire: an item in WorkerState::item was written before the words.
        __threadfence();
        return true;
      }
      continue;
    }
    // Block 0 publishes before it leaves (a release): one more look after
    // seeing it leave finds anything it published.
    if (leaving) return false;
    leaving = __shfl_sync(kWarp, lane == 0 && load_acquire_gpu(&state->left_launch) >= launch, 0);
  }
}

// Whether an item of this kind writes results only into this GPU's memory.
__device__ __forceinline__ bool writes_only_local(WorkKind kind) {
  return kind == WorkKind::kLlAllreduce || kind == WorkKind::kLl128Allreduce || kind == WorkKind::kLlBcast ||
         kind == WorkKind::kLlAlltoallv;
}

// At most 32 registers a thread (four blocks an SM by registers, as by
// threads): a worker block leaves room beside it for the application's.
__global__ void __launch_bounds__(kWorkerThreads, 4)
    worker_loop(Mailbox* box, WorkerState* state, std::uint64_t launch, std::uint64_t next, std::uint64_t last_shared,
                std::int64_t idle_ns) {
  static_assert(kDoorbellWords == 2 * 32, "one warp reads the doorbell, two words a lane");
  __shared__ WorkItem item;
  __shared__ std::uint32_t words[kDoorbellWords];
  __shared__ std::uint64_t taken;  // the sequence to run; 0: leave
  __shared__ bool decoded;
  const bool leader = blockIdx.x == 0;
  std::uint32_t last = last_shared ? doorbell_flag(last_shared) : 0;  // other blocks: the last item run
  for (;;) {
#ifdef FERRY_WORKER_TIMELINE
    std::uint64_t arrived_ns = 0;
#endif
    if (threadIdx.x < 32) {
      std::uint64_t published = 0;
      const bool arrived =
          leader ? wait_doorbell(box, next, idle_ns, words) : wait_published(state, last, launch, words, &published);
#ifdef FERRY_WORKER_TIMELINE
      arrived_ns = now_ns();
#endif
      // A shared item whose words hold it all goes on to the other blocks
      // at once, before decoding: 1.4 us sooner on 2x H200 than after the
      // block's barriers (bench/worker-latency).
      if (leader && arrived && gridDim.x > 1 && doorbell_blocks(words[1]) > 1 && !doorbell_in_mailbox(words[0]))
        publish(state, words, doorbell_words(words[0]), next);
      if (threadIdx.x == 0) {
        taken = !arrived ? 0 : leader ? next : published;
        decoded = arrived && decode_doorbell(words, &item);
      }
    }
    __syncthreads();
    const std::uint64_t sequence = taken;
    if (sequence == 0) {
      if (leader && threadIdx.x == 0) {
        store_release_gpu(&state->left_launch, launch);
        if (!load_acquire_sys(&box->stop)) store_release_sys(&box->exited, launch);
      }
      return;
    }
    // The item's first `share` blocks run it; the others only note that
    // they saw it. Taken from the words, which this block saw whole: the
    // item in WorkerState may already be the next one's when this block
    // takes no part (the caller waits only for the blocks that do).
    const unsigned share = min(static_cast<unsigned>(max(doorbell_blocks(words[1]), 1)), gridDim.x);
    if (!leader) {
      last = doorbell_flag(sequence);
      if (blockIdx.x >= share) {
        __syncthreads();  // every thread has read words before warp 0 waits for the next
        continue;
      }
    }
    // An item the doorbell held whole is in `item` since the barrier above;
    // another is copied in first.
    if (!decoded) {
      copy_item(&item, leader ? &box->item : &state->item);
      __syncthreads();
    }
    if (leader) {
      next = sequence + 1;
      if (share > 1 && !decoded) {  // the item itself goes first, then its words
        copy_item(&state->item, &item);
        __threadfence();
        __syncthreads();
        if (threadIdx.x < 32) publish(state, words, doorbell_words(words[0]), sequence);
      }
    }

#ifdef FERRY_WORKER_TIMELINE
    const std::uint64_t started_ns = now_ns();
#endif
    const std::int32_t failure = run_share(item, blockIdx.x, share);
    __syncthreads();
    if (threadIdx.x != 0) continue;
#ifdef FERRY_WORKER_TIMELINE
    const std::uint64_t ran_ns = now_ns();
#endif
    if (failure) *reinterpret_cast<volatile std::int32_t*>(&box->failed) = failure;
    // The block's results (ordered before this thread's fence by the
    // barrier) are in place before the report. The fence must be SC: with a
    // release store alone, an MPI suite run on the GPU machine saw wrong
    // in-place LL results. It orders the report after them, so the report
    // itself is a plain store (a release store would fence twice: 1.2-1.5 us
    // of an LL allreduce at 32-128 KiB, bench/worker-latency). An LL item
    // writes its results only into this GPU's memory (the engine runs a call
    // on the worker of its output's GPU; what it stores into peers are LL
    // lines, which carry their own flags), and everything that reads them
    // later (this GPU's SMs and copy engines, peers over NVLink) reads
    // through this GPU's L2: a GPU-scope fence is enough, 0.4-1.5 us sooner
    // than a system-scope one on 2x H200 (bench/RESULTS.md). Copies and
    // direct reduces may write into peers' memory: they fence system-wide.
    if (failure || !writes_only_local(item.kind))
      __threadfence_system();
    else
      __threadfence();
    *reinterpret_cast<volatile std::uint64_t*>(leader ? &box->done : &box->block_done[blockIdx.x]) = sequence;
#ifdef FERRY_WORKER_TIMELINE
    if (leader) {
      const std::uint64_t fenced_ns = now_ns();
      g_timeline_ns[kTimelineTake] += started_ns - arrived_ns;
      g_timeline_ns[kTimelineRun] += ran_ns - started_ns;
      g_timeline_ns[kTimelineFence] += fenced_ns - ran_ns;
      ++g_timeline_items;
    }
#endif
  }
}

class CudaWorkerDevice final : public WorkerDevice {
 public:
  static std::unique_ptr<WorkerDevice> create(int device, int blocks) {
    // With launches made blocking, launching a kernel that waits for the
    // launching thread would never return.
    const char* blocking = std::getenv("CUDA_LAUNCH_BLOCKING");
    if (blocking && std::strcmp(blocking, "1") == 0) {
      FERRY_INFO(Coll, "CUDA_LAUNCH_BLOCKING=1: no engine worker; calls launch kernels");
      return nullptr;
    }
    std::unique_ptr<CudaWorkerDevice> worker(new CudaWorkerDevice(device, blocks));
    cudaError_t error = cudaSetDevice(device);
    if (error == cudaSuccess)
      error = cudaHostAlloc(reinterpret_cast<void**>(&worker->box_), sizeof(Mailbox),
                            cudaHostAllocMapped | cudaHostAllocPortable);
    if (error == cudaSuccess) {
      std::memset(worker->box_, 0, sizeof(Mailbox));
      error = cudaHostGetDevicePointer(reinterpret_cast<void**>(&worker->box_on_device_), worker->box_, 0);
    }
    if (error == cudaSuccess) error = cudaMalloc(reinterpret_cast<void**>(&worker->state_), sizeof(WorkerState));
    if (error == cudaSuccess) error = cudaMemset(worker->state_, 0, sizeof(WorkerState));
    if (error == cudaSuccess) error = cudaStreamCreateWithFlags(&worker->stream_, cudaStreamNonBlocking);
    // A shared item waits for the report of every block it asks for, so
    // all of them must fit the GPU at once.
    int per_multiprocessor = 0, multiprocessors = 0;
    if (error == cudaSuccess)
      error = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_multiprocessor, worker_loop, kWorkerThreads, 0);
    if (error == cudaSuccess) error = cudaDeviceGetAttribute(&multiprocessors, cudaDevAttrMultiProcessorCount, device);
    if (error == cudaSuccess && per_multiprocessor * multiprocessors < blocks) {
      worker->blocks_ = std::max(1, per_multiprocessor * multiprocessors);
      FERRY_INFO(Coll, "engine worker: device %d holds %d of its blocks at once; %d asked for", device, worker->blocks_,
                 blocks);
    }
    if (error != cudaSuccess) {
      FERRY_WARN(Coll, "engine worker set-up failed on device %d: %s; calls launch kernels", device,
                 cudaGetErrorString(error));
      return nullptr;
    }
    return worker;
  }

  ~CudaWorkerDevice() override {
    FERRY_LOG_IF_FAILED(join());
#ifdef FERRY_WORKER_TIMELINE
    unsigned long long ns[kTimelinePhases] = {}, items = 0;
    if (params().stats && cudaMemcpyFromSymbol(ns, g_timeline_ns, sizeof(ns)) == cudaSuccess &&
        cudaMemcpyFromSymbol(&items, g_timeline_items, sizeof(items)) == cudaSuccess && items > 0)
      std::fprintf(stderr,
                   "ferry worker timeline (device %d, block 0, %llu items), mean ns: take %.0f run %.0f fence %.0f\n",
                   device_, items, double(ns[kTimelineTake]) / items, double(ns[kTimelineRun]) / items,
                   double(ns[kTimelineFence]) / items);
#endif
    if (stream_) cudaStreamDestroy(stream_);
    if (state_) cudaFree(state_);
    if (box_) cudaFreeHost(box_);
  }

  Mailbox* mailbox() override { return box_; }
  int blocks() const override { return blocks_; }

  Status start(std::uint64_t launch, std::uint64_t first, std::uint64_t last_shared, std::int64_t idle_us) override {
    // The stream runs one launch after the other: a new launch starts only
    // after the previous one has left.
    FERRY_CHECK(FERRY_CUDA(cudaSetDevice(device_)));
    worker_loop<<<blocks_, kWorkerThreads, 0, stream_>>>(box_on_device_, state_, launch, first, last_shared,
                                                         idle_us * 1000);
    return FERRY_CUDA(cudaGetLastError());
  }

  Status health() override {
    const cudaError_t state = cudaStreamQuery(stream_);
    if (state == cudaSuccess || state == cudaErrorNotReady) return Status::kOk;
    FERRY_WARN(Coll, "engine worker kernel failed: %s", cudaGetErrorString(state));
    return Status::kGpuError;
  }

  Status join() override { return stream_ ? FERRY_CUDA(cudaStreamSynchronize(stream_)) : Status::kOk; }

 private:
  CudaWorkerDevice(int device, int blocks) : device_(device), blocks_(blocks) {}

  int device_;
  int blocks_;
  Mailbox* box_ = nullptr;            // host view
  Mailbox* box_on_device_ = nullptr;  // the same memory, as kernels address it
  WorkerState* state_ = nullptr;
  cudaStream_t stream_ = nullptr;
};

}  // namespace

std::unique_ptr<WorkerDevice> make_cuda_worker_device(int device, int blocks) {
  return CudaWorkerDevice::create(device, blocks);
}

}  // namespace ferry

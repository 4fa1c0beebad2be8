// The LL128 protocol on the device: one-shot allreduce as one block's share
// of a call. Eight lanes of a warp store a 128-byte line (120 data bytes and
// the call's flag, worker_common.h) in one instruction, and eight lanes of
// the receiver load it the same way, so the flag in a line says its data
// arrived.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "engine/collectives/ll_device.cuh"
#include "engine/collectives/worker_common.h"
#include "engine/core/pack_device.cuh"
#include "engine/gpu/runtime_device.cuh"

namespace ferry {
namespace ll128 {

// A lane's part of line l: 16 data bytes for lanes 0-6 of its eight, 8 for
// lane 7 (whose other 8 carry the flag); fewer at the end of the data.
struct Part {
  std::size_t offset;  // into the data
  int valid;           // data bytes this lane carries here (0: none)
};
static __device__ Part part_of(std::size_t line, unsigned lane_in_line, std::size_t bytes) {
  const std::size_t offset = line * kLl128LineData + lane_in_line * 16;
  const std::size_t carries = lane_in_line == kLl128LanesPerLine - 1 ? 8 : 16;
  return {offset, offset >= bytes ? 0 : static_cast<int>(bytes - offset < carries ? bytes - offset : carries)};
}

__device__ __forceinline__ void store_lane(void* at, std::uint64_t low, std::uint64_t high) {
  volatile_store_16(at, low, high);
}
__device__ __forceinline__ void load_lane(const void* at, std::uint64_t* low, std::uint64_t* high) {
  volatile_load_16(at, low, high);
}

// The lines of an LL128 call shared by `blocks` blocks go to warps,
// kUnroll batches of four lines at a time (eight lanes a line, every load
// of a batch in flight at once), on every rank alike. Every loop over them
// is uniform across the warp, so a line's eight stores (and loads) issue as
// one instruction: the line's atomicity needs that.
constexpr int kUnroll = 1;  // lines a lane has in flight (4 ran ptxas out of memory)
constexpr unsigned kLinesPerWarpBatch = kWarpSize / kLl128LanesPerLine;

struct Walk {
  std::size_t first, stride;  // in lines
  unsigned line_in_batch, lane_in_line;
  bool flag_lane;           // this lane's high 8 bytes carry the flag
  std::size_t lane_offset;  // this lane's bytes within a line
  __device__ Walk(unsigned block, unsigned blocks) {
    const unsigned warps_per_block = blockDim.x / kWarpSize;
    const std::size_t lines_per_warp = kLinesPerWarpBatch * kUnroll;
    first = (static_cast<std::size_t>(block) * warps_per_block + threadIdx.x / kWarpSize) * lines_per_warp;
    stride = static_cast<std::size_t>(blocks) * warps_per_block * lines_per_warp;
    line_in_batch = threadIdx.x % kWarpSize / kLl128LanesPerLine;
    lane_in_line = threadIdx.x % kLl128LanesPerLine;
    flag_lane = lane_in_line == kLl128LanesPerLine - 1;
    lane_offset = lane_in_line * 16;
  }
  __device__ std::size_t line(std::size_t base, int u) const { return base + u * kLinesPerWarpBatch + line_in_batch; }
};

static __device__ std::size_t lines_of(std::size_t bytes) { return (bytes + kLl128LineData - 1) / kLl128LineData; }

// Waits until this lane's lines (those `active`) carry flag, for the whole
// warp at once (the wait is warp-uniform); false on timeout.
static __device__ bool wait_lines(const char* const (&at)[kUnroll], const bool (&active)[kUnroll], bool flag_lane,
                                  std::uint64_t flag_word, ll::WaitLimit& limit, uint4 (&data)[kUnroll]) {
  for (unsigned spins = 0;; ++spins) {
    std::uint64_t low[kUnroll], high[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      low[u] = high[u] = 0;
      if (active[u]) load_lane(at[u], &low[u], &high[u]);
    }
    bool missing = false;
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) missing = missing || (active[u] && flag_lane && high[u] != flag_word);
    if (!warp_any(missing)) {
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        if (flag_lane) high[u] = 0;
        data[u] = make_uint4(static_cast<unsigned>(low[u]), static_cast<unsigned>(low[u] >> 32),
                             static_cast<unsigned>(high[u]), static_cast<unsigned>(high[u] >> 32));
      }
      return true;
    }
    if (spins % ll::WaitLimit::kSpinsPerCheck == ll::WaitLimit::kSpinsPerCheck - 1 &&
        warp_any(limit.passed()))
      return false;
  }
}

// This warp's lines of the input (bytes of it) into every peer's buffer:
// the same for every element type.
__device__ __forceinline__ void send_share(const LlAllreduceArgs& a, std::size_t bytes, unsigned block,
                                           unsigned blocks) {
  const std::size_t lines = lines_of(bytes);
  const auto* input = static_cast<const unsigned char*>(a.input);
  const Walk walk(block, blocks);
  const std::uint64_t flag_word = ll128_flag_word(a.flag);
  for (std::size_t base = walk.first; base < lines; base += walk.stride) {
    std::uint64_t low[kUnroll], high[kUnroll];
    bool active[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const std::size_t line = walk.line(base, u);
      active[u] = line < lines;
      const Part part = part_of(line, walk.lane_in_line, bytes);
      const uint4 own = active[u] ? ll::load_bytes(input + part.offset, part.valid) : make_uint4(0, 0, 0, 0);
      low[u] = static_cast<std::uint64_t>(own.y) << 32 | own.x;
      high[u] = walk.flag_lane ? flag_word : static_cast<std::uint64_t>(own.w) << 32 | own.z;
    }
    for (int p = 0; p < a.nranks; ++p) {
      if (p == a.rank) continue;
      char* slot = static_cast<char*>(ll::peer_buffer(a, p)) + ll128_line_offset(a.parity, a.rank, 0, a.nranks) +
                   walk.lane_offset;
      warp_sync();
#pragma unroll
      for (int u = 0; u < kUnroll; ++u)
        if (active[u]) store_lane(slot + walk.line(base, u) * kLl128LineBytes, low[u], high[u]);
    }
  }
}

// One-shot over LL128, once every warp has stored its lines of the input
// into every peer's buffer (send_share): reduces, in rank order, the lines
// that arrive.
template <typename T, ReduceOp Op>
__device__ __forceinline__ bool allreduce_share(const LlAllreduceArgs& a, unsigned block, unsigned blocks) {
  const std::size_t bytes = a.count * sizeof(T);
  const std::size_t lines = lines_of(bytes);
  const auto* input = static_cast<const unsigned char*>(a.input);
  const Walk walk(block, blocks);
  const std::uint64_t flag_word = ll128_flag_word(a.flag);
  ll::WaitLimit limit(a.timeout_ms);
  bool ok = true;
  const void* own_buffer = ll::peer_buffer(a, a.rank);
  for (std::size_t base = walk.first; base < lines && ok; base += walk.stride) {
    bool active[kUnroll];
    Part part[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      active[u] = walk.line(base, u) < lines;
      part[u] = part_of(walk.line(base, u), walk.lane_in_line, bytes);
    }
    Pack<T> acc[kUnroll];
    for (int r = 0; r < a.nranks && ok; ++r) {
      uint4 data[kUnroll];
      if (r == a.rank) {
#pragma unroll
        for (int u = 0; u < kUnroll; ++u)
          data[u] = active[u] ? ll::load_bytes(input + part[u].offset, part[u].valid) : make_uint4(0, 0, 0, 0);
      } else {
        const char* slot =
            static_cast<const char*>(own_buffer) + ll128_line_offset(a.parity, r, 0, a.nranks) + walk.lane_offset;
        const char* at[kUnroll];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) at[u] = slot + (active[u] ? walk.line(base, u) : 0) * kLl128LineBytes;
        warp_sync();
        ok = wait_lines(at, active, walk.flag_lane, flag_word, limit, data);
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        Pack<T> value;
        memcpy(&value, &data[u], 16);
        acc[u] = r == 0 ? value : reduce_pack<T, Op>(acc[u], value);
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      uint4 result;
      memcpy(&result, &acc[u], 16);
      if (ok && active[u] && part[u].valid > 0)
        ll::store_bytes(static_cast<unsigned char*>(a.output) + part[u].offset, part[u].valid, result);
    }
  }
  return ok;
}

}  // namespace ll128
}  // namespace ferry

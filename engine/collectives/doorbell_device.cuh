// How the engine worker's blocks take their items (worker.cu): warp 0 of
// block 0 polls the doorbell in mapped host memory (worker_common.h); an
// item shared among blocks goes on to the others through device memory,
// which they poll instead (an L2 load rather than a PCIe round trip).
#pragma once

#include <cstdint>

#include "engine/collectives/worker.h"
#include "engine/collectives/worker_common.h"
#include "engine/gpu/runtime_device.cuh"

namespace ferry {

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

// Copies an item in 8-byte words; volatile loads, since the source (host
// memory, or the leader's copy) changes under a running kernel.
static __device__ void copy_item(WorkItem* to, const WorkItem* from) {
  auto* dst = reinterpret_cast<std::uint64_t*>(to);
  const auto* src = reinterpret_cast<const volatile std::uint64_t*>(from);
  for (unsigned i = threadIdx.x; i < sizeof(WorkItem) / 8; i += blockDim.x) dst[i] = src[i];
}

// The doorbell's readers: warp 0 on NVIDIA, the first half of wavefront 0
// on AMD (whose votes and shuffles act over the active threads).
constexpr unsigned kDoorbellLanes = kDoorbellWords / 2;
static_assert(kDoorbellLanes <= kWarpSize, "the doorbell's readers are threads of one warp");

// One lane's 16 bytes of the doorbell, read uncached.
__device__ __forceinline__ void read_doorbell(const Mailbox* box, unsigned lane, std::uint64_t* low,
                                              std::uint64_t* high) {
  volatile_load_16(box->doorbell + 2 * lane, low, high);
}

// The doorbell's readers in the leader block: waits until the doorbell holds call `sequence`
// (then its payload words are in `words`), or for stop or idle. Returns
// true when the call arrived. Every lane reads 16 bytes of the doorbell in
// each round: one PCIe round trip brings the whole item. (Keeping three
// rounds in flight measured slower on LL allreduces of 8 B to 8 KiB;
// README, The engine worker.)
static __device__ bool wait_doorbell(const Mailbox* box, std::uint64_t sequence, std::int64_t idle_ns,
                                     std::uint32_t* words) {
  const unsigned lane = threadIdx.x;
  const std::uint32_t flag = doorbell_flag(sequence);
  const std::uint64_t since = now_ns();
  for (;;) {
    std::uint64_t low, high;
    read_doorbell(box, lane, &low, &high);
    const std::uint64_t stop = lane == 0 ? *reinterpret_cast<const volatile std::uint64_t*>(&box->stop) : 0;
    const int used = warp_shfl(low >> 32 == flag ? doorbell_words(static_cast<std::uint32_t>(low)) : 0, 0);
    const bool mine = used > 0 && (static_cast<int>(2 * lane) >= used || low >> 32 == flag) &&
                      (static_cast<int>(2 * lane + 1) >= used || high >> 32 == flag);
    if (warp_all(mine)) {
      if (static_cast<int>(2 * lane) < used) words[2 * lane] = static_cast<std::uint32_t>(low);
      if (static_cast<int>(2 * lane + 1) < used) words[2 * lane + 1] = static_cast<std::uint32_t>(high);
      warp_sync();
      return true;
    }
    const bool leave = stop != 0 || static_cast<std::int64_t>(now_ns() - since) > idle_ns;
    if (warp_shfl(leave, 0)) return false;
  }
}

// The doorbell's readers in block 0: hand a shared item's doorbell words and sequence on
// to the other blocks.
static __device__ void publish(WorkerState* state, const std::uint32_t* words, int used, std::uint64_t sequence) {
  const std::uint64_t flag = static_cast<std::uint64_t>(doorbell_flag(sequence)) << 32;
  for (int i = threadIdx.x; i < used; i += kDoorbellLanes)
    reinterpret_cast<volatile std::uint64_t*>(state->words)[i] = flag | words[i];
  if (threadIdx.x == 0) {
    reinterpret_cast<volatile std::uint64_t*>(state->sequence)[0] = flag | static_cast<std::uint32_t>(sequence);
    reinterpret_cast<volatile std::uint64_t*>(state->sequence)[1] = flag | static_cast<std::uint32_t>(sequence >> 32);
  }
}

// The doorbell's readers in another block: wait until block 0 publishes an item newer than
// the one flagged `last`, or leaves. Returns true with the item's words and
// sequence; false when block 0 left and published nothing new.
static __device__ bool wait_published(const WorkerState* state, std::uint32_t last, std::uint64_t launch,
                                      std::uint32_t* words, std::uint64_t* sequence) {
  const unsigned lane = threadIdx.x;
  for (bool leaving = false;;) {
    std::uint64_t low, high, sequence_low = 0, sequence_high = 0;
    volatile_load_16(state->words + 2 * lane, &low, &high);
    if (lane == 0) volatile_load_16(state->sequence, &sequence_low, &sequence_high);
    const std::uint32_t flag = warp_shfl(static_cast<std::uint32_t>(low >> 32), 0);
    if (flag != last && flag != 0) {
      const int used = warp_shfl(doorbell_words(static_cast<std::uint32_t>(low)), 0);
      const bool mine = (static_cast<int>(2 * lane) >= used || low >> 32 == flag) &&
                        (static_cast<int>(2 * lane + 1) >= used || high >> 32 == flag) &&
                        (lane != 0 || (sequence_low >> 32 == flag && sequence_high >> 32 == flag));
      if (warp_all(mine)) {
        if (static_cast<int>(2 * lane) < used) words[2 * lane] = static_cast<std::uint32_t>(low);
        if (static_cast<int>(2 * lane + 1) < used) words[2 * lane + 1] = static_cast<std::uint32_t>(high);
        if (lane == 0) *sequence = (sequence_high & 0xffffffffu) << 32 | (sequence_low & 0xffffffffu);
        warp_sync();
        // Acquire: an item in WorkerState::item was written before the words.
        __threadfence();
        return true;
      }
      continue;
    }
    // Block 0 publishes before it leaves (a release): one more look after
    // seeing it leave finds anything it published.
    if (leaving) return false;
    leaving = warp_shfl(lane == 0 && load_acquire_gpu(&state->left_launch) >= launch, 0);
  }
}

}  // namespace ferry

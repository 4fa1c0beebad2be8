// 16-byte packs of elements: the unit the collectives' kernels load, reduce
// and store.
#pragma once

#include <cstddef>
#include <cstdint>

#include "engine/collectives/executor.h"
#include "engine/collectives/reduce_common.h"

namespace ferry {

template <typename T>
struct alignas(16) Pack {
  static constexpr int kCount = sizeof(T) >= 16 ? 1 : 16 / sizeof(T);
  T v[kCount];
};
static_assert(sizeof(Pack<float>) == 16 && sizeof(Pack<Complex128>) == 16, "packs are one 16-byte access");

template <typename T, ReduceOp Op>
__device__ __forceinline__ Pack<T> reduce_pack(Pack<T> a, const Pack<T>& b) {
#pragma unroll
  for (int k = 0; k < Pack<T>::kCount; ++k) a.v[k] = reduce<T, Op>(a.v[k], b.v[k]);
  return a;
}

// This block's share (block of blocks, Threads threads each) of every copy
// of the list: 16-byte packs where source and destination are equally
// misaligned, Unroll loads in flight per thread, bytes around them.
template <int Threads, int Unroll>
__device__ __forceinline__ void copy_list_part(const CopyListArgs& c, unsigned block, unsigned blocks) {
  const std::size_t first = static_cast<std::size_t>(block) * Threads + threadIdx.x;
  const std::size_t stride = static_cast<std::size_t>(blocks) * Threads;
  for (int k = 0; k < c.count; ++k) {
    const auto* src = static_cast<const unsigned char*>(c.sources[k]);
    auto* dst = static_cast<unsigned char*>(c.destinations[k]);
    const std::size_t bytes = c.bytes[k];
    const std::uintptr_t misalign = reinterpret_cast<std::uintptr_t>(src) % 16;
    const bool packable = misalign == reinterpret_cast<std::uintptr_t>(dst) % 16;
    const std::size_t head = packable ? (bytes < (16 - misalign) % 16 ? bytes : (16 - misalign) % 16) : bytes;
    const std::size_t packs = (bytes - head) / 16;
    const auto* src_packs = reinterpret_cast<const uint4*>(src + head);
    auto* dst_packs = reinterpret_cast<uint4*>(dst + head);
    for (std::size_t base = first; base < packs; base += stride * Unroll) {
      uint4 v[Unroll];
#pragma unroll
      for (int u = 0; u < Unroll; ++u)
        if (base + u * stride < packs) v[u] = __ldcg(src_packs + base + u * stride);
#pragma unroll
      for (int u = 0; u < Unroll; ++u)
        if (base + u * stride < packs) dst_packs[base + u * stride] = v[u];
    }
    for (std::size_t i = first; i < head; i += stride) dst[i] = __ldcg(src + i);
    for (std::size_t i = head + packs * 16 + first; i < bytes; i += stride) dst[i] = __ldcg(src + i);
  }
}

}  // namespace ferry

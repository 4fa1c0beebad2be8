// 16-byte packs of elements: the unit the collectives' kernels load, reduce
// and store.
#pragma once

#include <cstddef>
#include <cstdint>

#include "engine/core/executor.h"
#include "engine/core/reduce_common.h"
#include "engine/gpu/runtime_device.cuh"

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

// Bytes [begin, end) of a copy as Word-sized accesses (source and
// destination equally misaligned for Word from begin), Unroll loads in
// flight per thread: first is this thread's index in the grid of stride.
template <typename Word, int Unroll>
__device__ __forceinline__ void copy_words(const unsigned char* src, unsigned char* dst, std::size_t words,
                                           std::size_t first, std::size_t stride) {
  const auto* from = reinterpret_cast<const Word*>(src);
  auto* to = reinterpret_cast<Word*>(dst);
  for (std::size_t base = first; base < words; base += stride * Unroll) {
    Word v[Unroll];
#pragma unroll
    for (int u = 0; u < Unroll; ++u)
      if (base + u * stride < words) v[u] = load_cg(from + base + u * stride);
#pragma unroll
    for (int u = 0; u < Unroll; ++u)
      if (base + u * stride < words) to[base + u * stride] = v[u];
  }
}

// This block's share (block of blocks, Threads threads each) of every copy
// of the list: 16-byte accesses where source and destination are equally
// misaligned for them, else 4-byte ones where they are for those (blocks of
// an alltoallv at odd offsets), single bytes around them or throughout.
template <int Threads, int Unroll>
__device__ __forceinline__ void copy_list_part(const CopyListArgs& c, unsigned block, unsigned blocks) {
  const std::size_t first = static_cast<std::size_t>(block) * Threads + threadIdx.x;
  const std::size_t stride = static_cast<std::size_t>(blocks) * Threads;
  for (int k = 0; k < c.count; ++k) {
    const auto* src = static_cast<const unsigned char*>(c.sources[k]);
    auto* dst = static_cast<unsigned char*>(c.destinations[k]);
    const std::size_t bytes = c.bytes[k];
    const auto s = reinterpret_cast<std::uintptr_t>(src), d = reinterpret_cast<std::uintptr_t>(dst);
    const std::size_t word = s % 16 == d % 16 ? 16 : s % 4 == d % 4 ? 4 : 1;
    const std::size_t lead = (word - s % word) % word;
    const std::size_t head = bytes < lead ? bytes : lead;
    const std::size_t words = (bytes - head) / word;
    if (word == 16) copy_words<uint4, Unroll>(src + head, dst + head, words, first, stride);
    if (word == 4) copy_words<unsigned, Unroll>(src + head, dst + head, words, first, stride);
    const std::size_t tail = word == 1 ? 0 : head + words * word;
    for (std::size_t i = first; i < head; i += stride) dst[i] = load_cg(src + i);
    for (std::size_t i = tail + first; i < bytes; i += stride) dst[i] = load_cg(src + i);
  }
}

}  // namespace ferry

// A direct reduce as one block's share of a kernel that outlives many
// calls: the engine worker's (worker.cu), where executor_kernels.cu
// launches a grid per call. Inputs are read past L1 (ld.global.cg), so no
// call sees the data a previous one left there.
#pragma once

#include <cstddef>
#include <cstdint>

#include "engine/gpu/runtime_device.cuh"
#include "engine/core/executor.h"
#include "engine/core/pack_device.cuh"

namespace ferry {

// Input r and output k: inline, or past kInlineRanks from the table (read
// past L1: a later call may rewrite it).
__device__ __forceinline__ const void* worker_input(const DirectReduceArgs& a, int r) {
  return r < kInlineRanks ? a.inputs[r] : load_cg(a.table + r);
}
__device__ __forceinline__ void* worker_output(const DirectReduceArgs& a, int k) {
  return k < kInlineRanks ? a.outputs[k] : const_cast<void*>(load_cg(a.table + a.ninputs + k));
}

// This block's share (block of blocks, Threads threads each) of a direct
// reduce: 16-byte packs, Unroll of them in flight per thread and input, when
// every buffer is 16-byte aligned, then elements one at a time (the tail,
// or all of it when a buffer is not).
template <typename T, ReduceOp Op, int Threads, int Unroll>
__device__ __forceinline__ void direct_reduce_part(const DirectReduceArgs& a, unsigned block, unsigned blocks) {
  bool aligned = true;
  for (int r = 0; r < a.ninputs; ++r)
    aligned = aligned && reinterpret_cast<std::uintptr_t>(worker_input(a, r)) % 16 == 0;
  for (int k = 0; k < a.noutputs; ++k)
    aligned = aligned && reinterpret_cast<std::uintptr_t>(worker_output(a, k)) % 16 == 0;
  const std::size_t packs = aligned ? a.count / Pack<T>::kCount : 0;
  const std::size_t stride = static_cast<std::size_t>(blocks) * Threads * Unroll;
  for (std::size_t base = static_cast<std::size_t>(block) * Threads * Unroll + threadIdx.x; base < packs;
       base += stride) {
    Pack<T> acc[Unroll];
#pragma unroll
    for (int u = 0; u < Unroll; ++u) {
      const std::size_t p = base + u * Threads;
      if (p < packs) acc[u] = load_cg(static_cast<const Pack<T>*>(worker_input(a, 0)) + p);
    }
    for (int r = 1; r < a.ninputs; ++r) {
      Pack<T> in[Unroll];
#pragma unroll
      for (int u = 0; u < Unroll; ++u) {
        const std::size_t p = base + u * Threads;
        if (p < packs) in[u] = load_cg(static_cast<const Pack<T>*>(worker_input(a, r)) + p);
      }
#pragma unroll
      for (int u = 0; u < Unroll; ++u) acc[u] = reduce_pack<T, Op>(acc[u], in[u]);
    }
    for (int k = 0; k < a.noutputs; ++k) {
#pragma unroll
      for (int u = 0; u < Unroll; ++u) {
        const std::size_t p = base + u * Threads;
        if (p < packs) static_cast<Pack<T>*>(worker_output(a, k))[p] = acc[u];
      }
    }
  }
  for (std::size_t i = packs * Pack<T>::kCount + static_cast<std::size_t>(block) * Threads + threadIdx.x;
       i < a.count; i += static_cast<std::size_t>(blocks) * Threads) {
    T acc = load_cg(static_cast<const T*>(worker_input(a, 0)) + i);
    for (int r = 1; r < a.ninputs; ++r)
      acc = reduce<T, Op>(acc, load_cg(static_cast<const T*>(worker_input(a, r)) + i));
    for (int k = 0; k < a.noutputs; ++k) static_cast<T*>(worker_output(a, k))[i] = acc;
  }
}

}  // namespace ferry

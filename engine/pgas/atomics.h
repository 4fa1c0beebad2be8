// Accumulates as the GPU's own system-scope atomics on mapped peer memory:
// concurrent origins need no lock, each element is one atomic instruction.
#pragma once

#include <cstddef>

#include "engine/common/types.h"
#include "engine/gpu/gpu.h"

namespace ferry {

// Whether (type, op) is one atomic instruction on the GPU: sums of 32- and
// 64-bit integers and floats, min/max and bitwise ops of integers.
inline bool gpu_atomic_supported(DataType type, ReduceOp op) {
  const bool integer = type == DataType::kInt32 || type == DataType::kUint32 || type == DataType::kInt64 ||
                       type == DataType::kUint64;
  switch (op) {
    case ReduceOp::kSum: return integer || type == DataType::kFloat32 || type == DataType::kFloat64;
    case ReduceOp::kMin:
    case ReduceOp::kMax:
    case ReduceOp::kBand:
    case ReduceOp::kBor:
    case ReduceOp::kBxor: return integer;
    default: return false;
  }
}

#ifdef FERRY_HAVE_GPU_KERNELS
// target[i] = target[i] op origin[i] element by element, atomically; result
// (if not null) receives each element's value from before. All three in
// device memory (target may be a peer's, mapped), aligned to the element.
Status gpu_atomic_accumulate(void* target, const void* origin, void* result, std::size_t count, DataType type,
                              ReduceOp op, gpu::Stream stream);
#endif

}  // namespace ferry

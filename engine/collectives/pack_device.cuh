// 16-byte packs of elements: the unit the collectives' kernels load, reduce
// and store.
#pragma once

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

}  // namespace ferry

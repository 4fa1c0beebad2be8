// Device-side accesses with the scopes the engine's protocols rely on:
// system-scope acquire/release for counters and flags that cross NVLink or
// PCIe, GPU-scope for those between blocks of one kernel, L2-only loads for
// data a peer or another block rewrote since this SM last read it, and the
// global timer for bounded waits.
#pragma once

#include <cstdint>
#include <cstring>

namespace ferry {

__device__ __forceinline__ std::uint64_t now_ns() {
  std::uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
__device__ __forceinline__ std::uint64_t load_acquire_sys(const std::uint64_t* p) {
  std::uint64_t v;
  asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void store_release_sys(std::uint64_t* p, std::uint64_t v) {
  asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
__device__ __forceinline__ std::uint64_t load_acquire_gpu(const std::uint64_t* p) {
  std::uint64_t v;
  asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void store_release_gpu(std::uint64_t* p, std::uint64_t v) {
  asm volatile("st.release.gpu.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

// A load cached in L2 only: fresh on every call of a long-lived kernel.
template <typename T>
__device__ __forceinline__ T load_cg(const T* p) {
  T value;
  if constexpr (sizeof(T) == 16) {
    const uint4 v = __ldcg(reinterpret_cast<const uint4*>(p));
    memcpy(&value, &v, 16);
  } else if constexpr (sizeof(T) == 8) {
    const unsigned long long v = __ldcg(reinterpret_cast<const unsigned long long*>(p));
    memcpy(&value, &v, 8);
  } else if constexpr (sizeof(T) == 4) {
    const unsigned int v = __ldcg(reinterpret_cast<const unsigned int*>(p));
    memcpy(&value, &v, 4);
  } else if constexpr (sizeof(T) == 2) {
    const unsigned short v = __ldcg(reinterpret_cast<const unsigned short*>(p));
    memcpy(&value, &v, 2);
  } else {
    static_assert(sizeof(T) == 1, "element sizes are 1, 2, 4, 8 or 16 bytes");
    const unsigned char v = __ldcg(reinterpret_cast<const unsigned char*>(p));
    memcpy(&value, &v, 1);
  }
  return value;
}

}  // namespace ferry

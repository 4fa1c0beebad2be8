// The device-side primitives the engine's kernels are written in, for both
// GPU runtimes from one source (host side: gpu_runtime.h). Accesses with the
// scopes the protocols rely on: system-scope acquire/release for counters
// and flags that cross NVLink/xGMI or PCIe, GPU-scope for those between
// blocks of one kernel, L2-only loads for data a peer or another block
// rewrote since this SM last read it, 16-byte volatile accesses for flagged
// words, the global timer for bounded waits, and warp votes and shuffles.
//
// On NVIDIA each is the PTX the kernels were written with. On AMD (built as
// HIP; not yet run on AMD hardware):
//  - a warp is a wavefront of kWarpSize = 64 threads (the CDNA GPUs the HIP
//    build targets; wave32 RDNA parts are not supported). Votes and shuffles
//    act over the wavefront's active threads, so a group of 32 threads that
//    the code keeps uniform (the doorbell's readers) votes as on NVIDIA;
//  - a 16-byte volatile access is two 8-byte system-scope atomic accesses:
//    each 8-byte word arrives whole, which is what every flagged word in
//    the protocols needs (LL: a flag in each 8-byte word; the doorbell and
//    the published items: a flag in each), but a 16-byte access is not one
//    (LL128's lines need more, and the HIP build does not run LL128;
//    gpu::Backend::whole_line_stores);
//  - an L2-only load is a relaxed agent-scope atomic load (glc: past the
//    compute unit's L1), in 8-byte pieces for 16 bytes;
//  - the timer is s_memrealtime, a constant 100 MHz on gfx9 (MI100, MI200,
//    MI300).
#pragma once

#include <cstdint>
#include <cstring>

#include "engine/gpu/gpu_runtime.h"

namespace ferry {

#ifdef FERRY_GPU_HIP
constexpr int kWarpSize = 64;
#if defined(__HIP_DEVICE_COMPILE__) && defined(__AMDGCN_WAVEFRONT_SIZE)
static_assert(__AMDGCN_WAVEFRONT_SIZE == kWarpSize, "the HIP build's kernels assume 64-thread wavefronts");
#endif

__device__ __forceinline__ std::uint64_t now_ns() {
#if defined(__HIP_DEVICE_COMPILE__)
  return __builtin_amdgcn_s_memrealtime() * 10;
#else
  return 0;  // (the host pass compiles device functions, never runs them)
#endif
}

__device__ __forceinline__ std::uint64_t load_acquire_sys(const std::uint64_t* p) {
  return __hip_atomic_load(p, __ATOMIC_ACQUIRE, __HIP_MEMORY_SCOPE_SYSTEM);
}
__device__ __forceinline__ void store_release_sys(std::uint64_t* p, std::uint64_t v) {
  __hip_atomic_store(p, v, __ATOMIC_RELEASE, __HIP_MEMORY_SCOPE_SYSTEM);
}
__device__ __forceinline__ std::uint64_t load_acquire_gpu(const std::uint64_t* p) {
  return __hip_atomic_load(p, __ATOMIC_ACQUIRE, __HIP_MEMORY_SCOPE_AGENT);
}
__device__ __forceinline__ void store_release_gpu(std::uint64_t* p, std::uint64_t v) {
  __hip_atomic_store(p, v, __ATOMIC_RELEASE, __HIP_MEMORY_SCOPE_AGENT);
}

namespace gpu_detail {
template <typename Word>
__device__ __forceinline__ Word load_l2(const void* p) {
  return __hip_atomic_load(static_cast<const Word*>(p), __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_AGENT);
}
__device__ __forceinline__ std::uint64_t load_word_sys(const void* p) {
  return __hip_atomic_load(static_cast<const std::uint64_t*>(p), __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_SYSTEM);
}
__device__ __forceinline__ void store_word_sys(void* p, std::uint64_t v) {
  __hip_atomic_store(static_cast<std::uint64_t*>(p), v, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_SYSTEM);
}
}  // namespace gpu_detail

// A load cached in L2 only: fresh on every call of a long-lived kernel.
template <typename T>
__device__ __forceinline__ T load_cg(const T* p) {
  T value;
  if constexpr (sizeof(T) == 16) {
    const std::uint64_t v[2] = {gpu_detail::load_l2<std::uint64_t>(p),
                                gpu_detail::load_l2<std::uint64_t>(reinterpret_cast<const char*>(p) + 8)};
    memcpy(&value, v, 16);
  } else if constexpr (sizeof(T) == 8) {
    const std::uint64_t v = gpu_detail::load_l2<std::uint64_t>(p);
    memcpy(&value, &v, 8);
  } else if constexpr (sizeof(T) == 4) {
    const std::uint32_t v = gpu_detail::load_l2<std::uint32_t>(p);
    memcpy(&value, &v, 4);
  } else if constexpr (sizeof(T) == 2) {
    const std::uint16_t v = gpu_detail::load_l2<std::uint16_t>(p);
    memcpy(&value, &v, 2);
  } else {
    static_assert(sizeof(T) == 1, "element sizes are 1, 2, 4, 8 or 16 bytes");
    const std::uint8_t v = gpu_detail::load_l2<std::uint8_t>(p);
    memcpy(&value, &v, 1);
  }
  return value;
}

// 16 bytes at a 16-byte aligned address, past every cache that could hold
// a stale copy; each 8-byte half whole.
__device__ __forceinline__ void volatile_load_16(const void* at, std::uint64_t* low, std::uint64_t* high) {
  *low = gpu_detail::load_word_sys(at);
  *high = gpu_detail::load_word_sys(static_cast<const char*>(at) + 8);
}
__device__ __forceinline__ void volatile_store_16(void* at, std::uint64_t low, std::uint64_t high) {
  gpu_detail::store_word_sys(at, low);
  gpu_detail::store_word_sys(static_cast<char*>(at) + 8, high);
}
// The same as four 4-byte words (a, b in the first 8 bytes).
__device__ __forceinline__ void volatile_load_16(const void* at, std::uint32_t* a, std::uint32_t* b, std::uint32_t* c,
                                                 std::uint32_t* d) {
  std::uint64_t low, high;
  volatile_load_16(at, &low, &high);
  *a = static_cast<std::uint32_t>(low);
  *b = static_cast<std::uint32_t>(low >> 32);
  *c = static_cast<std::uint32_t>(high);
  *d = static_cast<std::uint32_t>(high >> 32);
}
__device__ __forceinline__ void volatile_store_16(void* at, std::uint32_t a, std::uint32_t b, std::uint32_t c,
                                                  std::uint32_t d) {
  volatile_store_16(at, static_cast<std::uint64_t>(b) << 32 | a, static_cast<std::uint64_t>(d) << 32 | c);
}

// Warp votes, shuffles and the warp's memory barrier, over the active
// threads of the wavefront.
__device__ __forceinline__ int warp_shfl(int value, int lane) { return __shfl(value, lane); }
__device__ __forceinline__ unsigned warp_shfl(unsigned value, int lane) { return __shfl(value, lane); }
__device__ __forceinline__ bool warp_all(bool predicate) { return __all(predicate) != 0; }
__device__ __forceinline__ bool warp_any(bool predicate) { return __any(predicate) != 0; }
__device__ __forceinline__ void warp_sync() {
  __builtin_amdgcn_fence(__ATOMIC_RELEASE, "wavefront");
  __builtin_amdgcn_wave_barrier();
  __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "wavefront");
}

#else  // CUDA

constexpr int kWarpSize = 32;

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

// 16 bytes at a 16-byte aligned address in one access, uncached.
__device__ __forceinline__ void volatile_load_16(const void* at, std::uint64_t* low, std::uint64_t* high) {
  asm volatile("ld.volatile.global.v2.u64 {%0, %1}, [%2];" : "=l"(*low), "=l"(*high) : "l"(at) : "memory");
}
__device__ __forceinline__ void volatile_store_16(void* at, std::uint64_t low, std::uint64_t high) {
  asm volatile("st.volatile.global.v2.u64 [%0], {%1, %2};" ::"l"(at), "l"(low), "l"(high) : "memory");
}
// The same as four 4-byte words (a, b in the first 8 bytes).
__device__ __forceinline__ void volatile_load_16(const void* at, std::uint32_t* a, std::uint32_t* b, std::uint32_t* c,
                                                 std::uint32_t* d) {
  asm volatile("ld.volatile.global.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(*a), "=r"(*b), "=r"(*c), "=r"(*d)
               : "l"(at)
               : "memory");
}
__device__ __forceinline__ void volatile_store_16(void* at, std::uint32_t a, std::uint32_t b, std::uint32_t c,
                                                  std::uint32_t d) {
  asm volatile("st.volatile.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(at), "r"(a), "r"(b), "r"(c), "r"(d)
               : "memory");
}

// Warp votes and shuffles over the full warp (every lane must take part),
// and the warp's memory barrier.
constexpr unsigned kFullWarpMask = 0xffffffffu;
__device__ __forceinline__ int warp_shfl(int value, int lane) { return __shfl_sync(kFullWarpMask, value, lane); }
__device__ __forceinline__ unsigned warp_shfl(unsigned value, int lane) {
  return __shfl_sync(kFullWarpMask, value, lane);
}
__device__ __forceinline__ bool warp_all(bool predicate) { return __all_sync(kFullWarpMask, predicate); }
__device__ __forceinline__ bool warp_any(bool predicate) { return __any_sync(kFullWarpMask, predicate); }
__device__ __forceinline__ void warp_sync() { __syncwarp(); }

#endif

}  // namespace ferry

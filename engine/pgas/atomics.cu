#include "engine/pgas/atomics.h"

#include "engine/gpu/gpu_runtime.h"

namespace ferry {
namespace {

// One functor per operation, each mapping an element type to its system-scope
// atomic; signed 64-bit sums and bit operations go through the unsigned form,
// which has the same bits.
struct AtomicSum {
  __device__ int operator()(int* p, int v) const { return atomicAdd_system(p, v); }
  __device__ unsigned operator()(unsigned* p, unsigned v) const { return atomicAdd_system(p, v); }
  __device__ long long operator()(long long* p, long long v) const {
    return static_cast<long long>(atomicAdd_system(reinterpret_cast<unsigned long long*>(p),
                                                   static_cast<unsigned long long>(v)));
  }
  __device__ unsigned long long operator()(unsigned long long* p, unsigned long long v) const {
    return atomicAdd_system(p, v);
  }
  __device__ float operator()(float* p, float v) const { return atomicAdd_system(p, v); }
  __device__ double operator()(double* p, double v) const { return atomicAdd_system(p, v); }
};
#ifdef FERRY_GPU_HIP
// (HIP 5.2 has no atomicMin_system for long long: the builtin serves every
// integer type.)
struct AtomicMin {
  template <typename T>
  __device__ T operator()(T* p, T v) const {
    return __hip_atomic_fetch_min(p, v, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_SYSTEM);
  }
};
struct AtomicMax {
  template <typename T>
  __device__ T operator()(T* p, T v) const {
    return __hip_atomic_fetch_max(p, v, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_SYSTEM);
  }
};
#else
struct AtomicMin {
  template <typename T>
  __device__ T operator()(T* p, T v) const { return atomicMin_system(p, v); }
};
struct AtomicMax {
  template <typename T>
  __device__ T operator()(T* p, T v) const { return atomicMax_system(p, v); }
};
#endif
template <typename Bits>
struct AtomicBits {
  __device__ int operator()(int* p, int v) const { return Bits::apply(p, v); }
  __device__ unsigned operator()(unsigned* p, unsigned v) const { return Bits::apply(p, v); }
  __device__ long long operator()(long long* p, long long v) const {
    return static_cast<long long>(
        Bits::apply(reinterpret_cast<unsigned long long*>(p), static_cast<unsigned long long>(v)));
  }
  __device__ unsigned long long operator()(unsigned long long* p, unsigned long long v) const {
    return Bits::apply(p, v);
  }
};
struct And {
  template <typename T>
  __device__ static T apply(T* p, T v) { return atomicAnd_system(p, v); }
};
struct Or {
  template <typename T>
  __device__ static T apply(T* p, T v) { return atomicOr_system(p, v); }
};
struct Xor {
  template <typename T>
  __device__ static T apply(T* p, T v) { return atomicXor_system(p, v); }
};

template <typename T, typename Atomic>
__global__ void atomic_accumulate(T* target, const T* origin, T* result, std::size_t count, Atomic atomic) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < count;
       i += std::size_t(gridDim.x) * blockDim.x) {
    const T before = atomic(&target[i], origin[i]);
    if (result) result[i] = before;
  }
}

template <typename T, typename Atomic>
Status launch(void* target, const void* origin, void* result, std::size_t count, cudaStream_t stream) {
  const int threads = 256;
  const int blocks = static_cast<int>(std::min<std::size_t>((count + threads - 1) / threads, 1024));
  atomic_accumulate<T, Atomic><<<blocks, threads, 0, stream>>>(static_cast<T*>(target), static_cast<const T*>(origin),
                                                               static_cast<T*>(result), count, Atomic{});
  return cudaGetLastError() == cudaSuccess ? Status::kOk : Status::kGpuError;
}

template <typename Atomic>
Status launch_integer(DataType type, void* target, const void* origin, void* result, std::size_t count,
                      cudaStream_t stream) {
  switch (type) {
    case DataType::kInt32: return launch<int, Atomic>(target, origin, result, count, stream);
    case DataType::kUint32: return launch<unsigned, Atomic>(target, origin, result, count, stream);
    case DataType::kInt64: return launch<long long, Atomic>(target, origin, result, count, stream);
    case DataType::kUint64: return launch<unsigned long long, Atomic>(target, origin, result, count, stream);
    default: return Status::kUnsupported;
  }
}

}  // namespace

Status gpu_atomic_accumulate(void* target, const void* origin, void* result, std::size_t count, DataType type,
                              ReduceOp op, gpu::Stream stream) {
  if (!gpu_atomic_supported(type, op)) return Status::kUnsupported;
  if (count == 0) return Status::kOk;
  auto s = reinterpret_cast<cudaStream_t>(stream);
  switch (op) {
    case ReduceOp::kSum:
      if (type == DataType::kFloat32) return launch<float, AtomicSum>(target, origin, result, count, s);
      if (type == DataType::kFloat64) return launch<double, AtomicSum>(target, origin, result, count, s);
      return launch_integer<AtomicSum>(type, target, origin, result, count, s);
    case ReduceOp::kMin: return launch_integer<AtomicMin>(type, target, origin, result, count, s);
    case ReduceOp::kMax: return launch_integer<AtomicMax>(type, target, origin, result, count, s);
    case ReduceOp::kBand: return launch_integer<AtomicBits<And>>(type, target, origin, result, count, s);
    case ReduceOp::kBor: return launch_integer<AtomicBits<Or>>(type, target, origin, result, count, s);
    case ReduceOp::kBxor: return launch_integer<AtomicBits<Xor>>(type, target, origin, result, count, s);
    default: return Status::kUnsupported;
  }
}

}  // namespace ferry

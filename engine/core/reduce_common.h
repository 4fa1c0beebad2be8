// Element types and reduction operators shared by the GPU kernels and the
// host executor: compiles under nvcc and a plain C++ compiler.
#pragma once

#include <cstdint>
#include <type_traits>

#include "engine/common/types.h"

#if defined(__HIPCC__)
#include <hip/hip_runtime.h>  // __host__, __device__ (nvcc has its own)
#endif

#if defined(__CUDACC__) || defined(__HIPCC__)
#define FERRY_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define FERRY_HOST_DEVICE inline
#endif

namespace ferry {

template <typename Real>
struct alignas(2 * sizeof(Real)) ComplexOf {
  Real re, im;
};
using Complex64 = ComplexOf<float>;
using Complex128 = ComplexOf<double>;
static_assert(sizeof(Complex64) == 8 && sizeof(Complex128) == 16, "MPI complex layouts");

template <typename Real>
FERRY_HOST_DEVICE ComplexOf<Real> operator+(ComplexOf<Real> a, ComplexOf<Real> b) {
  return {a.re + b.re, a.im + b.im};
}
template <typename Real>
FERRY_HOST_DEVICE ComplexOf<Real> operator*(ComplexOf<Real> a, ComplexOf<Real> b) {
  return {a.re * b.re - a.im * b.im, a.re * b.im + a.im * b.re};
}

template <typename T>
constexpr bool kIsComplex = false;
template <typename Real>
constexpr bool kIsComplex<ComplexOf<Real>> = true;
template <typename T>
constexpr bool kIsFloating = kIsComplex<T> || std::is_same_v<T, float> || std::is_same_v<T, double>;

// Whether MPI defines op on T (mirrors reduction_defined()).
template <typename T, ReduceOp Op>
constexpr bool kReductionDefined =
    Op == ReduceOp::kSum || Op == ReduceOp::kProd ||
    ((Op == ReduceOp::kMin || Op == ReduceOp::kMax) && !kIsComplex<T>) ||
    (Op >= ReduceOp::kLand && Op <= ReduceOp::kBxor && !kIsFloating<T>);

template <typename T, ReduceOp Op>
FERRY_HOST_DEVICE T reduce(T a, T b) {
  if constexpr (Op == ReduceOp::kSum) return a + b;
  if constexpr (Op == ReduceOp::kProd) return a * b;
  if constexpr (Op == ReduceOp::kMin) return b < a ? b : a;
  if constexpr (Op == ReduceOp::kMax) return a < b ? b : a;
  if constexpr (Op == ReduceOp::kLand) return static_cast<T>((a != 0) && (b != 0));
  if constexpr (Op == ReduceOp::kLor) return static_cast<T>((a != 0) || (b != 0));
  if constexpr (Op == ReduceOp::kLxor) return static_cast<T>((a != 0) != (b != 0));
  if constexpr (Op == ReduceOp::kBand) return static_cast<T>(a & b);
  if constexpr (Op == ReduceOp::kBor) return static_cast<T>(a | b);
  if constexpr (Op == ReduceOp::kBxor) return static_cast<T>(a ^ b);
  return a;
}

// The type x op matrix, instantiated from these two lists.
#define FERRY_FOR_EACH_DATA_TYPE(X)                                                               \
  X(DataType::kInt8, std::int8_t) X(DataType::kUint8, std::uint8_t) X(DataType::kInt16, std::int16_t) \
  X(DataType::kUint16, std::uint16_t) X(DataType::kInt32, std::int32_t)                          \
  X(DataType::kUint32, std::uint32_t) X(DataType::kInt64, std::int64_t)                          \
  X(DataType::kUint64, std::uint64_t) X(DataType::kFloat32, float) X(DataType::kFloat64, double) \
  X(DataType::kComplex64, Complex64) X(DataType::kComplex128, Complex128)

#define FERRY_FOR_EACH_REDUCE_OP(X)                                                                  \
  X(ReduceOp::kSum) X(ReduceOp::kProd) X(ReduceOp::kMin) X(ReduceOp::kMax) X(ReduceOp::kLand)      \
  X(ReduceOp::kLor) X(ReduceOp::kLxor) X(ReduceOp::kBand) X(ReduceOp::kBor) X(ReduceOp::kBxor)

// Calls visitor.template run<T, Op>() for the runtime (type, op); returns
// false when MPI does not define the pair. Host and device code both use it
// (the check that a host visitor is not called from device code is off).
#if defined(__CUDACC__)
#pragma nv_exec_check_disable
#endif
template <typename Visitor>
FERRY_HOST_DEVICE bool dispatch_reduction(DataType type, ReduceOp op, Visitor& visitor) {
  bool found = false;
#define FERRY_DISPATCH_OP(OP)                                     \
  if (op == OP) {                                                 \
    if constexpr (kReductionDefined<Element, OP>) {               \
      visitor.template run<Element, OP>();                        \
      found = true;                                               \
    }                                                             \
  }
#define FERRY_DISPATCH_TYPE(TYPE, T)        \
  if (type == TYPE) {                       \
    using Element = T;                      \
    FERRY_FOR_EACH_REDUCE_OP(FERRY_DISPATCH_OP) \
  }
  FERRY_FOR_EACH_DATA_TYPE(FERRY_DISPATCH_TYPE)
#undef FERRY_DISPATCH_TYPE
#undef FERRY_DISPATCH_OP
  return found;
}

}  // namespace ferry

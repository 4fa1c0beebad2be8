// Element types and reductions the engine understands, independent of MPI.
#pragma once

#include <cstddef>

namespace ferry {

enum class DataType : int {
  kInt8, kUint8, kInt16, kUint16, kInt32, kUint32, kInt64, kUint64,
  kFloat32, kFloat64, kComplex64, kComplex128,
  kCount
};

enum class ReduceOp : int {
  kSum, kProd, kMin, kMax, kLand, kLor, kLxor, kBand, kBor, kBxor,
  kCount
};

std::size_t data_type_size(DataType type);
const char* data_type_name(DataType type);
const char* reduce_op_name(ReduceOp op);

// MPI's rules: MIN/MAX on real types only, logical and bitwise ops on
// integers only; SUM and PROD on everything.
bool reduction_defined(DataType type, ReduceOp op);

}  // namespace ferry

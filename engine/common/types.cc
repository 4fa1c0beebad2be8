#include "engine/common/types.h"

namespace ferry {

std::size_t data_type_size(DataType type) {
  switch (type) {
    case DataType::kInt8: case DataType::kUint8: return 1;
    case DataType::kInt16: case DataType::kUint16: return 2;
    case DataType::kInt32: case DataType::kUint32: case DataType::kFloat32: return 4;
    case DataType::kInt64: case DataType::kUint64: case DataType::kFloat64: case DataType::kComplex64: return 8;
    case DataType::kComplex128: return 16;
    case DataType::kCount: break;
  }
  return 0;
}

const char* data_type_name(DataType type) {
  static const char* const kNames[] = {"int8", "uint8", "int16", "uint16", "int32", "uint32", "int64",
                                       "uint64", "float32", "float64", "complex64", "complex128"};
  return type < DataType::kCount ? kNames[static_cast<int>(type)] : "?";
}

const char* reduce_op_name(ReduceOp op) {
  static const char* const kNames[] = {"sum", "prod", "min", "max", "land", "lor", "lxor", "band", "bor", "bxor"};
  return op < ReduceOp::kCount ? kNames[static_cast<int>(op)] : "?";
}

bool reduction_defined(DataType type, ReduceOp op) {
  const bool complex = type == DataType::kComplex64 || type == DataType::kComplex128;
  const bool floating = type == DataType::kFloat32 || type == DataType::kFloat64 || complex;
  switch (op) {
    case ReduceOp::kSum: case ReduceOp::kProd: return true;
    case ReduceOp::kMin: case ReduceOp::kMax: return !complex;
    case ReduceOp::kLand: case ReduceOp::kLor: case ReduceOp::kLxor: return !floating;
    case ReduceOp::kBand: case ReduceOp::kBor: case ReduceOp::kBxor: return !floating;
    case ReduceOp::kCount: break;
  }
  return false;
}

}  // namespace ferry

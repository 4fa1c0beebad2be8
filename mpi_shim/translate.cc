#include "mpi_shim/translate.h"

#include <algorithm>
#include <climits>
#include <cstring>
#include <string>

namespace ferry::shim {
namespace {

// The engine value the table pairs with an MPI handle, if any.
template <typename Table, typename Handle, typename Value>
bool look_up(const Table& table, Handle handle, Value* value) {
  for (const auto& entry : table) {
    if (entry.mpi == handle) {
      *value = entry.engine;
      return true;
    }
  }
  return false;
}

}  // namespace

bool engine_data_type(MPI_Datatype datatype, DataType* type) {
  struct Entry {
    MPI_Datatype mpi;
    DataType engine;
  };
  static_assert(sizeof(long) == 8 && sizeof(long long) == 8, "LP64: MPI_LONG is 64-bit");
  static const Entry kTable[] = {
      {MPI_INT8_T, DataType::kInt8},          {MPI_SIGNED_CHAR, DataType::kInt8},
      {MPI_UINT8_T, DataType::kUint8},        {MPI_UNSIGNED_CHAR, DataType::kUint8},
      {MPI_BYTE, DataType::kUint8},           {MPI_INT16_T, DataType::kInt16},
      {MPI_SHORT, DataType::kInt16},          {MPI_UINT16_T, DataType::kUint16},
      {MPI_UNSIGNED_SHORT, DataType::kUint16}, {MPI_INT32_T, DataType::kInt32},
      {MPI_INT, DataType::kInt32},            {MPI_UINT32_T, DataType::kUint32},
      {MPI_UNSIGNED, DataType::kUint32},      {MPI_INT64_T, DataType::kInt64},
      {MPI_LONG, DataType::kInt64},           {MPI_LONG_LONG, DataType::kInt64},
      {MPI_UINT64_T, DataType::kUint64},      {MPI_UNSIGNED_LONG, DataType::kUint64},
      {MPI_UNSIGNED_LONG_LONG, DataType::kUint64}, {MPI_FLOAT, DataType::kFloat32},
      {MPI_DOUBLE, DataType::kFloat64},       {MPI_C_FLOAT_COMPLEX, DataType::kComplex64},
      {MPI_C_DOUBLE_COMPLEX, DataType::kComplex128},
  };
  if (look_up(kTable, datatype, type)) return true;
  // Fortran's types, where the MPI gives them the engine type's size (an
  // INTEGER is 8 bytes in an MPI built with -fdefault-integer-8).
  static const Entry kFortranTable[] = {
      {MPI_INTEGER, DataType::kInt32},         {MPI_REAL, DataType::kFloat32},
      {MPI_DOUBLE_PRECISION, DataType::kFloat64}, {MPI_COMPLEX, DataType::kComplex64},
      {MPI_DOUBLE_COMPLEX, DataType::kComplex128}, {MPI_INTEGER1, DataType::kInt8},
      {MPI_INTEGER2, DataType::kInt16},        {MPI_INTEGER4, DataType::kInt32},
      {MPI_INTEGER8, DataType::kInt64},        {MPI_REAL4, DataType::kFloat32},
      {MPI_REAL8, DataType::kFloat64},         {MPI_COMPLEX8, DataType::kComplex64},
      {MPI_COMPLEX16, DataType::kComplex128},
  };
  int size = 0;
  return look_up(kFortranTable, datatype, type) && PMPI_Type_size(datatype, &size) == MPI_SUCCESS &&
         static_cast<std::size_t>(size) == data_type_size(*type);
}

bool engine_reduce_op(MPI_Op op, ReduceOp* reduce_op) {
  struct Entry {
    MPI_Op mpi;
    ReduceOp engine;
  };
  static const Entry kTable[] = {
      {MPI_SUM, ReduceOp::kSum},   {MPI_PROD, ReduceOp::kProd}, {MPI_MIN, ReduceOp::kMin},
      {MPI_MAX, ReduceOp::kMax},   {MPI_LAND, ReduceOp::kLand}, {MPI_LOR, ReduceOp::kLor},
      {MPI_LXOR, ReduceOp::kLxor}, {MPI_BAND, ReduceOp::kBand}, {MPI_BOR, ReduceOp::kBor},
      {MPI_BXOR, ReduceOp::kBxor},
  };
  return look_up(kTable, op, reduce_op);
}

bool dense_data_type(MPI_Datatype datatype, int* size) {
  if (datatype == MPI_DATATYPE_NULL) return false;
  MPI_Aint lb = 0, extent = 0, true_lb = 0, true_extent = 0;
  if (PMPI_Type_size(datatype, size) != MPI_SUCCESS || PMPI_Type_get_extent(datatype, &lb, &extent) != MPI_SUCCESS ||
      PMPI_Type_get_true_extent(datatype, &true_lb, &true_extent) != MPI_SUCCESS)
    return false;
  return *size > 0 && lb == 0 && true_lb == 0 && extent == *size && true_extent == *size;
}

int packed_size(MPI_Datatype datatype) {
  int size = 0;
  if (datatype == MPI_DATATYPE_NULL || PMPI_Type_size(datatype, &size) != MPI_SUCCESS) return 0;
  return size;
}

std::vector<std::size_t> packed_block_bytes(int ranks, const int* counts, MPI_Datatype datatype) {
  std::vector<std::size_t> bytes(static_cast<std::size_t>(std::max(ranks, 0)), 0);
  const int size = counts ? packed_size(datatype) : 0;
  for (int p = 0; size > 0 && p < ranks; ++p) bytes[p] = static_cast<std::size_t>(std::max(counts[p], 0)) * size;
  return bytes;
}

bool info_wants_device(MPI_Info info) {
  if (info == MPI_INFO_NULL) return false;
  char value[MPI_MAX_INFO_VAL + 1] = "";
  int found = 0;
  if (PMPI_Info_get(info, "ferry_device", MPI_MAX_INFO_VAL, value, &found) == MPI_SUCCESS && found &&
      std::strcmp(value, "true") == 0)
    return true;
  found = 0;
  if (PMPI_Info_get(info, "mpi_memory_alloc_kinds", MPI_MAX_INFO_VAL, value, &found) != MPI_SUCCESS || !found)
    return false;
  const std::string kinds = std::string(",") + value + ",";
  return kinds.find(",cuda:device,") != std::string::npos || kinds.find(",cuda,") != std::string::npos;
}

}  // namespace ferry::shim

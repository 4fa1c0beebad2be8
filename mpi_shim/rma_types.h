// Datatypes as RMA moves them: byte runs in type-map order, the basic type
// an accumulate reduces, the real MPI's verdict on an accumulate's types and
// op, and its reductions on host copies of elements no kernel reduces.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <vector>

#include "engine/pgas/window.h"

namespace ferry::shim {

// One element of a datatype as runs of bytes in type-map order, the order in
// which MPI pairs origin data with target data; adjacent runs are merged.
// Offsets are from the buffer pointer and may be negative.
struct TypeMap {
  struct Block {
    MPI_Aint offset;
    std::size_t bytes;
  };
  std::vector<Block> blocks;
  std::size_t size = 0;  // data bytes per element
  MPI_Aint extent = 0;   // from one element to the next
};

// A datatype's map: dense types (all predefined ones among them) are one
// block, made on the spot; others are flattened once and cached.
struct TypeLayout {
  TypeMap dense;
  const TypeMap* map = nullptr;
};

int layout_of(MPI_Datatype type, TypeLayout* out);

// count elements of a datatype at one buffer, as byte runs in type-map order.
struct Operand {
  TypeLayout layout;
  std::vector<TypeMap::Block> runs;
  std::size_t bytes = 0;
  MPI_Aint lo = 0, hi = 0;  // the bytes touched, [lo, hi) from the buffer pointer
};

// count elements of type; MPI_ERR_COUNT or MPI_ERR_TYPE as the real MPI.
int describe(int count, MPI_Datatype type, Operand* out);

// Splits the target's runs, and the origin's and result's when present, at
// every boundary of any of them (MPI pairs them by running byte position),
// so that each segment is contiguous at all three. Target offsets are from
// the target's lowest byte.
std::vector<Window::Segment> pair_runs(const Operand& target, const Operand* origin, const Operand* result);

// The one predefined type a datatype is built from (MPI's basic type, which
// accumulates reduce), or MPI_DATATYPE_NULL when it mixes several.
MPI_Datatype basic_type(MPI_Datatype type);

// What the real MPI says of an accumulate's arguments (counts, types, op),
// from its own checks: the same call on a private window of this process
// with target MPI_PROC_NULL, which checks them and moves nothing. result_type
// is MPI_DATATYPE_NULL for MPI_Accumulate. MPI_SUCCESS, an error class, or
// -1 when no such window could be made.
int real_mpi_accumulate_verdict(const void* origin, int origin_count, MPI_Datatype origin_type, void* result,
                                int result_count, MPI_Datatype result_type, int target_count, MPI_Datatype target_type,
                                MPI_Op op);
// The same for MPI_Compare_and_swap.
int real_mpi_compare_and_swap_verdict(const void* origin, const void* compare, void* result, MPI_Datatype type);

// The engine's element type for a basic type's reductions, where the real
// MPI reduces it as that type (MPI_CHAR as int8_t, MPI_AINT as int64_t, ...).
bool reduction_element(MPI_Datatype basic, DataType* element);

// Whether the engine's arithmetic applies op to elements of basic (as the
// real MPI would), and as which element type and reduction.
bool engine_reduction(MPI_Datatype basic, MPI_Op op, DataType* element, ReduceOp* reduce);

// op applied by the real MPI (MPI_Reduce_local) to host copies of elements
// of basic, packed as MPI_Pack lays them out.
Window::HostCombine host_reduction(MPI_Datatype basic, MPI_Op op);

}  // namespace ferry::shim

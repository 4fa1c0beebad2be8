// MPI handles -> engine element types and reductions.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <vector>

#include "engine/common/types.h"

namespace ferry::shim {

// Predefined types the engine reduces on a GPU; false for anything else.
bool engine_data_type(MPI_Datatype datatype, DataType* type);
// Predefined reductions; false for user-defined ops and MINLOC/MAXLOC/REPLACE.
bool engine_reduce_op(MPI_Op op, ReduceOp* reduce_op);
// Types whose elements are laid out back to back with no holes, so count
// elements are count * size contiguous bytes. Sets the element size.
bool dense_data_type(MPI_Datatype datatype, int* size);
// The bytes one element of type carries (MPI_Type_size: what ranks with
// different types of one signature agree on); 0 for MPI_DATATYPE_NULL or a
// type the real MPI rejects.
int packed_size(MPI_Datatype datatype);
// counts[p] elements of datatype for each of ranks peers, in packed bytes
// (a negative count as 0); all 0 without counts.
std::vector<std::size_t> packed_block_bytes(int ranks, const int* counts, MPI_Datatype datatype);
// Whether info asks for device memory (MPI_Alloc_mem, MPI_Win_allocate(_shared),
// MPI_Win_create_dynamic): the MPI 4.1 memory-kinds key, whose value is a
// comma-separated list such as "mpi,cuda:device", or Ferry's hint
// ferry_device = true.
bool info_wants_device(MPI_Info info);

}  // namespace ferry::shim

// MPI handles -> engine element types and reductions.
#pragma once

#include <mpi.h>

#include "engine/common/types.h"

namespace ferry::shim {

// Predefined types the engine reduces on a GPU; false for anything else.
bool engine_data_type(MPI_Datatype datatype, DataType* type);
// Predefined reductions; false for user-defined ops and MINLOC/MAXLOC/REPLACE.
bool engine_reduce_op(MPI_Op op, ReduceOp* reduce_op);
// Types whose elements are laid out back to back with no holes, so count
// elements are count * size contiguous bytes. Sets the element size.
bool dense_data_type(MPI_Datatype datatype, int* size);
// Whether info asks for device memory (MPI_Alloc_mem, MPI_Win_allocate(_shared),
// MPI_Win_create_dynamic): the MPI 4.1 memory-kinds key, whose value is a
// comma-separated list such as "mpi,cuda:device", or Ferry's hint
// ferry_device = true.
bool info_wants_device(MPI_Info info);

}  // namespace ferry::shim

// One-sided calls on device windows across machines carried by the GDA
// queue (FERRY_RMA_ACROSS=queue; rma_across.h keeps the window): the queue
// kernels use (engine/pgas/remote_access.h), fed here by the calling host
// thread, so host- and GPU-initiated traffic land in the same memory.
//
// Each call first makes the same call with zero counts on the real MPI's
// window, whose own checks decide its arguments, its epoch and, for
// accumulates, whether the op applies to the type; then Ferry checks the
// target range (MPI_ERR_RMA_RANGE). The data moves as one descriptor per
// contiguous piece (datatypes paired run by run, rma_types.h). Origin
// buffers are read, and result buffers written, by the proxy thread before
// the synchronization that completes the operation returns (quiet_across);
// the R-forms complete before returning. Accumulates are combined at the
// target by its proxy on host copies, one at a time per target, so that
// they are atomic with respect to each other: by the engine's arithmetic
// where it has the type, else by the real MPI's reduction.
#pragma once

#include <mpi.h>

#include "engine/pgas/remote_access.h"

namespace ferry::shim {

// Put (get false) and Get.
int queue_put_get(MPI_Win win, RemoteAccess& queue, void* origin, int origin_count, MPI_Datatype origin_type,
                  int target, MPI_Aint disp, int target_count, MPI_Datatype target_type, bool get);

// Accumulate (result null, result_type MPI_DATATYPE_NULL), Get_accumulate
// and Fetch_and_op (counts of one).
int queue_accumulate(MPI_Win win, RemoteAccess& queue, const void* origin, int origin_count,
                     MPI_Datatype origin_type, void* result, int result_count, MPI_Datatype result_type, int target,
                     MPI_Aint disp, int target_count, MPI_Datatype target_type, MPI_Op op);

int queue_compare_and_swap(MPI_Win win, RemoteAccess& queue, const void* origin, const void* compare, void* result,
                           MPI_Datatype type, int target, MPI_Aint disp);

// The error for a call on win whose queue failed (why: its status), raised
// through win's handler: a lost peer names itself.
int queue_failure(MPI_Win win, Status why);

// What the target's proxy combines accumulates with (RemoteAccess::create).
RemoteAccess::Combiner queue_combiner();

}  // namespace ferry::shim

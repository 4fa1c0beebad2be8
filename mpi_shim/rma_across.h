// Device windows whose ranks cannot map each other's memory: ranks on
// several machines (or peer mapping off). The engine's windows map every
// rank's memory, so these go through the real MPI's window instead, over a
// host copy of each rank's device memory: MPI's separate memory model
// (MPI_WIN_MODEL is MPI_WIN_SEPARATE), where the host copy is the window's
// public copy and the device memory its private copy. With
// FERRY_RMA_ACROSS=queue the window's operations go through a GDA queue
// instead (rma_queue.h), into the memory itself: unified model, nothing
// reconciled; the real MPI's window then serves only synchronization.
//
// The two copies are reconciled at this rank's synchronization calls on the
// window (fence, post, start, complete, wait, a test that ends the epoch,
// lock and unlock of this rank, lock_all, unlock_all, sync): before the
// real call, bytes this rank changed in its device memory since the last
// reconciliation go to the host copy; after it, bytes other ranks changed
// in the host copy go to the device memory. A byte both changed is a
// conflicting access, erroneous in MPI. So, as MPI specifies for separate
// windows, a passive-target update by another rank reaches the device
// memory at this rank's next synchronization (MPI_Win_sync, or a lock of
// its own rank), and a local store reaches other ranks' gets after it.
//
// MPI_Barrier reconciles every such window of the process too (before and
// after the real barrier), beyond what MPI asks: programs written for the
// unified model, which count on a barrier to make stores and
// passive-target updates visible, work as well.
//
// Operations (Put, Get, Accumulate and the rest) are the real MPI's on the
// host copies, device origin and result buffers staged (rma_host.h), after
// Ferry checked their target ranges (check_target_range).
// Memory: the host copy and a snapshot of the last reconciled bytes, each
// as large as the rank's window memory; every reconciliation copies the
// device memory to the host once.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <functional>

#include "function_ids.h"

namespace ferry {
class RemoteAccess;
}

namespace ferry::shim {

// Creates *win (collective over comm) for this rank's memory: `memory` of
// size bytes, device memory when device_here, else host memory the real
// MPI's window takes as it is. allocated: device memory Ferry allocated
// for the window, freed with it; host_allocated: host memory from
// MPI_Alloc_mem, freed with it. flavor: what MPI_WIN_CREATE_FLAVOR reports.
int create_window_across(FunctionId id, void* memory, bool device_here, MPI_Aint size, int disp_unit, MPI_Info info,
                         MPI_Comm comm, MPI_Win* win, int flavor, void* allocated, void* host_allocated);

// MPI_SUCCESS, or the error code for a window whose device handle's GDA
// queue lost a peer (its connection closed): the job cannot go on, so
// synchronization calls return it at once instead of entering the real
// MPI (rma_device.cc).
int remote_access_error(MPI_Win win);

// Whether win is such a window.
bool is_window_across(MPI_Win win);
// The GDA queue that carries win's one-sided calls (FERRY_RMA_ACROSS=queue:
// rma_queue.h), or null where the real MPI's window carries them.
RemoteAccess* queue_of(MPI_Win win);
// target's displacement unit in such a window; false for others.
bool target_disp_unit(MPI_Win win, int target, int* disp_unit);
// Waits until the operations this process queued on win have finished at
// their targets: MPI_SUCCESS at once where win has no queue; an error
// (raised through win's handler) when the queue failed.
int quiet_across(MPI_Win win);
// This rank's device memory of such a window (null and 0 where its memory
// is host memory); false when win is not one.
bool device_memory_across(MPI_Win win, void** memory, std::size_t* bytes);

// A synchronization call pmpi on win: on such a window reconciled before
// and after (when it succeeds); `after_only`: reconciled only after (a lock,
// which must be held first). Otherwise just pmpi().
int sync_across(MPI_Win win, const std::function<int()>& pmpi, bool after_only = false);

// MPI_Win_get_attr of the predefined attributes on such a window (*handled):
// the base is the device memory, the model MPI_WIN_SEPARATE, the flavor the
// call's.
int get_attr_across(MPI_Win win, int keyval, void* attribute_val, int* flag, bool* handled);

// MPI_Win_free of such a window (*handled): the real MPI's, then the host
// copies and what Ferry allocated.
int free_window_across(MPI_Win* win, bool* handled);

// An operation's target range on such a window (its real MPI's window
// checks none): MPI_ERR_RMA_RANGE, through win's handler, where it reaches
// outside the target rank's memory; MPI_SUCCESS otherwise and on every
// other window.
int check_target_range(MPI_Win win, int target_rank, MPI_Aint target_disp, int target_count,
                       MPI_Datatype target_datatype);

// This rank's rank in win's group (for lock and unlock of itself).
int rank_in_window(MPI_Win win);

}  // namespace ferry::shim

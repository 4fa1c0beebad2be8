// The real MPI's windows (and the host memory of Ferry's mixed and dynamic
// windows) reached with device origin, compare or result buffers.
#pragma once

#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <mutex>

#include "mpi_shim/request_registry.h"
#include "mpi_shim/route.h"
#include "mpi_shim/staging.h"

namespace ferry::shim {

// A host window is the real MPI's, which cannot read or write device
// memory. A device origin (or compare) buffer is copied to pooled host
// memory when the call is made; a device result buffer gets a host buffer
// whose bytes are copied to it once the operation is complete: at the
// synchronization that completes it (flush, flush_local, unlock, fence,
// complete and their "all" forms) or, for Rget and Rget_accumulate, at the
// Wait or Test that completes the request, whichever comes first. The host
// copies live until that synchronization, since the real MPI may read an
// origin buffer until then.

inline constexpr int kEveryTarget = -1;

struct HostStaged {
  HostStaged(FunctionId id, MPI_Win win, int target) : staging(id, Staging::OnWindow{win}), target(target) {}
  // Once: a later copy would overwrite what the program wrote since.
  int deliver() {
    std::lock_guard<std::mutex> lock(mutex);
    if (delivered) return MPI_SUCCESS;
    delivered = true;
    return staging.finish(MPI_SUCCESS);
  }
  Staging staging;
  const int target;
  std::mutex mutex;
  bool delivered = false;
};

// Keeps a staged operation until the synchronization that completes it.
void keep_host_staged(MPI_Win win, std::shared_ptr<HostStaged> staged);

// A buffer of an operation on a host window.
struct HostOperand {
  const void* buffer;
  int count;
  MPI_Datatype type;
};

// pmpi(origin, compare, result) makes the real call on the buffers to use.
// With a request (the R-forms), a result buffer is also delivered when the
// request completes.
template <typename Pmpi>
int on_host_window(FunctionId id, MPI_Win win, int target, HostOperand origin, HostOperand compare, HostOperand result,
                   MPI_Request* request, Pmpi pmpi) {
  auto as_is = [&] { return pmpi(origin.buffer, compare.buffer, const_cast<void*>(result.buffer)); };
  const HostOperand* operands[3] = {&origin, &compare, &result};
  // An operand is absent with a null buffer and no type; MPI_BOTTOM with a
  // type names memory by the type's addresses.
  auto present = [](const HostOperand* o) { return o->buffer || o->type != MPI_DATATYPE_NULL; };
  const bool bottom =
      std::any_of(operands, operands + 3, [&](const HostOperand* o) { return present(o) && o->buffer == MPI_BOTTOM; });
  if (route_call(id, {origin.buffer, compare.buffer, result.buffer}, bottom).route != Route::kStaged ||
      target == MPI_PROC_NULL)
    return as_is();
  Extent extents[3];
  for (int i = 0; i < 3; ++i)
    if (present(operands[i]) && !extent_of(operands[i]->count, operands[i]->type, &extents[i]))
      return as_is();  // invalid arguments: the real MPI reports them before touching a buffer
  auto staged = std::make_shared<HostStaged>(id, win, target);
  const void* o = staged->staging.in(origin.buffer, extents[0]);
  const void* c = staged->staging.in(compare.buffer, extents[1]);
  void* r = staged->staging.out(const_cast<void*>(result.buffer), extents[2]);
  if (staged->staging.failed()) return staged->staging.raise();
  const int rc = pmpi(o, c, r);
  if (rc != MPI_SUCCESS) return rc;
  if (request && result.buffer && staged->staging.staged_any())
    track_request(*request, [staged] { return staged->deliver(); });
  keep_host_staged(win, std::move(staged));
  return rc;
}

// After a synchronization on a host window returned mpi_result: when it
// succeeded, the operations to target (kEveryTarget: all) are complete, so
// their results go to the device and their host copies are released.
int complete_host_staged(MPI_Win win, int target, int mpi_result);
// MPI_Win_free: every epoch is over, so nothing is left to deliver.
void release_host_staged(MPI_Win win);

}  // namespace ferry::shim

// What the one-sided calls on Ferry's windows share: the data movement of
// rma.cc and the synchronization of rma_sync.cc.
#pragma once

#include <mpi.h>

#include <mutex>

#include "engine/common/status.h"
#include "function_ids.h"
#include "mpi_shim/rma_window.h"
#include "mpi_shim/route.h"

namespace ferry::shim {

// MPI_SUCCESS when status is ok; otherwise logs that call id failed on a
// device window and raises MPI_ERR_NO_MEM or MPI_ERR_OTHER on win.
int engine_result(MPI_Win win, FunctionId id, Status status);

// Raises error_class on win (MPI_SUCCESS passes through).
int fail(MPI_Win win, int error_class);

// Runs body(window record) under the window's lock when win is Ferry's,
// else other(), which routes the call itself.
template <typename Body, typename Other>
int on_data_window(FunctionId id, MPI_Win win, Body body, Other other) {
  DeviceWindow* dw = find_window(win);
  if (!dw) return other();
  record_route(id, {Route::kEngine, "device window"});
  std::lock_guard<std::mutex> lock(dw->mutex);
  return body(*dw);
}

// The same with the real MPI's call for the real MPI's windows.
template <typename Body, typename Pmpi>
int on_window(FunctionId id, MPI_Win win, Body body, Pmpi pmpi) {
  return on_data_window(id, win, body, [&] {
    record_route(id, {Route::kPmpi, "not a device window"});
    return pmpi();
  });
}

}  // namespace ferry::shim

// ferry_win_device_handle: the handle users' kernels drive a device window
// with (include/ferry/device.h). Built on first request, collectively over
// the window's ranks, and kept as an attribute of the window so that
// MPI_Win_free releases it.
#include <mpi.h>

#include <new>

#include "engine/pgas/device_access.h"
#include "ferry/device.h"
#include "mpi_shim/rma.h"
#include "mpi_shim/wrapper_support.h"

namespace ferry::shim {
namespace {

int delete_access(MPI_Win, int, void* value, void*) {
  delete static_cast<DeviceAccess*>(value);
  return MPI_SUCCESS;
}

int access_keyval() {
  static const int keyval = [] {
    int k = MPI_KEYVAL_INVALID;
    PMPI_Win_create_keyval(MPI_WIN_NULL_COPY_FN, delete_access, &k, nullptr);
    return k;
  }();
  return keyval;
}

int device_handle(MPI_Win win, ferry_window_device_t* handle) {
  Window* window = engine_window(win);
  if (!window) {
    FERRY_WARN(Pgas, "ferry_win_device_handle: the window is not a device window");
    return raise_win_error(win, MPI_ERR_WIN);
  }
  if (!handle) return raise_win_error(win, MPI_ERR_ARG);
  void* value = nullptr;
  int found = 0;
  if (PMPI_Win_get_attr(win, access_keyval(), &value, &found) != MPI_SUCCESS) return raise_win_error(win, MPI_ERR_WIN);
  if (!found) {
    std::unique_ptr<DeviceAccess> access;
    const Status status = DeviceAccess::create(*window, &access);
    if (!ok(status)) {
      FERRY_WARN(Pgas, "ferry_win_device_handle: %s", status_name(status));
      return raise_win_error(win, status == Status::kOutOfMemory ? MPI_ERR_NO_MEM : MPI_ERR_OTHER);
    }
    value = access.release();
    PMPI_Win_set_attr(win, access_keyval(), value);
  }
  *handle = static_cast<DeviceAccess*>(value)->handle();
  return MPI_SUCCESS;
}

}  // namespace
}  // namespace ferry::shim

extern "C" __attribute__((visibility("default"))) int ferry_win_device_handle(MPI_Win win,
                                                                               ferry_window_device_t* handle) {
  try {
    return ferry::shim::device_handle(win, handle);
  } catch (const std::bad_alloc&) {
    return ferry::shim::raise_win_error(win, MPI_ERR_NO_MEM);
  } catch (...) {
    return ferry::shim::raise_win_error(win, MPI_ERR_INTERN);
  }
}

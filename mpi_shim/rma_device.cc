// ferry_win_device_handle: the handle users' kernels drive a device window
// with (include/ferry/device.h). Built on first request, collectively over
// the window's ranks, and kept as an attribute of the window so that
// MPI_Win_free releases it. A window whose ranks span machines gets a
// handle that reaches the other ranks through the proxy GDA (RemoteAccess).
#include <mpi.h>

#include <functional>
#include <memory>
#include <new>

#include "engine/bootstrap/mpi_bootstrap.h"
#include "engine/common/liveness.h"
#include "engine/gpu/gpu.h"
#include "engine/pgas/device_access.h"
#include "engine/pgas/remote_access.h"
#include "ferry/device.h"
#include "mpi_shim/engine_route.h"
#include "mpi_shim/module_loading.h"
#include "mpi_shim/rma.h"
#include "mpi_shim/rma_across.h"
#include "mpi_shim/wrapper_support.h"

namespace ferry::shim {
namespace {

template <typename Access>
int delete_access(MPI_Win, int, void* value, void*) {
  delete static_cast<Access*>(value);
  return MPI_SUCCESS;
}

template <typename Access>
int access_keyval() {
  static const int keyval = [] {
    int k = MPI_KEYVAL_INVALID;
    PMPI_Win_create_keyval(MPI_WIN_NULL_COPY_FN, delete_access<Access>, &k, nullptr);
    return k;
  }();
  return keyval;
}

// The window's ranks as a bootstrap of their own, in the window's order.
std::unique_ptr<Bootstrap> window_bootstrap(MPI_Win win) {
  MPI_Group group = MPI_GROUP_NULL;
  if (PMPI_Win_get_group(win, &group) != MPI_SUCCESS) return nullptr;
  MPI_Comm comm = MPI_COMM_NULL;
  const int rc = PMPI_Comm_create_group(MPI_COMM_WORLD, group, 0, &comm);
  PMPI_Group_free(&group);
  if (rc != MPI_SUCCESS || comm == MPI_COMM_NULL) return nullptr;
  std::unique_ptr<Bootstrap> bootstrap = make_mpi_bootstrap(comm);
  PMPI_Comm_free(&comm);
  return bootstrap;
}

// The handle of win's Access, which create() makes the first time
// (collectively) and the window keeps as an attribute.
template <typename Access>
int cached_handle(MPI_Win win, ferry_window_device_t* handle,
                  const std::function<Status(std::unique_ptr<Access>*)>& create) {
  void* value = nullptr;
  int found = 0;
  if (PMPI_Win_get_attr(win, access_keyval<Access>(), &value, &found) != MPI_SUCCESS)
    return raise_win_error(win, MPI_ERR_WIN);
  if (!found) {
    std::unique_ptr<Access> access;
    const Status status = create(&access);
    if (!ok(status)) {
      FERRY_WARN(Pgas, "ferry_win_device_handle: %s", status_name(status));
      return raise_win_error(win, status == Status::kOutOfMemory ? MPI_ERR_NO_MEM : MPI_ERR_OTHER);
    }
    value = access.release();
    PMPI_Win_set_attr(win, access_keyval<Access>(), value);
  }
  *handle = static_cast<Access*>(value)->handle();
  return MPI_SUCCESS;
}

int device_handle(MPI_Win win, ferry_window_device_t* handle) {
  Window* window = engine_window(win);
  const bool across = !window && is_window_across(win);
  if (!window && !across) {
    FERRY_WARN(Pgas, "ferry_win_device_handle: the window is not a device window");
    return raise_win_error(win, MPI_ERR_WIN);
  }
  if (!handle) return raise_win_error(win, MPI_ERR_ARG);
  if (across) {
    warn_if_modules_load_lazily();
    warn_if_few_device_connections();
  }
  if (RemoteAccess* queue = across ? queue_of(win) : nullptr) {
    *handle = queue->handle();  // made with the window
    return MPI_SUCCESS;
  }
  if (across)
    return cached_handle<RemoteAccess>(win, handle, [win](std::unique_ptr<RemoteAccess>* out) {
      void* memory = nullptr;
      std::size_t bytes = 0;
      device_memory_across(win, &memory, &bytes);
      std::unique_ptr<Bootstrap> bootstrap = window_bootstrap(win);
      if (!bootstrap) return Status::kUnavailable;
      return RemoteAccess::create(std::move(bootstrap), gpu::active_backend(), {memory, bytes, true}, nullptr, out);
    });
  return cached_handle<DeviceAccess>(
      win, handle, [window](std::unique_ptr<DeviceAccess>* out) { return DeviceAccess::create(*window, out); });
}

}  // namespace

int remote_access_error(MPI_Win win) {
  void* value = nullptr;
  int found = 0;
  if (PMPI_Win_get_attr(win, access_keyval<RemoteAccess>(), &value, &found) != MPI_SUCCESS || !found)
    return MPI_SUCCESS;
  if (static_cast<RemoteAccess*>(value)->status() != Status::kPeerEnded) return MPI_SUCCESS;
  FERRY_WARN(Pgas, "a window across machines: a peer of its GDA queue is lost: %s", last_ended_peer().c_str());
  return peer_ended_error();
}
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

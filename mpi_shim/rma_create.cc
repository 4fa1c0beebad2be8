// Creation and release of Ferry's windows (rma_window.h), attach and detach,
// and the queries that describe a window's memory.
//
// MPI_Win_create and MPI_Win_allocate(_shared) are Ferry's when any rank's
// memory is device memory (a device buffer, or the MPI 4.1 info key
// mpi_memory_alloc_kinds = cuda:device or ferry_device = true for an
// allocation). Ranks whose memory is host memory (a host buffer, or an
// allocation without that info) keep it in the real MPI's window: a mixed
// window. MPI_Win_create_dynamic is Ferry's in every job where a device
// runtime is in use; its ranks attach device and host regions as they like.
#include <algorithm>
#include <shared_mutex>
#include <unordered_map>

#include "engine/bootstrap/mpi_bootstrap.h"
#include "engine/common/params.h"
#include "handlers.h"
#include "mpi_shim/rma.h"
#include "mpi_shim/rma_across.h"
#include "mpi_shim/rma_host.h"
#include "mpi_shim/rma_window.h"
#include "mpi_shim/route.h"
#include "mpi_shim/translate.h"
#include "mpi_shim/wrapper_support.h"

namespace ferry::shim {

std::atomic<int> device_window_count{0};

namespace {

std::shared_mutex windows_mutex;
std::unordered_map<MPI_Win, DeviceWindow*>& device_windows() {
  static auto* table = new std::unordered_map<MPI_Win, DeviceWindow*>;
  return *table;
}

bool is_device_memory(const void* p) { return p && gpu::classify(p).kind == gpu::MemoryKind::kDevice; }

// Every rank learns whether any rank's memory is on the device, and whether
// any rank offers host memory next to it. False when comm cannot be used:
// the real MPI's window call then reports that.
bool agree_on_memory(MPI_Comm comm, bool device_here, bool host_here, bool* any_device, bool* any_host) {
  int inter = 0;
  if (comm == MPI_COMM_NULL || PMPI_Comm_test_inter(comm, &inter) != MPI_SUCCESS || inter) return false;
  int mine[2] = {device_here, host_here}, all[2] = {0, 0};
  if (PMPI_Allreduce(mine, all, 2, MPI_INT, MPI_MAX, comm) != MPI_SUCCESS) return false;
  *any_device = all[0];
  *any_host = all[1];
  return true;
}

// The window's own engine communicator (collective); false when its ranks
// cannot map each other's device memory (then, unless quiet, with the error
// raised).
bool window_engine(FunctionId id, MPI_Comm comm, std::unique_ptr<PeerGroup>* engine, int* rc, bool quiet = false) {
  if (ok(PeerGroup::create(make_mpi_bootstrap(comm), engine)) && (*engine)->all_peers_mapped()) return true;
  engine->reset();
  if (quiet) {
    FERRY_INFO(Pgas, "%s: ranks cannot map each other's device memory", function_name(id));
    return false;
  }
  FERRY_WARN(Pgas, "%s: device window memory needs every rank on one machine with peer mapping (p2p)",
             function_name(id));
  *rc = raise_error(comm, MPI_ERR_WIN);
  return false;
}

// What one rank brings to a new window.
struct WindowParts {
  void* base = nullptr;  // this rank's memory (null for none and for dynamic windows)
  MPI_Aint size = 0;
  int disp_unit = 1;
  int flavor = MPI_WIN_FLAVOR_CREATE;
  bool host_memory = false;   // base is host memory, held by the real MPI's window
  bool real_memory = false;   // the real MPI's window holds memory on some rank
  void* allocated = nullptr;  // Ferry's device memory, freed with the window
  std::unique_ptr<PeerGroup> engine;
  std::unique_ptr<SymmetricHeap> heap;
};

// Creates Ferry's window (collective): make_real(win) creates the real MPI's
// window first (it may set parts.base to the host memory it allocated), then
// the engine window over parts.
template <typename MakeReal>
int create_window(FunctionId id, MPI_Comm comm, WindowParts& parts, MPI_Win* win, MakeReal make_real) {
  int failed = MPI_SUCCESS;
  if (!parts.engine && !window_engine(id, comm, &parts.engine, &failed)) return failed;
  const int rc = make_real(win);
  if (rc != MPI_SUCCESS) return rc;
  std::unique_ptr<Window> window;
  const Status status =
      Window::create(*parts.engine, parts.base, static_cast<std::size_t>(parts.size), parts.disp_unit, &window,
                     parts.flavor == MPI_WIN_FLAVOR_DYNAMIC, parts.heap.get(), parts.host_memory);
  if (!ok(status)) {
    FERRY_WARN(Pgas, "%s: the device window could not be set up: %s", function_name(id), status_name(status));
    PMPI_Win_free(win);
    return raise_error(comm, status == Status::kOutOfMemory ? MPI_ERR_NO_MEM : MPI_ERR_WIN);
  }
  auto record = std::make_unique<DeviceWindow>();
  record->engine = std::move(parts.engine);
  record->heap = std::move(parts.heap);
  record->window = std::move(window);
  PMPI_Comm_group(comm, &record->group);
  record->allocated = parts.allocated;
  record->base = parts.base;
  record->size = parts.size;
  record->disp_unit = parts.disp_unit;
  record->flavor = parts.flavor;
  record->real_memory = parts.real_memory;
  if (parts.real_memory) {
    const auto ranks = static_cast<std::size_t>(record->window->size());
    record->real_pending.assign(ranks, 0);
    record->real_locked.assign(ranks, 0);
    // A rank waiting for the engine's post, complete or lock word may be
    // one that another rank's real MPI call needs to make progress.
    record->window->set_progress([] {
      int flag = 0;
      PMPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_SELF, &flag, MPI_STATUS_IGNORE);
    });
  }
  // Every call on the window must now reach its handler, in this process too.
  gpu::g_device_runtime_seen.store(true, std::memory_order_relaxed);
  std::unique_lock<std::shared_mutex> lock(windows_mutex);
  device_windows()[*win] = record.release();
  device_window_count.fetch_add(1, std::memory_order_release);
  return MPI_SUCCESS;
}

// The handle-only real window of a window whose memory is all device memory.
// Allocated rather than created: osc/sm serves an allocation on one machine
// wherever the MPI has no one-sided network component for created windows.
auto handle_only(MPI_Info info, MPI_Comm comm) {
  return [info, comm](MPI_Win* win) {
    void* unused = nullptr;
    return PMPI_Win_allocate(0, 1, info, comm, &unused, win);
  };
}

// Every rank allocates its device memory (or fails) before any collective
// set-up, so that a rank out of memory cannot leave the others waiting.
int allocate_everywhere(gpu::Backend* backend, MPI_Aint size, MPI_Comm comm, void** memory) {
  *memory = nullptr;
  const bool allocated = size == 0 || ok(backend->device_alloc(static_cast<std::size_t>(size), memory));
  int everyone = 0, mine = allocated;
  PMPI_Allreduce(&mine, &everyone, 1, MPI_INT, MPI_MIN, comm);
  if (everyone) return MPI_SUCCESS;
  if (*memory) FERRY_LOG_IF_FAILED(backend->device_free(*memory));
  *memory = nullptr;
  return raise_error(comm, MPI_ERR_NO_MEM);
}

// Win_allocate whose ranks cannot map each other's device memory: the
// device ranks' memory Ferry's, the host ranks' from MPI_Alloc_mem, all in
// a window over host copies (rma_across.h).
int allocate_across(FunctionId id, gpu::Backend* backend, bool device_here, MPI_Aint size, int disp_unit,
                    MPI_Info info, MPI_Comm comm, void* baseptr, MPI_Win* win) {
  void* device = nullptr;
  if (int rc = allocate_everywhere(backend, device_here ? size : 0, comm, &device); rc != MPI_SUCCESS) return rc;
  void* host = nullptr;
  if (!device_here && size > 0 && PMPI_Alloc_mem(size, MPI_INFO_NULL, &host) != MPI_SUCCESS) host = nullptr;
  const int rc = create_window_across(id, device_here ? device : host, device_here, size, disp_unit, info, comm, win,
                                      MPI_WIN_FLAVOR_ALLOCATE, device, host);
  if (rc != MPI_SUCCESS) {
    if (device) FERRY_LOG_IF_FAILED(backend->device_free(device));
    if (host) PMPI_Free_mem(host);
    return rc;
  }
  *static_cast<void**>(baseptr) = device_here ? device : host;
  return MPI_SUCCESS;
}

// Win_allocate and Win_allocate_shared. A rank gets device memory when its
// info asks for it, host memory from the real MPI otherwise.
int allocate_window(FunctionId id, MPI_Aint size, int disp_unit, MPI_Info info, MPI_Comm comm, void* baseptr,
                    MPI_Win* win, int flavor) {
  auto pmpi_allocate = [=](MPI_Aint bytes, void* where, MPI_Win* w) {
    return flavor == MPI_WIN_FLAVOR_SHARED ? PMPI_Win_allocate_shared(bytes, disp_unit, info, comm, where, w)
                                           : PMPI_Win_allocate(bytes, disp_unit, info, comm, where, w);
  };
  const bool device_here = info_wants_device(info);
  bool any_device = false, any_host = false;
  if (forced_route() == ForcedRoute::kPmpi || size < 0 || disp_unit <= 0 || !baseptr || !win ||
      !agree_on_memory(comm, device_here, !device_here && size > 0, &any_device, &any_host) || !any_device) {
    record_route(id, {Route::kPmpi, "no rank asked for device memory"});
    return pmpi_allocate(size, baseptr, win);
  }
  record_route(id, {Route::kEngine, "device memory asked for"});
  gpu::Backend* backend = gpu::active_backend();
  WindowParts parts;
  parts.size = size;
  parts.disp_unit = disp_unit;
  parts.flavor = flavor;
  int rc = MPI_SUCCESS;
  if (!backend) return raise_error(comm, MPI_ERR_WIN);
  if (!window_engine(id, comm, &parts.engine, &rc, flavor != MPI_WIN_FLAVOR_SHARED)) {
    if (flavor == MPI_WIN_FLAVOR_SHARED) return rc;
    return allocate_across(id, backend, device_here, size, disp_unit, info, comm, baseptr, win);
  }

  if (any_host) {
    // Mixed: device ranks' memory mapped through IPC handles, host ranks'
    // memory the real MPI's.
    void* memory = nullptr;
    if ((rc = allocate_everywhere(backend, device_here ? size : 0, comm, &memory)) != MPI_SUCCESS) return rc;
    parts.base = memory;
    parts.allocated = memory;
    parts.host_memory = !device_here;
    parts.real_memory = true;
    rc = create_window(id, comm, parts, win, [&](MPI_Win* w) {
      void* host = nullptr;
      const int made = pmpi_allocate(device_here ? 0 : size, &host, w);
      if (!device_here) parts.base = host;
      return made;
    });
    if (rc != MPI_SUCCESS) {
      if (memory) FERRY_LOG_IF_FAILED(backend->device_free(memory));
      return rc;
    }
    *static_cast<void**>(baseptr) = parts.base;
    return MPI_SUCCESS;
  }

  // One symmetric object as large as the largest rank's window; every step
  // is collective and fails on every rank or on none.
  MPI_Aint largest = 0;
  PMPI_Allreduce(&size, &largest, 1, MPI_AINT, MPI_MAX, comm);
  if (largest > 0) {
    void* memory = nullptr;
    const Status status =
        SymmetricHeap::create(parts.engine->bootstrap(), backend, static_cast<std::size_t>(largest), &parts.heap);
    if (ok(status) && ok(parts.heap->allocate(static_cast<std::size_t>(largest), &memory))) {
      parts.base = memory;
      rc = create_window(id, comm, parts, win, handle_only(info, comm));
      if (rc == MPI_SUCCESS) *static_cast<void**>(baseptr) = memory;
      return rc;
    }
    FERRY_INFO(Pgas, "%s: no symmetric heap (%s); window memory mapped through IPC handles", function_name(id),
               status_name(status));
    parts.heap.reset();
  }

  // Without a symmetric heap (the backend has no virtual memory management):
  // plain device memory, mapped by the peers through IPC handles.
  void* memory = nullptr;
  if ((rc = allocate_everywhere(backend, size, comm, &memory)) != MPI_SUCCESS) return rc;
  parts.base = memory;
  parts.allocated = memory;
  rc = create_window(id, comm, parts, win, handle_only(info, comm));
  if (rc != MPI_SUCCESS) {
    if (memory) FERRY_LOG_IF_FAILED(backend->device_free(memory));
    return rc;
  }
  *static_cast<void**>(baseptr) = memory;
  return MPI_SUCCESS;
}

}  // namespace

DeviceWindow* look_up_window(MPI_Win win) {
  std::shared_lock<std::shared_mutex> lock(windows_mutex);
  auto it = device_windows().find(win);
  return it == device_windows().end() ? nullptr : it->second;
}

Window* engine_window(MPI_Win win) {
  DeviceWindow* dw = find_window(win);
  return dw ? dw->window.get() : nullptr;
}

int handle_Win_create(void* base, MPI_Aint size, int disp_unit, MPI_Info info, MPI_Comm comm, MPI_Win* win) {
  auto pmpi = [&] { return PMPI_Win_create(base, size, disp_unit, info, comm, win); };
  const bool device_here = size > 0 && is_device_memory(base);
  const bool host_here = size > 0 && !device_here;
  bool any_device = false, any_host = false;
  if (forced_route() == ForcedRoute::kPmpi || size < 0 || disp_unit <= 0 || !win ||
      !agree_on_memory(comm, device_here, host_here, &any_device, &any_host) || !any_device) {
    record_route(FunctionId::kWin_create, {Route::kPmpi, "no device memory in the window"});
    return pmpi();
  }
  record_route(FunctionId::kWin_create, {Route::kEngine, "device memory in the window"});
  WindowParts parts;
  parts.base = size > 0 ? base : nullptr;
  parts.size = size;
  parts.disp_unit = disp_unit;
  int rc = MPI_SUCCESS;
  if (!window_engine(FunctionId::kWin_create, comm, &parts.engine, &rc, true))
    return create_window_across(FunctionId::kWin_create, base, device_here, size, disp_unit, info, comm, win,
                                MPI_WIN_FLAVOR_CREATE, nullptr, nullptr);
  if (!any_host) return create_window(FunctionId::kWin_create, comm, parts, win, handle_only(info, comm));
  // Mixed: the real MPI's window holds the host ranks' memory.
  parts.host_memory = host_here;
  parts.real_memory = true;
  return create_window(FunctionId::kWin_create, comm, parts, win, [&](MPI_Win* w) {
    return PMPI_Win_create(host_here ? base : nullptr, host_here ? size : 0, disp_unit, info, comm, w);
  });
}

int handle_Win_allocate(MPI_Aint size, int disp_unit, MPI_Info info, MPI_Comm comm, void* baseptr, MPI_Win* win) {
  return allocate_window(FunctionId::kWin_allocate, size, disp_unit, info, comm, baseptr, win, MPI_WIN_FLAVOR_ALLOCATE);
}

int handle_Win_allocate_shared(MPI_Aint size, int disp_unit, MPI_Info info, MPI_Comm comm, void* baseptr,
                               MPI_Win* win) {
  return allocate_window(FunctionId::kWin_allocate_shared, size, disp_unit, info, comm, baseptr, win,
                         MPI_WIN_FLAVOR_SHARED);
}

// There is no memory to look at yet: the window is Ferry's wherever a rank
// has a device runtime in use (or asks for device memory in info), so that
// any rank may attach device memory later. The real MPI's dynamic window
// takes the host regions.
int handle_Win_create_dynamic(MPI_Info info, MPI_Comm comm, MPI_Win* win) {
  auto pmpi = [&] { return PMPI_Win_create_dynamic(info, comm, win); };
  const bool device_here = gpu::device_runtime_active() || info_wants_device(info);
  bool any_device = false, any_without_backend = false;
  if (forced_route() == ForcedRoute::kPmpi || !win ||
      !agree_on_memory(comm, device_here, !gpu::active_backend(), &any_device, &any_without_backend) || !any_device) {
    record_route(FunctionId::kWin_create_dynamic, {Route::kPmpi, "no device runtime in use"});
    return pmpi();
  }
  WindowParts parts;
  int rc = MPI_SUCCESS;
  // A rank without a device backend, or ranks that cannot map each other's
  // memory: the real MPI's window alone (device regions are refused at
  // attach).
  if (any_without_backend || !window_engine(FunctionId::kWin_create_dynamic, comm, &parts.engine, &rc, true)) {
    record_route(FunctionId::kWin_create_dynamic, {Route::kPmpi, "ranks cannot map each other's device memory"});
    return pmpi();
  }
  record_route(FunctionId::kWin_create_dynamic, {Route::kEngine, "device runtime in use"});
  parts.flavor = MPI_WIN_FLAVOR_DYNAMIC;
  parts.real_memory = true;
  return create_window(FunctionId::kWin_create_dynamic, comm, parts, win, [&](MPI_Win* w) -> int {
    // An MPI whose one-sided components cannot serve a dynamic window here
    // (Open MPI's osc/ucx without a network) refuses it on every rank: the
    // window then takes device regions only, on a handle-only real window.
    MPI_Errhandler previous = MPI_ERRHANDLER_NULL;
    PMPI_Comm_get_errhandler(comm, &previous);
    PMPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
    const int made = PMPI_Win_create_dynamic(info, comm, w);
    PMPI_Comm_set_errhandler(comm, previous);
    PMPI_Errhandler_free(&previous);
    int mine = made == MPI_SUCCESS, everyone = 0;
    PMPI_Allreduce(&mine, &everyone, 1, MPI_INT, MPI_MIN, comm);
    if (everyone) return MPI_SUCCESS;
    if (made == MPI_SUCCESS) PMPI_Win_free(w);
    FERRY_INFO(Pgas, "MPI_Win_create_dynamic: the real MPI makes no dynamic window here; device regions only");
    parts.real_memory = false;
    return handle_only(info, comm)(w);
  });
}

int handle_Win_attach(MPI_Win win, void* base, MPI_Aint size) {
  DeviceWindow* dw = find_window(win);
  const bool device = size > 0 && is_device_memory(base);
  if (!dw) {
    record_route(FunctionId::kWin_attach, {Route::kPmpi, "not a device window"});
    int flavor_found = 0;
    int* flavor = nullptr;
    if (device && PMPI_Win_get_attr(win, MPI_WIN_CREATE_FLAVOR, &flavor, &flavor_found) == MPI_SUCCESS &&
        flavor_found && *flavor == MPI_WIN_FLAVOR_DYNAMIC) {
      FERRY_WARN(Pgas,
                 "MPI_Win_attach: device memory in a dynamic window whose ranks cannot map each other's "
                 "device memory");
      return raise_win_error(win, MPI_ERR_ARG);
    }
    return PMPI_Win_attach(win, base, size);
  }
  record_route(FunctionId::kWin_attach, {Route::kEngine, "device window"});
  std::lock_guard<std::mutex> lock(dw->mutex);
  Window& w = *dw->window;
  if (!w.dynamic()) return raise_win_error(win, MPI_ERR_RMA_FLAVOR);
  if (!base || size < 0) return raise_win_error(win, MPI_ERR_ARG);
  if (device) {
    // Peers map the region through its allocation, which must hold all of it.
    const gpu::PointerInfo info = gpu::classify(base);
    const auto begin = reinterpret_cast<std::uintptr_t>(base);
    if (info.size && begin + static_cast<std::uintptr_t>(size) > info.base + info.size) {
      FERRY_WARN(Pgas, "MPI_Win_attach: a device region must lie within one allocation");
      return raise_win_error(win, MPI_ERR_ARG);
    }
  } else {
    // Host memory: the real MPI's window takes it; the engine lists it.
    if (!dw->real_memory) {
      FERRY_WARN(Pgas, "MPI_Win_attach: the real MPI makes no dynamic window here, so only device memory attaches");
      return raise_win_error(win, MPI_ERR_ARG);
    }
    if (int rc = PMPI_Win_attach(win, base, size); rc != MPI_SUCCESS) return rc;
  }
  const Status status = w.attach(base, static_cast<std::size_t>(size), !device);
  if (ok(status)) return MPI_SUCCESS;
  if (!device) PMPI_Win_detach(win, base);
  // Overlapping an attached region, or too many regions.
  if (status == Status::kInvalidArgument || status == Status::kOutOfMemory)
    return raise_win_error(win, MPI_ERR_RMA_ATTACH);
  FERRY_WARN(Pgas, "MPI_Win_attach on a device window failed: %s", status_name(status));
  return raise_win_error(win, MPI_ERR_OTHER);
}

int handle_Win_detach(MPI_Win win, const void* base) {
  DeviceWindow* dw = find_window(win);
  record_route(FunctionId::kWin_detach, dw ? RouteDecision{Route::kEngine, "device window"}
                                           : RouteDecision{Route::kPmpi, "not a device window"});
  if (!dw) return PMPI_Win_detach(win, base);
  std::lock_guard<std::mutex> lock(dw->mutex);
  Window& w = *dw->window;
  if (!w.dynamic()) return raise_win_error(win, MPI_ERR_RMA_FLAVOR);
  bool host = false;
  // No attached region starts at base.
  if (!w.attached(base, &host)) return raise_win_error(win, MPI_ERR_ARG);
  if (host)
    if (int rc = PMPI_Win_detach(win, base); rc != MPI_SUCCESS) return rc;
  return w.detach(base) == Status::kOk ? MPI_SUCCESS : raise_win_error(win, MPI_ERR_ARG);
}

int handle_Win_free(MPI_Win* win) {
  DeviceWindow* dw = win ? find_window(*win) : nullptr;
  record_route(FunctionId::kWin_free, dw ? RouteDecision{Route::kEngine, "device window"}
                                         : RouteDecision{Route::kPmpi, "not a device window"});
  const MPI_Win freed = win ? *win : MPI_WIN_NULL;
  bool across = false;
  if (!dw)
    if (const int rc = free_window_across(win, &across); across) return rc;
  if (!dw) {
    const int rc = PMPI_Win_free(win);
    if (rc == MPI_SUCCESS) release_host_staged(freed);
    return rc;
  }
  {
    std::lock_guard<std::mutex> lock(dw->mutex);
    Window& w = *dw->window;
    if (w.any_lock_held() || w.access_group_open() || w.exposure_open()) return raise_win_error(*win, MPI_ERR_RMA_SYNC);
    if (Status status = w.close(); !ok(status)) {
      FERRY_WARN(Pgas, "MPI_Win_free on a device window failed: %s", status_name(status));
      return raise_win_error(*win, MPI_ERR_OTHER);
    }
  }
  {
    std::unique_lock<std::shared_mutex> lock(windows_mutex);
    device_windows().erase(*win);
    device_window_count.fetch_sub(1, std::memory_order_release);
  }
  gpu::Backend* backend = gpu::active_backend();
  void* allocated = dw->allocated;
  // First the real MPI's window: its attributes (the device handle's tables)
  // are released while the engine window they refer to still exists.
  const int rc = PMPI_Win_free(win);
  if (rc == MPI_SUCCESS) release_host_staged(freed);
  PMPI_Group_free(&dw->group);
  delete dw;  // unmaps the peers' memory
  if (allocated && backend) FERRY_LOG_IF_FAILED(backend->device_free(allocated));
  return rc;
}

int handle_Win_shared_query(MPI_Win win, int rank, MPI_Aint* size, int* disp_unit, void* baseptr) {
  DeviceWindow* dw = find_window(win);
  record_route(FunctionId::kWin_shared_query, dw ? RouteDecision{Route::kEngine, "device window"}
                                                 : RouteDecision{Route::kPmpi, "not a device window"});
  if (!dw) return PMPI_Win_shared_query(win, rank, size, disp_unit, baseptr);
  std::lock_guard<std::mutex> lock(dw->mutex);
  const Window& w = *dw->window;
  if (rank == MPI_PROC_NULL) {
    // The lowest rank with memory, as MPI specifies.
    rank = 0;
    while (rank < w.size() - 1 && w.bytes(rank) == 0) ++rank;
  }
  if (rank < 0 || rank >= w.size()) return raise_win_error(win, MPI_ERR_RANK);
  if (w.host_memory(rank)) return PMPI_Win_shared_query(win, rank, size, disp_unit, baseptr);
  *size = static_cast<MPI_Aint>(w.bytes(rank));
  *disp_unit = w.disp_unit(rank);
  *static_cast<void**>(baseptr) = w.memory(rank);
  return MPI_SUCCESS;
}

int handle_Win_get_attr(MPI_Win win, int keyval, void* attribute_val, int* flag) {
  DeviceWindow* dw = find_window(win);
  record_route(FunctionId::kWin_get_attr, dw ? RouteDecision{Route::kEngine, "device window"}
                                             : RouteDecision{Route::kPmpi, "not a device window"});
  bool across = false;
  if (!dw)
    if (const int rc = get_attr_across(win, keyval, attribute_val, flag, &across); across) return rc;
  if (!dw || !attribute_val || !flag) return PMPI_Win_get_attr(win, keyval, attribute_val, flag);
  // The predefined attributes describe this rank's memory, not the real
  // MPI's window (empty, or not of the window's flavor).
  void* value = nullptr;
  switch (keyval) {
    case MPI_WIN_BASE:
      value = dw->base;
      break;
    case MPI_WIN_SIZE:
      value = &dw->size;
      break;
    case MPI_WIN_DISP_UNIT:
      value = &dw->disp_unit;
      break;
    case MPI_WIN_CREATE_FLAVOR:
      value = &dw->flavor;
      break;
    case MPI_WIN_MODEL:
      value = &dw->model;
      break;
    default:
      return PMPI_Win_get_attr(win, keyval, attribute_val, flag);
  }
  *static_cast<void**>(attribute_val) = value;
  *flag = 1;
  return MPI_SUCCESS;
}

}  // namespace ferry::shim

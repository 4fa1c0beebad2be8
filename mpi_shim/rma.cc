// One-sided communication on device memory. A window is Ferry's when any
// rank's window memory is device memory (MPI_Win_create on a device buffer,
// or MPI_Win_allocate(_shared) asked for device memory through the MPI 4.1
// info key mpi_memory_alloc_kinds = cuda:device, or ferry_device = true).
// The application's MPI_Win is then a real MPI window of size zero that
// carries the handle, group, name, info and error handler; the data and the
// synchronization go through the engine window (engine/pgas/window.h).
// Every other window is the real MPI's, and its calls pass through.
#include <atomic>
#include <cstring>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/common/params.h"
#include "engine/pgas/window.h"
#include "handlers.h"
#include "mpi_shim/engine_route.h"
#include "mpi_shim/rma.h"
#include "mpi_shim/route.h"
#include "mpi_shim/translate.h"
#include "mpi_shim/wrapper_support.h"

namespace ferry::shim {
namespace {

struct DeviceWindow {
  std::unique_ptr<Window> window;
  MPI_Group group = MPI_GROUP_NULL;  // the window's ranks, for PSCW groups
  void* allocated = nullptr;         // Ferry's memory behind Win_allocate(_shared)
  // What MPI_Win_get_attr reports.
  void* base = nullptr;
  MPI_Aint size = 0;
  int disp_unit = 1;
  int flavor = MPI_WIN_FLAVOR_CREATE;
  int model = MPI_WIN_UNIFIED;
  std::mutex mutex;  // one call at a time per window (MPI_THREAD_MULTIPLE)
};

std::shared_mutex windows_mutex;
std::unordered_map<MPI_Win, DeviceWindow*>& device_windows() {
  static auto* table = new std::unordered_map<MPI_Win, DeviceWindow*>;
  return *table;
}
// Lets calls on the real MPI's windows skip the table while Ferry has none.
std::atomic<int> device_window_count{0};

DeviceWindow* find_window(MPI_Win win) {
  if (device_window_count.load(std::memory_order_acquire) == 0 || win == MPI_WIN_NULL) return nullptr;
  std::shared_lock<std::shared_mutex> lock(windows_mutex);
  auto it = device_windows().find(win);
  return it == device_windows().end() ? nullptr : it->second;
}

bool is_device_memory(const void* p) { return p && gpu::classify(p).kind == gpu::MemoryKind::kDevice; }

// Whether info asks for device memory: the MPI 4.1 memory-kinds key, whose
// value is a comma-separated list such as "mpi,cuda:device", or Ferry's hint.
bool info_wants_device(MPI_Info info) {
  if (info == MPI_INFO_NULL) return false;
  char value[MPI_MAX_INFO_VAL + 1] = "";
  int found = 0;
  if (PMPI_Info_get(info, "ferry_device", MPI_MAX_INFO_VAL, value, &found) == MPI_SUCCESS && found &&
      std::strcmp(value, "true") == 0)
    return true;
  found = 0;
  if (PMPI_Info_get(info, "mpi_memory_alloc_kinds", MPI_MAX_INFO_VAL, value, &found) != MPI_SUCCESS || !found)
    return false;
  const std::string kinds = std::string(",") + value + ",";
  return kinds.find(",cuda:device,") != std::string::npos || kinds.find(",cuda,") != std::string::npos;
}

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

// Creates Ferry's window over this rank's device memory (collective).
int create_device_window(FunctionId id, void* base, MPI_Aint size, int disp_unit, MPI_Info info, MPI_Comm comm,
                         int flavor, void* allocated, MPI_Win* win) {
  Communicator* engine = engine_communicator(comm);
  if (!engine || !engine->all_peers_mapped()) {
    FERRY_WARN(Pgas, "%s: device window memory needs every rank on one machine with peer mapping (p2p)",
               function_name(id));
    return raise_error(comm, MPI_ERR_WIN);
  }
  // The real MPI's window carries the handle. Allocated rather than created:
  // osc/sm serves an allocation on one machine wherever the MPI has no
  // one-sided network component for created windows.
  void* unused = nullptr;
  const int rc = PMPI_Win_allocate(0, 1, info, comm, &unused, win);
  if (rc != MPI_SUCCESS) return rc;
  std::unique_ptr<Window> window;
  const Status status = Window::create(*engine, base, static_cast<std::size_t>(size), disp_unit, &window);
  if (!ok(status)) {
    FERRY_WARN(Pgas, "%s: the device window could not be set up: %s", function_name(id), status_name(status));
    PMPI_Win_free(win);
    return raise_error(comm, status == Status::kOutOfMemory ? MPI_ERR_NO_MEM : MPI_ERR_WIN);
  }
  auto record = std::make_unique<DeviceWindow>();
  record->window = std::move(window);
  PMPI_Comm_group(comm, &record->group);
  record->allocated = allocated;
  record->base = base;
  record->size = size;
  record->disp_unit = disp_unit;
  record->flavor = flavor;
  // Every call on the window must now reach its handler, in this process too.
  gpu::g_device_runtime_seen.store(true, std::memory_order_relaxed);
  std::unique_lock<std::shared_mutex> lock(windows_mutex);
  device_windows()[*win] = record.release();
  device_window_count.fetch_add(1, std::memory_order_release);
  return MPI_SUCCESS;
}

// Win_allocate and Win_allocate_shared.
int allocate_window(FunctionId id, MPI_Aint size, int disp_unit, MPI_Info info, MPI_Comm comm, void* baseptr,
                    MPI_Win* win, int flavor) {
  auto pmpi = [&] {
    return flavor == MPI_WIN_FLAVOR_SHARED ? PMPI_Win_allocate_shared(size, disp_unit, info, comm, baseptr, win)
                                           : PMPI_Win_allocate(size, disp_unit, info, comm, baseptr, win);
  };
  bool any_device = false, any_host = false;
  if (params().route == "pmpi" || size < 0 || disp_unit <= 0 || !baseptr || !win ||
      !agree_on_memory(comm, info_wants_device(info), false, &any_device, &any_host) || !any_device) {
    record_route(id, {Route::kPmpi, "no rank asked for device memory"});
    return pmpi();
  }
  record_route(id, {Route::kEngine, "device memory asked for"});
  gpu::Backend* backend = gpu::active_backend();
  void* memory = nullptr;
  // Every rank allocates (or fails) before the collective set-up, so that a
  // rank out of memory cannot leave the others waiting.
  const bool allocated = backend && (size == 0 || ok(backend->device_alloc(static_cast<std::size_t>(size), &memory)));
  int everyone = 0, mine = allocated;
  PMPI_Allreduce(&mine, &everyone, 1, MPI_INT, MPI_MIN, comm);
  if (!everyone) {
    if (memory) backend->device_free(memory);
    return raise_error(comm, MPI_ERR_NO_MEM);
  }
  const int rc = create_device_window(id, memory, size, disp_unit, info, comm, flavor, memory, win);
  if (rc != MPI_SUCCESS) {
    if (memory) backend->device_free(memory);
    return rc;
  }
  *static_cast<void**>(baseptr) = memory;
  return MPI_SUCCESS;
}

// ---- Checks shared by the data-movement calls ---------------------------

int type_size(MPI_Datatype type, int* size) {
  if (type == MPI_DATATYPE_NULL || !dense_data_type(type, size)) {
    if (type != MPI_DATATYPE_NULL)
      FERRY_WARN(Pgas, "device windows take datatypes without holes; this one has holes or gaps");
    return MPI_ERR_TYPE;
  }
  return MPI_SUCCESS;
}

// The engine element type of a datatype built from one predefined type.
bool element_type(MPI_Datatype type, DataType* element, int* element_size) {
  int integers = 0, addresses = 0, types = 0, combiner = 0;
  if (type == MPI_DATATYPE_NULL ||
      PMPI_Type_get_envelope(type, &integers, &addresses, &types, &combiner) != MPI_SUCCESS)
    return false;
  if (combiner == MPI_COMBINER_NAMED)
    return engine_data_type(type, element) && PMPI_Type_size(type, element_size) == MPI_SUCCESS;
  if (types != 1) return false;
  std::vector<int> ints(integers);
  std::vector<MPI_Aint> addrs(addresses);
  MPI_Datatype inner = MPI_DATATYPE_NULL;
  if (PMPI_Type_get_contents(type, integers, addresses, 1, ints.data(), addrs.data(), &inner) != MPI_SUCCESS)
    return false;
  const bool found = element_type(inner, element, element_size);
  // Derived types handed out by get_contents are the caller's to free.
  int inner_combiner = MPI_COMBINER_NAMED;
  PMPI_Type_get_envelope(inner, &integers, &addresses, &types, &inner_combiner);
  if (inner_combiner != MPI_COMBINER_NAMED) PMPI_Type_free(&inner);
  return found;
}

// Where one operation lands in the target's window memory.
struct TargetRange {
  std::size_t offset = 0;
  std::size_t bytes = 0;
};

// MPI's checks for one operation's target, in the order Open MPI makes them.
int check_target(const Window& w, int target, MPI_Aint disp, int count, MPI_Datatype type, TargetRange* range) {
  if (target < 0 || target >= w.size()) return MPI_ERR_RANK;
  if (count < 0) return MPI_ERR_COUNT;
  int size = 0;
  if (int rc = type_size(type, &size); rc != MPI_SUCCESS) return rc;
  if (disp < 0) return MPI_ERR_DISP;
  if (!w.may_access(target)) return MPI_ERR_RMA_SYNC;
  range->offset = static_cast<std::size_t>(disp) * static_cast<std::size_t>(w.disp_unit(target));
  range->bytes = static_cast<std::size_t>(count) * static_cast<std::size_t>(size);
  if (range->offset + range->bytes > w.bytes(target)) return MPI_ERR_RMA_RANGE;
  return MPI_SUCCESS;
}

// The origin (or result) buffer must carry as many bytes as the target range.
int check_origin(const void* buffer, int count, MPI_Datatype type, std::size_t target_bytes) {
  if (count < 0) return MPI_ERR_COUNT;
  int size = 0;
  if (int rc = type_size(type, &size); rc != MPI_SUCCESS) return rc;
  if (static_cast<std::size_t>(count) * static_cast<std::size_t>(size) != target_bytes) return MPI_ERR_ARG;
  if (!buffer && target_bytes > 0) return MPI_ERR_BUFFER;
  return MPI_SUCCESS;
}

int engine_result(MPI_Win win, FunctionId id, Status status) {
  if (ok(status)) return MPI_SUCCESS;
  FERRY_WARN(Pgas, "%s on a device window failed: %s", function_name(id), status_name(status));
  return raise_win_error(win, status == Status::kOutOfMemory ? MPI_ERR_NO_MEM : MPI_ERR_OTHER);
}

int fail(MPI_Win win, int error_class) { return error_class == MPI_SUCCESS ? MPI_SUCCESS : raise_win_error(win, error_class); }

// MPI's accumulate op for an element type: predefined reductions, REPLACE
// and NO_OP; anything else is MPI_ERR_OP.
int accumulate_op(MPI_Op op, DataType element, AccumulateOp* out) {
  if (op == MPI_REPLACE) {
    *out = {AccumulateOp::kReplace, ReduceOp::kSum};
    return MPI_SUCCESS;
  }
  if (op == MPI_NO_OP) {
    *out = {AccumulateOp::kNoOp, ReduceOp::kSum};
    return MPI_SUCCESS;
  }
  ReduceOp reduce;
  if (!engine_reduce_op(op, &reduce) || !reduction_defined(element, reduce)) return MPI_ERR_OP;
  *out = {AccumulateOp::kReduce, reduce};
  return MPI_SUCCESS;
}

// A request that is already complete: the R-calls finish before returning.
int completed_request(MPI_Request* request) {
  auto query = [](void*, MPI_Status* status) {
    PMPI_Status_set_elements(status, MPI_BYTE, 0);
    PMPI_Status_set_cancelled(status, 0);
    status->MPI_SOURCE = MPI_UNDEFINED;
    status->MPI_TAG = MPI_UNDEFINED;
    return MPI_SUCCESS;
  };
  auto release = [](void*) { return MPI_SUCCESS; };
  auto cancel = [](void*, int) { return MPI_SUCCESS; };
  int rc = PMPI_Grequest_start(query, release, cancel, nullptr, request);
  return rc == MPI_SUCCESS ? PMPI_Grequest_complete(*request) : rc;
}

int put(DeviceWindow& dw, MPI_Win win, FunctionId id, const void* origin, int origin_count,
        MPI_Datatype origin_type, int target, MPI_Aint disp, int target_count, MPI_Datatype target_type,
        bool passive_only) {
  Window& w = *dw.window;
  if (target == MPI_PROC_NULL) return MPI_SUCCESS;
  TargetRange range;
  if (int rc = check_target(w, target, disp, target_count, target_type, &range); rc != MPI_SUCCESS)
    return fail(win, rc);
  if (passive_only && !w.passive_access(target)) return fail(win, MPI_ERR_RMA_SYNC);
  if (int rc = check_origin(origin, origin_count, origin_type, range.bytes); rc != MPI_SUCCESS) return fail(win, rc);
  return engine_result(win, id, w.put(origin, target, range.offset, range.bytes));
}

int get(DeviceWindow& dw, MPI_Win win, FunctionId id, void* origin, int origin_count, MPI_Datatype origin_type,
        int target, MPI_Aint disp, int target_count, MPI_Datatype target_type, bool passive_only) {
  Window& w = *dw.window;
  if (target == MPI_PROC_NULL) return MPI_SUCCESS;
  TargetRange range;
  if (int rc = check_target(w, target, disp, target_count, target_type, &range); rc != MPI_SUCCESS)
    return fail(win, rc);
  if (passive_only && !w.passive_access(target)) return fail(win, MPI_ERR_RMA_SYNC);
  if (int rc = check_origin(origin, origin_count, origin_type, range.bytes); rc != MPI_SUCCESS) return fail(win, rc);
  return engine_result(win, id, w.get(origin, target, range.offset, range.bytes));
}

// Accumulate, Get_accumulate and their R-forms. result is null for Accumulate.
int get_accumulate(DeviceWindow& dw, MPI_Win win, FunctionId id, const void* origin, int origin_count,
                   MPI_Datatype origin_type, void* result, int result_count, MPI_Datatype result_type, int target,
                   MPI_Aint disp, int target_count, MPI_Datatype target_type, MPI_Op op, bool passive_only) {
  Window& w = *dw.window;
  if (target == MPI_PROC_NULL) return MPI_SUCCESS;
  TargetRange range;
  if (int rc = check_target(w, target, disp, target_count, target_type, &range); rc != MPI_SUCCESS)
    return fail(win, rc);
  if (passive_only && !w.passive_access(target)) return fail(win, MPI_ERR_RMA_SYNC);
  DataType element;
  int element_size = 0;
  if (!element_type(target_type, &element, &element_size)) {
    // REPLACE and NO_OP move bytes: any predefined type will do.
    if ((op != MPI_REPLACE && op != MPI_NO_OP) || PMPI_Type_size(target_type, &element_size) != MPI_SUCCESS)
      return fail(win, MPI_ERR_TYPE);
    element = DataType::kUint8;
  }
  AccumulateOp how;
  if (int rc = accumulate_op(op, element, &how); rc != MPI_SUCCESS) return fail(win, rc);
  if (how.kind != AccumulateOp::kNoOp)
    if (int rc = check_origin(origin, origin_count, origin_type, range.bytes); rc != MPI_SUCCESS)
      return fail(win, rc);
  if (result)
    if (int rc = check_origin(result, result_count, result_type, range.bytes); rc != MPI_SUCCESS)
      return fail(win, rc);
  const std::size_t count = element_size ? range.bytes / static_cast<std::size_t>(element_size) : 0;
  if (how.kind != AccumulateOp::kReduce) {
    // Bytes are bytes; element-wise atomicity holds for the whole range.
    return engine_result(win, id, w.accumulate(origin, result, target, range.offset, range.bytes, 1,
                                               DataType::kUint8, how));
  }
  return engine_result(win, id, w.accumulate(origin, result, target, range.offset, count,
                                             static_cast<std::size_t>(element_size), element, how));
}

// Translates a group's ranks into the window's.
int window_ranks(const DeviceWindow& dw, MPI_Group group, std::vector<int>* ranks) {
  int n = 0;
  if (group == MPI_GROUP_NULL || PMPI_Group_size(group, &n) != MPI_SUCCESS) return MPI_ERR_GROUP;
  std::vector<int> in(n);
  for (int i = 0; i < n; ++i) in[i] = i;
  ranks->assign(n, MPI_UNDEFINED);
  if (n && PMPI_Group_translate_ranks(group, n, in.data(), dw.group, ranks->data()) != MPI_SUCCESS)
    return MPI_ERR_GROUP;
  for (int r : *ranks)
    if (r == MPI_UNDEFINED) return MPI_ERR_GROUP;
  return MPI_SUCCESS;
}

// Runs body(window record) under the window's lock when win is Ferry's,
// else the real MPI's call.
template <typename Body, typename Pmpi>
int on_window(FunctionId id, MPI_Win win, Body body, Pmpi pmpi) {
  DeviceWindow* dw = find_window(win);
  if (!dw) {
    record_route(id, {Route::kPmpi, "not a device window"});
    return pmpi();
  }
  record_route(id, {Route::kEngine, "device window"});
  std::lock_guard<std::mutex> lock(dw->mutex);
  return body(*dw);
}

}  // namespace

Window* engine_window(MPI_Win win) {
  DeviceWindow* dw = find_window(win);
  return dw ? dw->window.get() : nullptr;
}

// ---- Creation and release -------------------------------------------------

int handle_Win_create(void* base, MPI_Aint size, int disp_unit, MPI_Info info, MPI_Comm comm, MPI_Win* win) {
  auto pmpi = [&] { return PMPI_Win_create(base, size, disp_unit, info, comm, win); };
  const bool device_here = size > 0 && is_device_memory(base);
  bool any_device = false, any_host = false;
  if (params().route == "pmpi" || size < 0 || disp_unit <= 0 || !win ||
      !agree_on_memory(comm, device_here, size > 0 && !device_here, &any_device, &any_host) || !any_device) {
    record_route(FunctionId::kWin_create, {Route::kPmpi, "no device memory in the window"});
    return pmpi();
  }
  record_route(FunctionId::kWin_create, {Route::kEngine, "device memory in the window"});
  if (any_host) {
    FERRY_WARN(Pgas, "MPI_Win_create: some ranks offer device memory and others host memory; a window takes one kind");
    return raise_error(comm, MPI_ERR_WIN);
  }
  return create_device_window(FunctionId::kWin_create, size > 0 ? base : nullptr, size, disp_unit, info, comm,
                              MPI_WIN_FLAVOR_CREATE, nullptr, win);
}

int handle_Win_allocate(MPI_Aint size, int disp_unit, MPI_Info info, MPI_Comm comm, void* baseptr, MPI_Win* win) {
  return allocate_window(FunctionId::kWin_allocate, size, disp_unit, info, comm, baseptr, win,
                         MPI_WIN_FLAVOR_ALLOCATE);
}

int handle_Win_allocate_shared(MPI_Aint size, int disp_unit, MPI_Info info, MPI_Comm comm, void* baseptr,
                               MPI_Win* win) {
  return allocate_window(FunctionId::kWin_allocate_shared, size, disp_unit, info, comm, baseptr, win,
                         MPI_WIN_FLAVOR_SHARED);
}

int handle_Win_free(MPI_Win* win) {
  DeviceWindow* dw = win ? find_window(*win) : nullptr;
  record_route(FunctionId::kWin_free, dw ? RouteDecision{Route::kEngine, "device window"}
                                         : RouteDecision{Route::kPmpi, "not a device window"});
  if (!dw) return PMPI_Win_free(win);
  {
    std::lock_guard<std::mutex> lock(dw->mutex);
    if (dw->window->any_lock_held() || dw->window->access_group_open() || dw->window->exposure_open())
      return raise_win_error(*win, MPI_ERR_RMA_SYNC);
    if (Status status = dw->window->close(); !ok(status)) return engine_result(*win, FunctionId::kWin_free, status);
  }
  {
    std::unique_lock<std::shared_mutex> lock(windows_mutex);
    device_windows().erase(*win);
    device_window_count.fetch_sub(1, std::memory_order_release);
  }
  gpu::Backend* backend = gpu::active_backend();
  void* allocated = dw->allocated;
  PMPI_Group_free(&dw->group);
  delete dw;  // unmaps the peers' memory
  const int rc = PMPI_Win_free(win);
  if (allocated && backend) backend->device_free(allocated);
  return rc;
}

int handle_Win_shared_query(MPI_Win win, int rank, MPI_Aint* size, int* disp_unit, void* baseptr) {
  return on_window(FunctionId::kWin_shared_query, win, [&](DeviceWindow& dw) {
    const Window& w = *dw.window;
    if (rank == MPI_PROC_NULL) {
      // The lowest rank with memory, as MPI specifies.
      rank = 0;
      while (rank < w.size() - 1 && w.bytes(rank) == 0) ++rank;
    }
    if (rank < 0 || rank >= w.size()) return fail(win, MPI_ERR_RANK);
    *size = static_cast<MPI_Aint>(w.bytes(rank));
    *disp_unit = w.disp_unit(rank);
    *static_cast<void**>(baseptr) = w.memory(rank);
    return MPI_SUCCESS;
  }, [&] { return PMPI_Win_shared_query(win, rank, size, disp_unit, baseptr); });
}

int handle_Win_get_attr(MPI_Win win, int keyval, void* attribute_val, int* flag) {
  DeviceWindow* dw = find_window(win);
  record_route(FunctionId::kWin_get_attr, dw ? RouteDecision{Route::kEngine, "device window"}
                                             : RouteDecision{Route::kPmpi, "not a device window"});
  if (!dw || !attribute_val || !flag) return PMPI_Win_get_attr(win, keyval, attribute_val, flag);
  // The predefined attributes describe the device memory, not the real
  // MPI's empty window.
  void* value = keyval == MPI_WIN_BASE          ? dw->base
                : keyval == MPI_WIN_SIZE        ? static_cast<void*>(&dw->size)
                : keyval == MPI_WIN_DISP_UNIT   ? static_cast<void*>(&dw->disp_unit)
                : keyval == MPI_WIN_CREATE_FLAVOR ? static_cast<void*>(&dw->flavor)
                : keyval == MPI_WIN_MODEL       ? static_cast<void*>(&dw->model)
                                                : nullptr;
  const bool predefined = keyval == MPI_WIN_BASE || keyval == MPI_WIN_SIZE || keyval == MPI_WIN_DISP_UNIT ||
                          keyval == MPI_WIN_CREATE_FLAVOR || keyval == MPI_WIN_MODEL;
  if (!predefined) return PMPI_Win_get_attr(win, keyval, attribute_val, flag);
  *static_cast<void**>(attribute_val) = value;
  *flag = 1;
  return MPI_SUCCESS;
}

// ---- Data movement -------------------------------------------------------

int handle_Put(const void* origin_addr, int origin_count, MPI_Datatype origin_datatype, int target_rank,
               MPI_Aint target_disp, int target_count, MPI_Datatype target_datatype, MPI_Win win) {
  return on_window(FunctionId::kPut, win, [&](DeviceWindow& dw) {
    return put(dw, win, FunctionId::kPut, origin_addr, origin_count, origin_datatype, target_rank, target_disp,
               target_count, target_datatype, false);
  }, [&] {
    return PMPI_Put(origin_addr, origin_count, origin_datatype, target_rank, target_disp, target_count,
                    target_datatype, win);
  });
}

int handle_Get(void* origin_addr, int origin_count, MPI_Datatype origin_datatype, int target_rank,
               MPI_Aint target_disp, int target_count, MPI_Datatype target_datatype, MPI_Win win) {
  return on_window(FunctionId::kGet, win, [&](DeviceWindow& dw) {
    return get(dw, win, FunctionId::kGet, origin_addr, origin_count, origin_datatype, target_rank, target_disp,
               target_count, target_datatype, false);
  }, [&] {
    return PMPI_Get(origin_addr, origin_count, origin_datatype, target_rank, target_disp, target_count,
                    target_datatype, win);
  });
}

int handle_Accumulate(const void* origin_addr, int origin_count, MPI_Datatype origin_datatype, int target_rank,
                      MPI_Aint target_disp, int target_count, MPI_Datatype target_datatype, MPI_Op op,
                      MPI_Win win) {
  return on_window(FunctionId::kAccumulate, win, [&](DeviceWindow& dw) {
    if (op == MPI_NO_OP) return fail(win, MPI_ERR_OP);  // only the fetching calls take NO_OP
    return get_accumulate(dw, win, FunctionId::kAccumulate, origin_addr, origin_count, origin_datatype, nullptr,
                          0, MPI_DATATYPE_NULL, target_rank, target_disp, target_count, target_datatype, op, false);
  }, [&] {
    return PMPI_Accumulate(origin_addr, origin_count, origin_datatype, target_rank, target_disp, target_count,
                           target_datatype, op, win);
  });
}

int handle_Get_accumulate(const void* origin_addr, int origin_count, MPI_Datatype origin_datatype,
                          void* result_addr, int result_count, MPI_Datatype result_datatype, int target_rank,
                          MPI_Aint target_disp, int target_count, MPI_Datatype target_datatype, MPI_Op op,
                          MPI_Win win) {
  return on_window(FunctionId::kGet_accumulate, win, [&](DeviceWindow& dw) {
    return get_accumulate(dw, win, FunctionId::kGet_accumulate, origin_addr, origin_count, origin_datatype,
                          result_addr, result_count, result_datatype, target_rank, target_disp, target_count,
                          target_datatype, op, false);
  }, [&] {
    return PMPI_Get_accumulate(origin_addr, origin_count, origin_datatype, result_addr, result_count,
                               result_datatype, target_rank, target_disp, target_count, target_datatype, op, win);
  });
}

int handle_Fetch_and_op(const void* origin_addr, void* result_addr, MPI_Datatype datatype, int target_rank,
                        MPI_Aint target_disp, MPI_Op op, MPI_Win win) {
  return on_window(FunctionId::kFetch_and_op, win, [&](DeviceWindow& dw) {
    return get_accumulate(dw, win, FunctionId::kFetch_and_op, origin_addr, 1, datatype, result_addr, 1, datatype,
                          target_rank, target_disp, 1, datatype, op, false);
  }, [&] { return PMPI_Fetch_and_op(origin_addr, result_addr, datatype, target_rank, target_disp, op, win); });
}

int handle_Compare_and_swap(const void* origin_addr, const void* compare_addr, void* result_addr,
                            MPI_Datatype datatype, int target_rank, MPI_Aint target_disp, MPI_Win win) {
  return on_window(FunctionId::kCompare_and_swap, win, [&](DeviceWindow& dw) {
    Window& w = *dw.window;
    if (target_rank == MPI_PROC_NULL) return MPI_SUCCESS;
    TargetRange range;
    if (int rc = check_target(w, target_rank, target_disp, 1, datatype, &range); rc != MPI_SUCCESS)
      return fail(win, rc);
    // MPI allows integer, logical and byte types only: no floating point.
    DataType element;
    int element_size = 0;
    const bool integer = datatype == MPI_BYTE || datatype == MPI_C_BOOL ||
                         (engine_data_type(datatype, &element) && reduction_defined(element, ReduceOp::kBand));
    if (!integer || PMPI_Type_size(datatype, &element_size) != MPI_SUCCESS) return fail(win, MPI_ERR_TYPE);
    if (!origin_addr || !compare_addr || !result_addr) return fail(win, MPI_ERR_BUFFER);
    return engine_result(win, FunctionId::kCompare_and_swap,
                         w.compare_and_swap(origin_addr, compare_addr, result_addr, target_rank, range.offset,
                                            static_cast<std::size_t>(element_size)));
  }, [&] {
    return PMPI_Compare_and_swap(origin_addr, compare_addr, result_addr, datatype, target_rank, target_disp, win);
  });
}

// The request-based calls complete the operation before returning.
int handle_Rput(const void* origin_addr, int origin_count, MPI_Datatype origin_datatype, int target_rank,
                MPI_Aint target_disp, int target_count, MPI_Datatype target_datatype, MPI_Win win,
                MPI_Request* request) {
  return on_window(FunctionId::kRput, win, [&](DeviceWindow& dw) {
    int rc = put(dw, win, FunctionId::kRput, origin_addr, origin_count, origin_datatype, target_rank, target_disp,
                 target_count, target_datatype, true);
    if (rc == MPI_SUCCESS) rc = engine_result(win, FunctionId::kRput, dw.window->flush());
    return rc == MPI_SUCCESS ? completed_request(request) : rc;
  }, [&] {
    return PMPI_Rput(origin_addr, origin_count, origin_datatype, target_rank, target_disp, target_count,
                     target_datatype, win, request);
  });
}

int handle_Rget(void* origin_addr, int origin_count, MPI_Datatype origin_datatype, int target_rank,
                MPI_Aint target_disp, int target_count, MPI_Datatype target_datatype, MPI_Win win,
                MPI_Request* request) {
  return on_window(FunctionId::kRget, win, [&](DeviceWindow& dw) {
    int rc = get(dw, win, FunctionId::kRget, origin_addr, origin_count, origin_datatype, target_rank, target_disp,
                 target_count, target_datatype, true);
    if (rc == MPI_SUCCESS) rc = engine_result(win, FunctionId::kRget, dw.window->flush());
    return rc == MPI_SUCCESS ? completed_request(request) : rc;
  }, [&] {
    return PMPI_Rget(origin_addr, origin_count, origin_datatype, target_rank, target_disp, target_count,
                     target_datatype, win, request);
  });
}

int handle_Raccumulate(const void* origin_addr, int origin_count, MPI_Datatype origin_datatype, int target_rank,
                       MPI_Aint target_disp, int target_count, MPI_Datatype target_datatype, MPI_Op op,
                       MPI_Win win, MPI_Request* request) {
  return on_window(FunctionId::kRaccumulate, win, [&](DeviceWindow& dw) {
    if (op == MPI_NO_OP) return fail(win, MPI_ERR_OP);
    const int rc = get_accumulate(dw, win, FunctionId::kRaccumulate, origin_addr, origin_count, origin_datatype,
                                  nullptr, 0, MPI_DATATYPE_NULL, target_rank, target_disp, target_count,
                                  target_datatype, op, true);
    return rc == MPI_SUCCESS ? completed_request(request) : rc;
  }, [&] {
    return PMPI_Raccumulate(origin_addr, origin_count, origin_datatype, target_rank, target_disp, target_count,
                            target_datatype, op, win, request);
  });
}

int handle_Rget_accumulate(const void* origin_addr, int origin_count, MPI_Datatype origin_datatype,
                           void* result_addr, int result_count, MPI_Datatype result_datatype, int target_rank,
                           MPI_Aint target_disp, int target_count, MPI_Datatype target_datatype, MPI_Op op,
                           MPI_Win win, MPI_Request* request) {
  return on_window(FunctionId::kRget_accumulate, win, [&](DeviceWindow& dw) {
    const int rc = get_accumulate(dw, win, FunctionId::kRget_accumulate, origin_addr, origin_count,
                                  origin_datatype, result_addr, result_count, result_datatype, target_rank,
                                  target_disp, target_count, target_datatype, op, true);
    return rc == MPI_SUCCESS ? completed_request(request) : rc;
  }, [&] {
    return PMPI_Rget_accumulate(origin_addr, origin_count, origin_datatype, result_addr, result_count,
                                result_datatype, target_rank, target_disp, target_count, target_datatype, op, win,
                                request);
  });
}

// ---- Synchronization -----------------------------------------------------

int handle_Win_fence(int assert, MPI_Win win) {
  return on_window(FunctionId::kWin_fence, win, [&](DeviceWindow& dw) {
    Window& w = *dw.window;
    if (w.any_lock_held() || w.access_group_open() || w.exposure_open()) return fail(win, MPI_ERR_RMA_SYNC);
    return engine_result(win, FunctionId::kWin_fence, w.fence(!(assert & MPI_MODE_NOSUCCEED)));
  }, [&] { return PMPI_Win_fence(assert, win); });
}

int handle_Win_post(MPI_Group group, int assert, MPI_Win win) {
  return on_window(FunctionId::kWin_post, win, [&](DeviceWindow& dw) {
    if (dw.window->exposure_open()) return fail(win, MPI_ERR_RMA_SYNC);
    std::vector<int> origins;
    if (int rc = window_ranks(dw, group, &origins); rc != MPI_SUCCESS) return fail(win, rc);
    return engine_result(win, FunctionId::kWin_post, dw.window->post(origins));
  }, [&] { return PMPI_Win_post(group, assert, win); });
}

int handle_Win_start(MPI_Group group, int assert, MPI_Win win) {
  return on_window(FunctionId::kWin_start, win, [&](DeviceWindow& dw) {
    if (dw.window->access_group_open() || dw.window->any_lock_held()) return fail(win, MPI_ERR_RMA_SYNC);
    std::vector<int> targets;
    if (int rc = window_ranks(dw, group, &targets); rc != MPI_SUCCESS) return fail(win, rc);
    return engine_result(win, FunctionId::kWin_start, dw.window->start(targets));
  }, [&] { return PMPI_Win_start(group, assert, win); });
}

int handle_Win_complete(MPI_Win win) {
  return on_window(FunctionId::kWin_complete, win, [&](DeviceWindow& dw) {
    if (!dw.window->access_group_open()) return fail(win, MPI_ERR_RMA_SYNC);
    return engine_result(win, FunctionId::kWin_complete, dw.window->complete());
  }, [&] { return PMPI_Win_complete(win); });
}

int handle_Win_wait(MPI_Win win) {
  return on_window(FunctionId::kWin_wait, win, [&](DeviceWindow& dw) {
    if (!dw.window->exposure_open()) return fail(win, MPI_ERR_RMA_SYNC);
    return engine_result(win, FunctionId::kWin_wait, dw.window->wait());
  }, [&] { return PMPI_Win_wait(win); });
}

int handle_Win_test(MPI_Win win, int* flag) {
  return on_window(FunctionId::kWin_test, win, [&](DeviceWindow& dw) {
    if (!dw.window->exposure_open()) return fail(win, MPI_ERR_RMA_SYNC);
    bool done = false;
    const int rc = engine_result(win, FunctionId::kWin_test, dw.window->test(&done));
    *flag = done;
    return rc;
  }, [&] { return PMPI_Win_test(win, flag); });
}

int handle_Win_lock(int lock_type, int rank, int assert, MPI_Win win) {
  return on_window(FunctionId::kWin_lock, win, [&](DeviceWindow& dw) {
    Window& w = *dw.window;
    if (lock_type != MPI_LOCK_EXCLUSIVE && lock_type != MPI_LOCK_SHARED) return fail(win, MPI_ERR_LOCKTYPE);
    if (rank == MPI_PROC_NULL) return MPI_SUCCESS;
    if (rank < 0 || rank >= w.size()) return fail(win, MPI_ERR_RANK);
    if (w.locked(rank) || w.access_group_open()) return fail(win, MPI_ERR_RMA_SYNC);
    return engine_result(win, FunctionId::kWin_lock, w.lock(rank, lock_type == MPI_LOCK_EXCLUSIVE));
  }, [&] { return PMPI_Win_lock(lock_type, rank, assert, win); });
}

int handle_Win_unlock(int rank, MPI_Win win) {
  return on_window(FunctionId::kWin_unlock, win, [&](DeviceWindow& dw) {
    Window& w = *dw.window;
    if (rank == MPI_PROC_NULL) return MPI_SUCCESS;
    if (rank < 0 || rank >= w.size()) return fail(win, MPI_ERR_RANK);
    if (!w.locked(rank) || w.lock_all_held()) return fail(win, MPI_ERR_RMA_SYNC);
    return engine_result(win, FunctionId::kWin_unlock, w.unlock(rank));
  }, [&] { return PMPI_Win_unlock(rank, win); });
}

int handle_Win_lock_all(int assert, MPI_Win win) {
  return on_window(FunctionId::kWin_lock_all, win, [&](DeviceWindow& dw) {
    if (dw.window->any_lock_held() || dw.window->access_group_open()) return fail(win, MPI_ERR_RMA_SYNC);
    return engine_result(win, FunctionId::kWin_lock_all, dw.window->lock_all());
  }, [&] { return PMPI_Win_lock_all(assert, win); });
}

int handle_Win_unlock_all(MPI_Win win) {
  return on_window(FunctionId::kWin_unlock_all, win, [&](DeviceWindow& dw) {
    if (!dw.window->lock_all_held()) return fail(win, MPI_ERR_RMA_SYNC);
    return engine_result(win, FunctionId::kWin_unlock_all, dw.window->unlock_all());
  }, [&] { return PMPI_Win_unlock_all(win); });
}

namespace {

// Flush and flush_local: this engine completes operations at the target and
// at the origin together, so both are the same.
int flush_one(MPI_Win win, FunctionId id, int rank) {
  return on_window(id, win, [&](DeviceWindow& dw) {
    Window& w = *dw.window;
    if (rank == MPI_PROC_NULL) return MPI_SUCCESS;
    if (rank < 0 || rank >= w.size()) return fail(win, MPI_ERR_RANK);
    if (!w.passive_access(rank)) return fail(win, MPI_ERR_RMA_SYNC);
    return engine_result(win, id, w.flush());
  }, [&] { return id == FunctionId::kWin_flush ? PMPI_Win_flush(rank, win) : PMPI_Win_flush_local(rank, win); });
}

int flush_every(MPI_Win win, FunctionId id) {
  return on_window(id, win, [&](DeviceWindow& dw) {
    if (!dw.window->any_lock_held()) return fail(win, MPI_ERR_RMA_SYNC);
    return engine_result(win, id, dw.window->flush());
  }, [&] { return id == FunctionId::kWin_flush_all ? PMPI_Win_flush_all(win) : PMPI_Win_flush_local_all(win); });
}

}  // namespace

int handle_Win_flush(int rank, MPI_Win win) { return flush_one(win, FunctionId::kWin_flush, rank); }
int handle_Win_flush_local(int rank, MPI_Win win) { return flush_one(win, FunctionId::kWin_flush_local, rank); }
int handle_Win_flush_all(MPI_Win win) { return flush_every(win, FunctionId::kWin_flush_all); }
int handle_Win_flush_local_all(MPI_Win win) { return flush_every(win, FunctionId::kWin_flush_local_all); }

int handle_Win_sync(MPI_Win win) {
  return on_window(FunctionId::kWin_sync, win, [&](DeviceWindow&) {
    std::atomic_thread_fence(std::memory_order_seq_cst);
    return MPI_SUCCESS;
  }, [&] { return PMPI_Win_sync(win); });
}

}  // namespace ferry::shim

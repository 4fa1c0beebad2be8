// One-sided data movement on Ferry's windows (rma_window.h; created in
// rma_create.cc, synchronized in rma_sync.cc). Any committed datatype works:
// types are flattened into byte runs (rma_types.h) and moved run by run by
// the engine window. Operations whose target bytes lie in host memory, and
// every call on the real MPI's own windows, go to the real MPI, with device
// origin and result buffers staged (rma_host.h). Accumulates accept exactly
// the types and ops the real MPI accepts (its own argument checks decide):
// predefined reductions of the engine's element types run as kernels, the
// others (MPI_MINLOC on pair types, logical types, long double, ...) as the
// real MPI's reduction on host copies under the target's accumulate lock.
#include <climits>
#include <vector>

#include "engine/common/params.h"
#include "engine/core/traffic.h"
#include "handlers.h"
#include "mpi_shim/rma.h"
#include "mpi_shim/rma_across.h"
#include "mpi_shim/rma_host.h"
#include "mpi_shim/rma_internal.h"
#include "mpi_shim/rma_queue.h"
#include "mpi_shim/rma_types.h"
#include "mpi_shim/rma_window.h"
#include "mpi_shim/stats.h"
#include "mpi_shim/route.h"
#include "mpi_shim/translate.h"
#include "mpi_shim/wrapper_support.h"

namespace ferry::shim {
namespace {

// ---- Checks shared by the data-movement calls ---------------------------

// One operation's target: its runs and where its bytes lie in this process
// (or, in_host, that they lie in host memory the real MPI's window holds).
struct Target : Operand {
  char* at = nullptr;
  bool in_host = false;
};

// MPI's checks for one operation's target, in the order Open MPI makes them.
// In a dynamic window disp is an address at the target (MPI_BOTTOM-relative).
int check_target(DeviceWindow& dw, int target, MPI_Aint disp, int count, MPI_Datatype type, Target* out) {
  Window& w = *dw.window;
  if (target < 0 || target >= w.size()) return MPI_ERR_RANK;
  if (count < 0) return MPI_ERR_COUNT;
  if (int rc = describe(count, type, out); rc != MPI_SUCCESS) return rc;
  if (disp < 0 && !w.dynamic()) return MPI_ERR_DISP;
  if (!w.may_access(target)) return MPI_ERR_RMA_SYNC;
  const MPI_Aint first = disp * (w.dynamic() ? 1 : w.disp_unit(target)) + out->lo;
  const Status located = w.locate(target, first, out->bytes ? static_cast<std::size_t>(out->hi - out->lo) : 0,
                                  &out->at, dw.real_memory ? &out->in_host : nullptr);
  if (located == Status::kInvalidArgument) return MPI_ERR_RMA_RANGE;
  return ok(located) ? MPI_SUCCESS : MPI_ERR_OTHER;
}

// The origin (or result) buffer must carry as many bytes as the target.
int check_origin(const void* buffer, int count, MPI_Datatype type, std::size_t target_bytes, Operand* out) {
  if (int rc = describe(count, type, out); rc != MPI_SUCCESS) return rc;
  if (out->bytes != target_bytes) return MPI_ERR_ARG;
  if (!buffer && target_bytes > 0) return MPI_ERR_BUFFER;
  return MPI_SUCCESS;
}


// A request that is already complete: the R-calls finish before returning.
int completed_request(MPI_Request* request) {
  auto query = [](void*, MPI_Status* status) -> int {
    PMPI_Status_set_elements(status, MPI_BYTE, 0);
    PMPI_Status_set_cancelled(status, 0);
    status->MPI_SOURCE = MPI_UNDEFINED;
    status->MPI_TAG = MPI_UNDEFINED;
    return MPI_SUCCESS;
  };
  auto release = [](void*) -> int { return MPI_SUCCESS; };
  auto cancel = [](void*, int) -> int { return MPI_SUCCESS; };
  int rc = PMPI_Grequest_start(query, release, cancel, nullptr, request);
  return rc == MPI_SUCCESS ? PMPI_Grequest_complete(*request) : rc;
}

// An R-form on a window whose queue carries it (rma_queue.h): queued, then
// complete before returning, as on Ferry's own windows.
int queued_request(MPI_Win win, int queued, MPI_Request* request) {
  if (queued != MPI_SUCCESS) return queued;
  if (const int rc = quiet_across(win); rc != MPI_SUCCESS) return rc;
  return completed_request(request);
}

// The operation's target bytes are host memory: the real MPI's window moves
// them (real() makes the call, staging device buffers), in a passive-target
// epoch opened there now if the engine's is open and the real MPI's not yet.
template <typename Real>
int to_real_window(DeviceWindow& dw, MPI_Win win, int target, Real real) {
  const auto t = static_cast<std::size_t>(target);
  if (dw.window->lock_all_held() && !dw.real_lock_all) {
    if (int rc = PMPI_Win_lock_all(0, win); rc != MPI_SUCCESS) return rc;
    dw.real_lock_all = true;
  } else if (dw.window->locked(target) && !dw.window->lock_all_held() && !dw.real_locked[t]) {
    const int lock_type = dw.window->exclusive_lock(target) ? MPI_LOCK_EXCLUSIVE : MPI_LOCK_SHARED;
    if (int rc = PMPI_Win_lock(lock_type, target, 0, win); rc != MPI_SUCCESS) return rc;
    dw.real_locked[t] = 1;
  }
  dw.real_pending[t] = 1;
  return real();
}

// Put (get_data false) and Get, segment by segment on the window's stream.
template <typename Real>
int move(DeviceWindow& dw, MPI_Win win, FunctionId id, void* origin, int origin_count, MPI_Datatype origin_type,
         int target, MPI_Aint disp, int target_count, MPI_Datatype target_type, bool passive_only, bool get_data,
         Real real) {
  Window& w = *dw.window;
  if (target == MPI_PROC_NULL) return MPI_SUCCESS;
  Target t;
  if (int rc = check_target(dw, target, disp, target_count, target_type, &t); rc != MPI_SUCCESS) return fail(win, rc);
  if (passive_only && !w.passive_access(target)) return fail(win, MPI_ERR_RMA_SYNC);
  if (t.in_host) return to_real_window(dw, win, target, real);
  Operand o;
  if (int rc = check_origin(origin, origin_count, origin_type, t.bytes, &o); rc != MPI_SUCCESS) return fail(win, rc);
  const std::vector<Window::Segment> segments = pair_runs(t, &o, nullptr);
  const Status moved = get_data ? w.get(origin, t.at, segments.data(), segments.size())
                                : w.put(origin, t.at, segments.data(), segments.size());
  if (ok(moved) && target != w.rank() && stats_enabled()) count_traffic(TransportKind::kP2p, t.bytes);
  return engine_result(win, id, moved);
}

// Ferry's own checks of an accumulate's types, where the real MPI's verdict
// cannot be had: one basic type on every side.
int own_accumulate_verdict(MPI_Datatype origin_type, MPI_Datatype result_type, MPI_Datatype target_type, MPI_Op op) {
  const MPI_Datatype basic = basic_type(target_type);
  if (basic == MPI_DATATYPE_NULL) return MPI_ERR_TYPE;
  if (op != MPI_NO_OP && basic_type(origin_type) != basic) return MPI_ERR_ARG;
  if (result_type != MPI_DATATYPE_NULL && basic_type(result_type) != basic) return MPI_ERR_ARG;
  if (op == MPI_NO_OP && result_type == MPI_DATATYPE_NULL) return MPI_ERR_OP;  // only fetching calls take it
  DataType element;
  ReduceOp reduce;
  if (op == MPI_REPLACE || op == MPI_NO_OP) return MPI_SUCCESS;
  return engine_reduction(basic, op, &element, &reduce) ? MPI_SUCCESS : MPI_ERR_OP;
}

// Accumulate, Get_accumulate, Fetch_and_op and the R-forms. result is null
// (and result_type MPI_DATATYPE_NULL) for Accumulate.
template <typename Real>
int get_accumulate(DeviceWindow& dw, MPI_Win win, FunctionId id, const void* origin, int origin_count,
                   MPI_Datatype origin_type, void* result, int result_count, MPI_Datatype result_type, int target,
                   MPI_Aint disp, int target_count, MPI_Datatype target_type, MPI_Op op, bool passive_only,
                   Real real) {
  Window& w = *dw.window;
  int verdict = real_mpi_accumulate_verdict(origin, origin_count, origin_type, result, result_count, result_type,
                                            target_count, target_type, op);
  if (verdict == -1) verdict = own_accumulate_verdict(origin_type, result_type, target_type, op);
  if (verdict != MPI_SUCCESS) return fail(win, verdict);
  if (target == MPI_PROC_NULL) return MPI_SUCCESS;
  Target t;
  if (int rc = check_target(dw, target, disp, target_count, target_type, &t); rc != MPI_SUCCESS) return fail(win, rc);
  if (passive_only && !w.passive_access(target)) return fail(win, MPI_ERR_RMA_SYNC);
  if (t.in_host) return to_real_window(dw, win, target, real);
  // Elements are the target type's basic type, which the origin's and the
  // result's are too (the verdict says so).
  const MPI_Datatype basic = basic_type(target_type);
  int element_size = 0;
  if (basic == MPI_DATATYPE_NULL || PMPI_Type_size(basic, &element_size) != MPI_SUCCESS || element_size <= 0)
    return fail(win, MPI_ERR_TYPE);
  Operand o, r;
  const bool has_origin = op != MPI_NO_OP;
  if (has_origin)
    if (int rc = check_origin(origin, origin_count, origin_type, t.bytes, &o); rc != MPI_SUCCESS) return fail(win, rc);
  if (result)
    if (int rc = check_origin(result, result_count, result_type, t.bytes, &r); rc != MPI_SUCCESS) return fail(win, rc);
  const std::vector<Window::Segment> segments = pair_runs(t, has_origin ? &o : nullptr, result ? &r : nullptr);
  if (op == MPI_REPLACE || op == MPI_NO_OP) {
    // Bytes are bytes: no element type needed.
    const AccumulateOp how{op == MPI_REPLACE ? AccumulateOp::kReplace : AccumulateOp::kNoOp, ReduceOp::kSum};
    return engine_result(win, id, w.accumulate(origin, result, target, t.at, segments.data(), segments.size(), 1,
                                               DataType::kUint8, how));
  }
  DataType element;
  ReduceOp reduce;
  if (engine_reduction(basic, op, &element, &reduce))
    return engine_result(win, id, w.accumulate(origin, result, target, t.at, segments.data(), segments.size(),
                                               static_cast<std::size_t>(element_size), element,
                                               {AccumulateOp::kReduce, reduce}));
  return engine_result(win, id, w.accumulate_on_host(origin, result, target, t.at, segments.data(), segments.size(),
                                                     host_reduction(basic, op)));
}

const HostOperand kNoOperand{nullptr, 0, MPI_DATATYPE_NULL};

}  // namespace

int engine_result(MPI_Win win, FunctionId id, Status status) {
  if (ok(status)) return MPI_SUCCESS;
  FERRY_WARN(Pgas, "%s on a device window failed: %s", function_name(id), status_name(status));
  return raise_win_error(win, status == Status::kOutOfMemory ? MPI_ERR_NO_MEM : MPI_ERR_OTHER);
}

int fail(MPI_Win win, int error_class) {
  return error_class == MPI_SUCCESS ? MPI_SUCCESS : raise_win_error(win, error_class);
}


// ---- Data movement -------------------------------------------------------
// real() is the call on the real MPI's window: for its own windows, and for
// targets in host memory of Ferry's.

int handle_Put(const void* origin_addr, int origin_count, MPI_Datatype origin_datatype, int target_rank,
               MPI_Aint target_disp, int target_count, MPI_Datatype target_datatype, MPI_Win win) {
  count_bytes(FunctionId::kPut, origin_count, origin_datatype);
  auto real = [&] {
    if (RemoteAccess* queue = queue_of(win))
      return queue_put_get(win, *queue, const_cast<void*>(origin_addr), origin_count, origin_datatype, target_rank,
                           target_disp, target_count, target_datatype, false);
    if (int rc = check_target_range(win, target_rank, target_disp, target_count, target_datatype); rc != MPI_SUCCESS)
      return rc;
    return on_host_window(FunctionId::kPut, win, target_rank, {origin_addr, origin_count, origin_datatype},
                          kNoOperand, kNoOperand, nullptr, [&](const void* o, const void*, void*) {
      return PMPI_Put(o, origin_count, origin_datatype, target_rank, target_disp, target_count, target_datatype,
                      win);
    });
  };
  return on_data_window(FunctionId::kPut, win, [&](DeviceWindow& dw) -> int {
    return move(dw, win, FunctionId::kPut, const_cast<void*>(origin_addr), origin_count, origin_datatype, target_rank,
                target_disp, target_count, target_datatype, false, false, real);
  }, real);
}

int handle_Get(void* origin_addr, int origin_count, MPI_Datatype origin_datatype, int target_rank,
               MPI_Aint target_disp, int target_count, MPI_Datatype target_datatype, MPI_Win win) {
  count_bytes(FunctionId::kGet, origin_count, origin_datatype);
  auto real = [&] {
    if (RemoteAccess* queue = queue_of(win))
      return queue_put_get(win, *queue, origin_addr, origin_count, origin_datatype, target_rank, target_disp,
                           target_count, target_datatype, true);
    if (int rc = check_target_range(win, target_rank, target_disp, target_count, target_datatype); rc != MPI_SUCCESS)
      return rc;
    return on_host_window(FunctionId::kGet, win, target_rank, kNoOperand, kNoOperand,
                          {origin_addr, origin_count, origin_datatype}, nullptr, [&](const void*, const void*, void* r) {
      return PMPI_Get(r, origin_count, origin_datatype, target_rank, target_disp, target_count, target_datatype, win);
    });
  };
  return on_data_window(FunctionId::kGet, win, [&](DeviceWindow& dw) -> int {
    return move(dw, win, FunctionId::kGet, origin_addr, origin_count, origin_datatype, target_rank, target_disp,
                target_count, target_datatype, false, true, real);
  }, real);
}

int handle_Accumulate(const void* origin_addr, int origin_count, MPI_Datatype origin_datatype, int target_rank,
                      MPI_Aint target_disp, int target_count, MPI_Datatype target_datatype, MPI_Op op,
                      MPI_Win win) {
  count_bytes(FunctionId::kAccumulate, origin_count, origin_datatype);
  auto real = [&] {
    if (RemoteAccess* queue = queue_of(win))
      return queue_accumulate(win, *queue, origin_addr, origin_count, origin_datatype, nullptr, 0, MPI_DATATYPE_NULL,
                              target_rank, target_disp, target_count, target_datatype, op);
    if (int rc = check_target_range(win, target_rank, target_disp, target_count, target_datatype); rc != MPI_SUCCESS)
      return rc;
    return on_host_window(FunctionId::kAccumulate, win, target_rank, {origin_addr, origin_count, origin_datatype},
                          kNoOperand, kNoOperand, nullptr, [&](const void* o, const void*, void*) {
      return PMPI_Accumulate(o, origin_count, origin_datatype, target_rank, target_disp, target_count,
                             target_datatype, op, win);
    });
  };
  return on_data_window(FunctionId::kAccumulate, win, [&](DeviceWindow& dw) -> int {
    return get_accumulate(dw, win, FunctionId::kAccumulate, origin_addr, origin_count, origin_datatype, nullptr, 0,
                          MPI_DATATYPE_NULL, target_rank, target_disp, target_count, target_datatype, op, false,
                          real);
  }, real);
}

int handle_Get_accumulate(const void* origin_addr, int origin_count, MPI_Datatype origin_datatype,
                          void* result_addr, int result_count, MPI_Datatype result_datatype, int target_rank,
                          MPI_Aint target_disp, int target_count, MPI_Datatype target_datatype, MPI_Op op,
                          MPI_Win win) {
  count_bytes(FunctionId::kGet_accumulate, origin_count, origin_datatype);
  auto real = [&] {
    if (RemoteAccess* queue = queue_of(win))
      return queue_accumulate(win, *queue, origin_addr, origin_count, origin_datatype, result_addr, result_count,
                              result_datatype, target_rank, target_disp, target_count, target_datatype, op);
    if (int rc = check_target_range(win, target_rank, target_disp, target_count, target_datatype); rc != MPI_SUCCESS)
      return rc;
    return on_host_window(FunctionId::kGet_accumulate, win, target_rank, {origin_addr, origin_count, origin_datatype},
                          kNoOperand, {result_addr, result_count, result_datatype}, nullptr,
                          [&](const void* o, const void*, void* r) {
      return PMPI_Get_accumulate(o, origin_count, origin_datatype, r, result_count, result_datatype, target_rank,
                                 target_disp, target_count, target_datatype, op, win);
    });
  };
  return on_data_window(FunctionId::kGet_accumulate, win, [&](DeviceWindow& dw) -> int {
    return get_accumulate(dw, win, FunctionId::kGet_accumulate, origin_addr, origin_count, origin_datatype,
                          result_addr, result_count, result_datatype, target_rank, target_disp, target_count,
                          target_datatype, op, false, real);
  }, real);
}

int handle_Fetch_and_op(const void* origin_addr, void* result_addr, MPI_Datatype datatype, int target_rank,
                        MPI_Aint target_disp, MPI_Op op, MPI_Win win) {
  count_bytes(FunctionId::kFetch_and_op, 1, datatype);
  auto real = [&] {
    if (RemoteAccess* queue = queue_of(win))
      return queue_accumulate(win, *queue, origin_addr, 1, datatype, result_addr, 1, datatype, target_rank,
                              target_disp, 1, datatype, op);
    if (int rc = check_target_range(win, target_rank, target_disp, 1, datatype); rc != MPI_SUCCESS) return rc;
    return on_host_window(FunctionId::kFetch_and_op, win, target_rank, {origin_addr, 1, datatype}, kNoOperand,
                          {result_addr, 1, datatype}, nullptr, [&](const void* o, const void*, void* r) {
      return PMPI_Fetch_and_op(o, r, datatype, target_rank, target_disp, op, win);
    });
  };
  return on_data_window(FunctionId::kFetch_and_op, win, [&](DeviceWindow& dw) -> int {
    return get_accumulate(dw, win, FunctionId::kFetch_and_op, origin_addr, 1, datatype, result_addr, 1, datatype,
                          target_rank, target_disp, 1, datatype, op, false, real);
  }, real);
}

int handle_Compare_and_swap(const void* origin_addr, const void* compare_addr, void* result_addr,
                            MPI_Datatype datatype, int target_rank, MPI_Aint target_disp, MPI_Win win) {
  count_bytes(FunctionId::kCompare_and_swap, 1, datatype);
  auto real = [&] {
    if (RemoteAccess* queue = queue_of(win))
      return queue_compare_and_swap(win, *queue, origin_addr, compare_addr, result_addr, datatype, target_rank,
                                    target_disp);
    if (int rc = check_target_range(win, target_rank, target_disp, 1, datatype); rc != MPI_SUCCESS) return rc;
    return on_host_window(FunctionId::kCompare_and_swap, win, target_rank, {origin_addr, 1, datatype},
                          {compare_addr, 1, datatype}, {result_addr, 1, datatype}, nullptr,
                          [&](const void* o, const void* c, void* r) {
      return PMPI_Compare_and_swap(o, c, r, datatype, target_rank, target_disp, win);
    });
  };
  return on_data_window(FunctionId::kCompare_and_swap, win, [&](DeviceWindow& dw) -> int {
    int verdict = real_mpi_compare_and_swap_verdict(origin_addr, compare_addr, result_addr, datatype);
    if (verdict == -1) verdict = basic_type(datatype) == datatype ? MPI_SUCCESS : MPI_ERR_TYPE;
    if (verdict != MPI_SUCCESS) return fail(win, verdict);
    if (target_rank == MPI_PROC_NULL) return MPI_SUCCESS;
    Target t;
    if (int rc = check_target(dw, target_rank, target_disp, 1, datatype, &t); rc != MPI_SUCCESS) return fail(win, rc);
    if (t.in_host) return to_real_window(dw, win, target_rank, real);
    // One element, compared and swapped as bytes.
    int element_size = 0;
    if (!dense_data_type(datatype, &element_size) || element_size > 16) return fail(win, MPI_ERR_TYPE);
    if (!origin_addr || !compare_addr || !result_addr) return fail(win, MPI_ERR_BUFFER);
    return engine_result(win, FunctionId::kCompare_and_swap,
                         dw.window->compare_and_swap(origin_addr, compare_addr, result_addr, target_rank, t.at,
                                                     static_cast<std::size_t>(element_size)));
  }, real);
}

// On Ferry's windows the request-based calls to device memory complete the
// operation before returning; the real MPI's request completes the others.
int handle_Rput(const void* origin_addr, int origin_count, MPI_Datatype origin_datatype, int target_rank,
                MPI_Aint target_disp, int target_count, MPI_Datatype target_datatype, MPI_Win win,
                MPI_Request* request) {
  count_bytes(FunctionId::kRput, origin_count, origin_datatype);
  bool through_real = false;
  auto real = [&] {
    through_real = true;
    if (RemoteAccess* queue = queue_of(win))
      return queued_request(win, queue_put_get(win, *queue, const_cast<void*>(origin_addr), origin_count,
                                               origin_datatype, target_rank, target_disp, target_count,
                                               target_datatype, false), request);
    if (int rc = check_target_range(win, target_rank, target_disp, target_count, target_datatype); rc != MPI_SUCCESS)
      return rc;
    return on_host_window(FunctionId::kRput, win, target_rank, {origin_addr, origin_count, origin_datatype},
                          kNoOperand, kNoOperand, request, [&](const void* o, const void*, void*) {
      return PMPI_Rput(o, origin_count, origin_datatype, target_rank, target_disp, target_count, target_datatype,
                       win, request);
    });
  };
  return on_data_window(FunctionId::kRput, win, [&](DeviceWindow& dw) -> int {
    int rc = move(dw, win, FunctionId::kRput, const_cast<void*>(origin_addr), origin_count, origin_datatype,
                  target_rank, target_disp, target_count, target_datatype, true, false, real);
    if (through_real || rc != MPI_SUCCESS) return rc;
    rc = engine_result(win, FunctionId::kRput, dw.window->flush());
    return rc == MPI_SUCCESS ? completed_request(request) : rc;
  }, real);
}

int handle_Rget(void* origin_addr, int origin_count, MPI_Datatype origin_datatype, int target_rank,
                MPI_Aint target_disp, int target_count, MPI_Datatype target_datatype, MPI_Win win,
                MPI_Request* request) {
  count_bytes(FunctionId::kRget, origin_count, origin_datatype);
  bool through_real = false;
  auto real = [&] {
    through_real = true;
    if (RemoteAccess* queue = queue_of(win))
      return queued_request(win, queue_put_get(win, *queue, origin_addr, origin_count, origin_datatype, target_rank,
                                               target_disp, target_count, target_datatype, true), request);
    if (int rc = check_target_range(win, target_rank, target_disp, target_count, target_datatype); rc != MPI_SUCCESS)
      return rc;
    return on_host_window(FunctionId::kRget, win, target_rank, kNoOperand, kNoOperand,
                          {origin_addr, origin_count, origin_datatype}, request,
                          [&](const void*, const void*, void* r) {
      return PMPI_Rget(r, origin_count, origin_datatype, target_rank, target_disp, target_count, target_datatype,
                       win, request);
    });
  };
  return on_data_window(FunctionId::kRget, win, [&](DeviceWindow& dw) -> int {
    int rc = move(dw, win, FunctionId::kRget, origin_addr, origin_count, origin_datatype, target_rank, target_disp,
                  target_count, target_datatype, true, true, real);
    if (through_real || rc != MPI_SUCCESS) return rc;
    rc = engine_result(win, FunctionId::kRget, dw.window->flush());
    return rc == MPI_SUCCESS ? completed_request(request) : rc;
  }, real);
}

int handle_Raccumulate(const void* origin_addr, int origin_count, MPI_Datatype origin_datatype, int target_rank,
                       MPI_Aint target_disp, int target_count, MPI_Datatype target_datatype, MPI_Op op,
                       MPI_Win win, MPI_Request* request) {
  count_bytes(FunctionId::kRaccumulate, origin_count, origin_datatype);
  bool through_real = false;
  auto real = [&] {
    through_real = true;
    if (RemoteAccess* queue = queue_of(win))
      return queued_request(win, queue_accumulate(win, *queue, origin_addr, origin_count, origin_datatype, nullptr, 0,
                                                  MPI_DATATYPE_NULL, target_rank, target_disp, target_count,
                                                  target_datatype, op), request);
    if (int rc = check_target_range(win, target_rank, target_disp, target_count, target_datatype); rc != MPI_SUCCESS)
      return rc;
    return on_host_window(FunctionId::kRaccumulate, win, target_rank, {origin_addr, origin_count, origin_datatype},
                          kNoOperand, kNoOperand, request, [&](const void* o, const void*, void*) {
      return PMPI_Raccumulate(o, origin_count, origin_datatype, target_rank, target_disp, target_count,
                              target_datatype, op, win, request);
    });
  };
  return on_data_window(FunctionId::kRaccumulate, win, [&](DeviceWindow& dw) -> int {
    const int rc = get_accumulate(dw, win, FunctionId::kRaccumulate, origin_addr, origin_count, origin_datatype,
                                  nullptr, 0, MPI_DATATYPE_NULL, target_rank, target_disp, target_count,
                                  target_datatype, op, true, real);
    return through_real || rc != MPI_SUCCESS ? rc : completed_request(request);
  }, real);
}

int handle_Rget_accumulate(const void* origin_addr, int origin_count, MPI_Datatype origin_datatype,
                           void* result_addr, int result_count, MPI_Datatype result_datatype, int target_rank,
                           MPI_Aint target_disp, int target_count, MPI_Datatype target_datatype, MPI_Op op,
                           MPI_Win win, MPI_Request* request) {
  count_bytes(FunctionId::kRget_accumulate, origin_count, origin_datatype);
  bool through_real = false;
  auto real = [&] {
    through_real = true;
    if (RemoteAccess* queue = queue_of(win))
      return queued_request(win, queue_accumulate(win, *queue, origin_addr, origin_count, origin_datatype,
                                                  result_addr, result_count, result_datatype, target_rank,
                                                  target_disp, target_count, target_datatype, op), request);
    if (int rc = check_target_range(win, target_rank, target_disp, target_count, target_datatype); rc != MPI_SUCCESS)
      return rc;
    return on_host_window(FunctionId::kRget_accumulate, win, target_rank,
                          {origin_addr, origin_count, origin_datatype}, kNoOperand,
                          {result_addr, result_count, result_datatype}, request,
                          [&](const void* o, const void*, void* r) {
      return PMPI_Rget_accumulate(o, origin_count, origin_datatype, r, result_count, result_datatype, target_rank,
                                  target_disp, target_count, target_datatype, op, win, request);
    });
  };
  return on_data_window(FunctionId::kRget_accumulate, win, [&](DeviceWindow& dw) -> int {
    const int rc = get_accumulate(dw, win, FunctionId::kRget_accumulate, origin_addr, origin_count,
                                  origin_datatype, result_addr, result_count, result_datatype, target_rank,
                                  target_disp, target_count, target_datatype, op, true, real);
    return through_real || rc != MPI_SUCCESS ? rc : completed_request(request);
  }, real);
}

}  // namespace ferry::shim

#include "mpi_shim/rma_queue.h"

#include <cstring>
#include <vector>

#include "engine/common/liveness.h"
#include "engine/common/log.h"
#include "engine/core/reduce_common.h"
#include "engine/core/traffic.h"
#include "engine/gpu/gpu.h"
#include "mpi_shim/engine_route.h"
#include "mpi_shim/rma_across.h"
#include "mpi_shim/rma_types.h"
#include "mpi_shim/stats.h"
#include "mpi_shim/wrapper_support.h"

namespace ferry::shim {
namespace {

namespace gda = ferry::gda;

// The predefined types and ops an accumulate names to its target, by
// position: every rank runs the same MPI library, so positions agree.
const std::vector<MPI_Datatype>& named_types() {
  static const std::vector<MPI_Datatype> types = {
      MPI_CHAR, MPI_SHORT, MPI_INT, MPI_LONG, MPI_LONG_LONG, MPI_SIGNED_CHAR, MPI_UNSIGNED_CHAR,
      MPI_UNSIGNED_SHORT, MPI_UNSIGNED, MPI_UNSIGNED_LONG, MPI_UNSIGNED_LONG_LONG, MPI_FLOAT, MPI_DOUBLE,
      MPI_LONG_DOUBLE, MPI_WCHAR, MPI_C_BOOL, MPI_INT8_T, MPI_INT16_T, MPI_INT32_T, MPI_INT64_T, MPI_UINT8_T,
      MPI_UINT16_T, MPI_UINT32_T, MPI_UINT64_T, MPI_AINT, MPI_COUNT, MPI_OFFSET, MPI_C_FLOAT_COMPLEX,
      MPI_C_DOUBLE_COMPLEX, MPI_C_LONG_DOUBLE_COMPLEX, MPI_BYTE, MPI_FLOAT_INT, MPI_DOUBLE_INT, MPI_LONG_INT,
      MPI_2INT, MPI_SHORT_INT, MPI_LONG_DOUBLE_INT, MPI_CXX_BOOL, MPI_CXX_FLOAT_COMPLEX, MPI_CXX_DOUBLE_COMPLEX,
      MPI_CXX_LONG_DOUBLE_COMPLEX, MPI_CHARACTER, MPI_INTEGER, MPI_REAL, MPI_DOUBLE_PRECISION, MPI_COMPLEX,
      MPI_DOUBLE_COMPLEX, MPI_LOGICAL, MPI_2REAL, MPI_2DOUBLE_PRECISION, MPI_2INTEGER, MPI_INTEGER1, MPI_INTEGER2,
      MPI_INTEGER4, MPI_INTEGER8, MPI_REAL4, MPI_REAL8, MPI_COMPLEX8, MPI_COMPLEX16};
  return types;
}
const std::vector<MPI_Op>& named_ops() {
  static const std::vector<MPI_Op> ops = {MPI_MAX,  MPI_MIN, MPI_SUM,  MPI_PROD,   MPI_LAND,   MPI_BAND,   MPI_LOR,
                                          MPI_BOR,  MPI_LXOR, MPI_BXOR, MPI_MINLOC, MPI_MAXLOC, MPI_REPLACE};
  return ops;
}
template <typename Handle>
int position(const std::vector<Handle>& handles, Handle handle) {
  for (std::size_t i = 0; i < handles.size(); ++i)
    if (handles[i] == handle) return static_cast<int>(i);
  return -1;
}

constexpr int kCodeShift = 16;

int queue_error(MPI_Win win, const RemoteAccess& queue) { return queue_failure(win, queue.status()); }

gda::GdaDescriptor descriptor(gda::GdaOp op, int target) {
  gda::GdaDescriptor d{};
  d.op = static_cast<std::uint8_t>(op);
  d.window = RemoteAccess::kWindowId;
  d.target = target;
  return d;
}

// Where target's bytes at disp begin (disp in its displacement units).
bool target_bytes(MPI_Win win, int target, MPI_Aint disp, const Operand& t, std::uint64_t* at) {
  int disp_unit = 1;
  if (!target_disp_unit(win, target, &disp_unit)) return false;
  *at = static_cast<std::uint64_t>(disp * disp_unit + t.lo);
  return true;
}

void count_queued(int target, std::size_t bytes, MPI_Win win) {
  if (stats_enabled() && target != rank_in_window(win)) count_traffic(TransportKind::kNet, bytes);
}

// target[i] = target[i] op origin[i], by the engine's host arithmetic.
struct EngineCombine {
  const void* origin;
  void* target;
  std::size_t count;
  template <typename T, ReduceOp Op>
  void run() {
    const T* in = static_cast<const T*>(origin);
    T* inout = static_cast<T*>(target);
    for (std::size_t i = 0; i < count; ++i) inout[i] = reduce<T, Op>(inout[i], in[i]);
  }
};

}  // namespace

int queue_failure(MPI_Win win, Status why) {
  if (why == Status::kPeerEnded) {
    FERRY_WARN(Pgas, "a window across machines: a peer of its GDA queue is lost: %s", last_ended_peer().c_str());
    return raise_win_error(win, peer_ended_error());
  }
  FERRY_WARN(Pgas, "a window across machines: its GDA queue failed: %s", status_name(why));
  return raise_win_error(win, MPI_ERR_OTHER);
}

RemoteAccess::Combiner queue_combiner() {
  return [](std::uint64_t code, const void* origin, void* target, std::size_t bytes) -> Status {
    const std::uint64_t type_at = code & ((1u << kCodeShift) - 1), op_at = code >> kCodeShift;
    if (type_at >= named_types().size() || op_at >= named_ops().size()) return Status::kInvalidArgument;
    const MPI_Datatype basic = named_types()[type_at];
    const MPI_Op op = named_ops()[op_at];
    if (op == MPI_REPLACE) {
      std::memcpy(target, origin, bytes);
      return Status::kOk;
    }
    // The engine's arithmetic where it has the type: no MPI call from the
    // proxy's thread. The real MPI's reduction for the rest (pair types,
    // logical, long double, ...).
    DataType element;
    ReduceOp reduce_op;
    if (engine_reduction(basic, op, &element, &reduce_op) && bytes % data_type_size(element) == 0) {
      EngineCombine combine{origin, target, bytes / data_type_size(element)};
      return dispatch_reduction(element, reduce_op, combine) ? Status::kOk : Status::kInvalidArgument;
    }
    return host_reduction(basic, op)(origin, target, bytes);
  };
}

int queue_put_get(MPI_Win win, RemoteAccess& queue, void* origin, int origin_count, MPI_Datatype origin_type,
                  int target, MPI_Aint disp, int target_count, MPI_Datatype target_type, bool get) {
  // The real MPI's checks: arguments and epoch.
  const int checked = get ? PMPI_Get(origin, 0, origin_type, target, disp, 0, target_type, win)
                          : PMPI_Put(origin, 0, origin_type, target, disp, 0, target_type, win);
  if (checked != MPI_SUCCESS || target == MPI_PROC_NULL) return checked;
  if (int rc = check_target_range(win, target, disp, target_count, target_type); rc != MPI_SUCCESS) return rc;
  Operand t, o;
  if (int rc = describe(target_count, target_type, &t); rc != MPI_SUCCESS) return raise_win_error(win, rc);
  if (int rc = describe(origin_count, origin_type, &o); rc != MPI_SUCCESS) return raise_win_error(win, rc);
  if (o.bytes != t.bytes) return raise_win_error(win, MPI_ERR_ARG);
  if (t.bytes == 0) return MPI_SUCCESS;
  if (!origin) return raise_win_error(win, MPI_ERR_BUFFER);
  std::uint64_t at = 0;
  if (!target_bytes(win, target, disp, t, &at)) return raise_win_error(win, MPI_ERR_WIN);
  for (const Window::Segment& piece : pair_runs(t, &o, nullptr)) {
    gda::GdaDescriptor d = descriptor(get ? gda::GdaOp::kGet : gda::GdaOp::kPut, target);
    d.source = reinterpret_cast<std::uintptr_t>(static_cast<char*>(origin) + piece.origin);
    d.offset = at + piece.target;
    d.bytes = piece.bytes;
    if (gda::post(queue.host_queue(), d) == gda::kRingFailed) return queue_error(win, queue);
  }
  count_queued(target, t.bytes, win);
  return MPI_SUCCESS;
}

int queue_accumulate(MPI_Win win, RemoteAccess& queue, const void* origin, int origin_count,
                     MPI_Datatype origin_type, void* result, int result_count, MPI_Datatype result_type, int target,
                     MPI_Aint disp, int target_count, MPI_Datatype target_type, MPI_Op op) {
  const bool fetch = result_type != MPI_DATATYPE_NULL;
  const int checked = fetch ? PMPI_Get_accumulate(origin, 0, origin_type, result, 0, result_type, target, disp, 0,
                                                  target_type, op, win)
                            : PMPI_Accumulate(origin, 0, origin_type, target, disp, 0, target_type, op, win);
  if (checked != MPI_SUCCESS || target == MPI_PROC_NULL) return checked;
  if (int rc = check_target_range(win, target, disp, target_count, target_type); rc != MPI_SUCCESS) return rc;
  const bool reads_origin = op != MPI_NO_OP;
  Operand t, o, r;
  if (int rc = describe(target_count, target_type, &t); rc != MPI_SUCCESS) return raise_win_error(win, rc);
  if (reads_origin)
    if (int rc = describe(origin_count, origin_type, &o); rc != MPI_SUCCESS) return raise_win_error(win, rc);
  if (fetch)
    if (int rc = describe(result_count, result_type, &r); rc != MPI_SUCCESS) return raise_win_error(win, rc);
  if ((reads_origin && o.bytes != t.bytes) || (fetch && r.bytes != t.bytes)) return raise_win_error(win, MPI_ERR_ARG);
  if (t.bytes == 0) return MPI_SUCCESS;
  if ((reads_origin && !origin) || (fetch && !result)) return raise_win_error(win, MPI_ERR_BUFFER);
  const int type_at = position(named_types(), basic_type(target_type));
  const int op_at = position(named_ops(), op);
  if (reads_origin && (type_at < 0 || op_at < 0)) {
    FERRY_WARN(Pgas, "a window across machines: an accumulate's type or op is not one its GDA queue carries");
    return raise_win_error(win, type_at < 0 ? MPI_ERR_TYPE : MPI_ERR_OP);
  }
  std::uint64_t at = 0;
  if (!target_bytes(win, target, disp, t, &at)) return raise_win_error(win, MPI_ERR_WIN);
  for (const Window::Segment& piece : pair_runs(t, reads_origin ? &o : nullptr, fetch ? &r : nullptr)) {
    // MPI_NO_OP only reads the target; every other op (MPI_REPLACE too) is
    // combined there, atomically with respect to other accumulates.
    const gda::GdaOp kind = !reads_origin ? gda::GdaOp::kGet
                            : fetch       ? gda::GdaOp::kGetAccumulate
                                          : gda::GdaOp::kAccumulate;
    gda::GdaDescriptor d = descriptor(kind, target);
    d.offset = at + piece.target;
    d.bytes = piece.bytes;
    char* fetched = fetch ? static_cast<char*>(result) + piece.result : nullptr;
    if (reads_origin) {
      d.source = reinterpret_cast<std::uintptr_t>(static_cast<const char*>(origin) + piece.origin);
      d.value = static_cast<std::uint64_t>(type_at) | static_cast<std::uint64_t>(op_at) << kCodeShift;
      d.signal_offset = reinterpret_cast<std::uintptr_t>(fetched);
    } else {
      d.source = reinterpret_cast<std::uintptr_t>(fetched);
    }
    if (gda::post(queue.host_queue(), d) == gda::kRingFailed) return queue_error(win, queue);
  }
  count_queued(target, t.bytes, win);
  return MPI_SUCCESS;
}

int queue_compare_and_swap(MPI_Win win, RemoteAccess& queue, const void* origin, const void* compare, void* result,
                           MPI_Datatype type, int target, MPI_Aint disp) {
  int verdict = real_mpi_compare_and_swap_verdict(origin, compare, result, type);
  if (verdict > 0) return raise_win_error(win, verdict);
  // The epoch, by a read of nothing.
  if (int rc = PMPI_Get(result, 0, type, target, disp, 0, type, win); rc != MPI_SUCCESS || target == MPI_PROC_NULL)
    return rc;
  if (int rc = check_target_range(win, target, disp, 1, type); rc != MPI_SUCCESS) return rc;
  int size = 0;
  if (PMPI_Type_size(type, &size) != MPI_SUCCESS || (size != 1 && size != 2 && size != 4 && size != 8))
    return raise_win_error(win, MPI_ERR_TYPE);
  if (!origin || !compare || !result) return raise_win_error(win, MPI_ERR_BUFFER);
  Operand t;
  if (int rc = describe(1, type, &t); rc != MPI_SUCCESS) return raise_win_error(win, rc);
  std::uint64_t at = 0;
  if (!target_bytes(win, target, disp, t, &at)) return raise_win_error(win, MPI_ERR_WIN);
  // The operands may be device memory.
  std::uint64_t value = 0, expected = 0, old = 0;
  if (!ok(gpu::copy(&value, origin, size)) || !ok(gpu::copy(&expected, compare, size)))
    return raise_win_error(win, MPI_ERR_OTHER);
  gda::GdaDescriptor d = descriptor(gda::GdaOp::kCompareSwap, target);
  d.offset = at;
  d.bytes = static_cast<std::uint64_t>(size);
  d.value = value;
  d.signal_offset = expected;
  const std::uint64_t ticket = gda::post(queue.host_queue(), d);
  if (ticket == gda::kRingFailed || !gda::take_result(queue.host_queue(), ticket, &old))
    return queue_error(win, queue);
  if (!ok(gpu::copy(result, &old, size))) return raise_win_error(win, MPI_ERR_OTHER);
  count_queued(target, static_cast<std::size_t>(size), win);
  return MPI_SUCCESS;
}

}  // namespace ferry::shim

#include "mpi_shim/route.h"

#include <mpi.h>

#include <cstring>

#include "engine/common/log.h"
#include "engine/common/params.h"
#include "engine/gpu/gpu.h"
#include "mpi_shim/call_span.h"
#include "mpi_shim/stats.h"

namespace ferry::shim {

ForcedRoute forced_route() {
  // params() has replaced a value that is none of these by the default
  // (and MPI_Init said so on rank 0).
  static const ForcedRoute forced = [] {
    const std::string& text = params().route;
    if (text == "staged") return ForcedRoute::kStaged;
    if (text == "pmpi") return ForcedRoute::kPmpi;
    return ForcedRoute::kAuto;
  }();
  return forced;
}

const char* forced_route_name(ForcedRoute forced) {
  switch (forced) {
    case ForcedRoute::kAuto: return "auto";
    case ForcedRoute::kStaged: return "staged";
    case ForcedRoute::kPmpi: return "pmpi";
  }
  return "?";
}

namespace {

bool is_device_buffer(const void* buffer) {
  if (buffer == nullptr || buffer == MPI_IN_PLACE || buffer == MPI_BOTTOM) return false;
  // Managed memory is host-accessible: the real MPI handles it correctly.
  return gpu::CallBuffers::remember(buffer).kind == gpu::MemoryKind::kDevice;
}

}  // namespace

const char* route_name(Route route) {
  switch (route) {
    case Route::kEngine: return "engine";
    case Route::kStaged: return "staged";
    case Route::kPmpi: return "pmpi";
  }
  return "?";
}

RouteDecision decide_route(FunctionId, std::initializer_list<const void*> buffers, bool engine_supported,
                           bool absolute_bottom) {
  if (forced_route() == ForcedRoute::kPmpi) return {Route::kPmpi, "FERRY_ROUTE=pmpi"};
  // The host-only fast path: no buffer can be device memory yet.
  if (!gpu::device_runtime_active()) return {Route::kPmpi, "no device memory in this process", false};
  bool any_device = false, any_bottom = false;
  for (const void* b : buffers) {
    any_device = any_device || is_device_buffer(b);
    any_bottom = any_bottom || b == MPI_BOTTOM;
  }
  if (!any_device && absolute_bottom && any_bottom)
    return {Route::kStaged, "MPI_BOTTOM: the memory the datatype names is classified"};
  if (!any_device) return {Route::kPmpi, "no device buffer"};
  if (forced_route() == ForcedRoute::kStaged) return {Route::kStaged, "FERRY_ROUTE=staged"};
  if (!engine_supported) return {Route::kStaged, "the engine does not run this call"};
  return {Route::kEngine, "device buffers"};
}

bool null_send_buffer(FunctionId id, const void* sendbuf, int count, MPI_Datatype type, const void* recvbuf) {
  if (sendbuf || count <= 0 || !gpu::device_runtime_active() || !is_device_buffer(recvbuf)) return false;
  int integers = 0, addresses = 0, types = 0, combiner = 0;
  if (type == MPI_DATATYPE_NULL ||
      PMPI_Type_get_envelope(type, &integers, &addresses, &types, &combiner) != MPI_SUCCESS ||
      combiner != MPI_COMBINER_NAMED)
    return false;
  FERRY_WARN(Route, "%s: a null send buffer with %d elements (MPI_IN_PLACE is not null): MPI_ERR_BUFFER",
             function_name(id), count);
  return true;
}

void record_route(FunctionId id, const RouteDecision& decision) {
  count_route(id, decision.route);
  if (CallSpan* span = CallSpan::current()) span->set_route(decision.route, decision.reason);
  FERRY_TRACE(Route, "%s -> %s (%s)", function_name(id), route_name(decision.route), decision.reason);
}

RouteDecision route_call(FunctionId id, std::initializer_list<const void*> buffers, bool absolute_bottom) {
  const RouteDecision decision = decide_route(id, buffers, false, absolute_bottom);
  record_route(id, decision);
  return decision;
}

}  // namespace ferry::shim

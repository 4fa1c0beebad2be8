// MPI_Init / MPI_Finalize, error reporting shared by the wrappers, and
// Open MPI's CUDA-awareness query.
#include <cstdio>
#include <cstdlib>
#include <new>
#include <string>
#include <vector>

#include "engine/common/log.h"
#include "engine/common/params.h"
#include "engine/common/trace.h"
#include "engine/core/net_channel.h"
#include "engine/gpu/gpu.h"
#include "ferry/ferry.h"
#include "handlers.h"
#include "mpi_shim/engine_route.h"
#include "mpi_shim/module_loading.h"
#include "mpi_shim/nonblocking_engine.h"
#include "mpi_shim/peer_pt2pt.h"
#include "mpi_shim/request_registry.h"
#include "mpi_shim/rma.h"
#include "mpi_shim/route.h"
#include "mpi_shim/staging.h"
#include "mpi_shim/stats.h"
#include "mpi_shim/wrapper_support.h"

namespace ferry::shim {
namespace {

void after_init() {
  int rank = -1;
  PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
  set_log_rank(rank);
  if (trace_enabled()) {
    trace_set_rank(rank);
    // At exit, so MPI_Finalize's own span is in the file too.
    std::atexit([] { trace_write(); });
  }
  // A setting that silently does something else is worse than a line on
  // stderr: invalid values are reported by rank 0 even without FERRY_DEBUG;
  // unknown FERRY_* names only under it.
  if (rank == 0) {
    for (const std::string& problem : param_value_problems()) std::fprintf(stderr, "ferry: %s\n", problem.c_str());
    const std::string device = gpu::device_setting_problem();
    if (!device.empty()) std::fprintf(stderr, "ferry: %s\n", device.c_str());
  }
  // Interfaces differ from machine to machine: every rank says its own.
  const std::string net = net_setting_problem();
  if (!net.empty()) std::fprintf(stderr, "ferry: rank %d: %s; device calls between machines are staged\n", rank,
                                 net.c_str());
  for (const std::string& name : param_unknown_names()) FERRY_WARN(Init, "%s", name.c_str());
  peer::start();
  if (asked_for_eager_loading())
    FERRY_INFO(Init, "CUDA_MODULE_LOADING=EAGER: this program calls ferry_win_device_handle and chose no loading mode");
  if (asked_for_device_connections())
    FERRY_INFO(Init, "CUDA_DEVICE_MAX_CONNECTIONS=%s: this program calls ferry_win_device_handle and chose no number",
               kDeviceConnections);
  FERRY_INFO(Init, "Ferry %d.%d.%d loaded; FERRY_ROUTE=%s FERRY_DEVICE=%s", FERRY_VERSION_MAJOR,
             FERRY_VERSION_MINOR, FERRY_VERSION_PATCH, forced_route_name(forced_route()), params().device.c_str());
}

}  // namespace

int error_code_saying(int error_class, const char* text) {
#if defined(FERRY_MPI_MPICH)
  (void)text;
  return error_class;
#else
  int code = error_class;
  if (PMPI_Add_error_code(error_class, &code) != MPI_SUCCESS) return error_class;
  PMPI_Add_error_string(code, text);
  return code;
#endif
}

int raise_error(MPI_Comm comm, int error_class) {
  PMPI_Comm_call_errhandler(comm == MPI_COMM_NULL ? MPI_COMM_WORLD : comm, error_class);
  return error_class;
}

int raise_win_error(MPI_Win win, int error_class) {
  if (win == MPI_WIN_NULL) return raise_error(MPI_COMM_WORLD, error_class);
  PMPI_Win_call_errhandler(win, error_class);
  return error_class;
}

int raise_file_error(MPI_File file, int error_class) {
  PMPI_File_call_errhandler(file, error_class);
  return error_class;
}

namespace {

// The error class of the exception being handled.
int escaped_error_class(FunctionId id) {
  int error_class = MPI_ERR_INTERN;
  try {
    throw;
  } catch (const std::bad_alloc&) {
    error_class = MPI_ERR_NO_MEM;
  } catch (...) {
  }
  FERRY_WARN(Shim, "%s failed inside Ferry (MPI error class %d)", function_name(id), error_class);
  return error_class;
}

}  // namespace

int fail_from_wrapper(MPI_Comm comm, FunctionId id) { return raise_error(comm, escaped_error_class(id)); }

int fail_from_wrapper_win(MPI_Win win, FunctionId id) { return raise_win_error(win, escaped_error_class(id)); }

int fail_from_wrapper_file(MPI_File file, FunctionId id) { return raise_file_error(file, escaped_error_class(id)); }

int handle_Init(int* argc, char*** argv) {
  const int result = PMPI_Init(argc, argv);
  if (result == MPI_SUCCESS) after_init();
  return result;
}

int handle_Init_thread(int* argc, char*** argv, int required, int* provided) {
  const int result = PMPI_Init_thread(argc, argv, required, provided);
  if (result == MPI_SUCCESS) after_init();
  return result;
}

int handle_Finalize() {
  if (stats_enabled()) {
    int rank = -1;
    PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
    print_stats(rank);
  }
  nbc::finalize();
  release_verdict_window();
  release_engine_communicators();
  peer::stop();
  release_tracked_requests();
  release_staging_pools();
  return PMPI_Finalize();
}

}  // namespace ferry::shim

// Open MPI's extension (mpi-ext.h). Codes such as PETSc and Kokkos ask it
// before passing device pointers; with Ferry routing device buffers, they may.
extern "C" __attribute__((visibility("default"))) int MPIX_Query_cuda_support(void) {
  try {
    if (ferry::shim::forced_route() == ferry::shim::ForcedRoute::kPmpi) return 0;
    return ferry::gpu::active_backend() != nullptr ? 1 : 0;
  } catch (...) {
    return 0;
  }
}

#if defined(FERRY_MPI_MPICH) && defined(MPIX_GPU_SUPPORT_CUDA)
// MPICH's form of the question (mpi.h): CUDA as above; the other kinds of
// GPU are MPICH's own answer.
extern "C" __attribute__((visibility("default"))) int MPIX_GPU_query_support(int gpu_type, int* is_supported) {
  if (gpu_type == MPIX_GPU_SUPPORT_CUDA && is_supported && MPIX_Query_cuda_support()) {
    *is_supported = 1;
    return MPI_SUCCESS;
  }
  return PMPIX_GPU_query_support(gpu_type, is_supported);
}
#endif

// Open MPI 5's ROCm counterpart (declared in its mpi-ext.h; 4.1 has none):
// in a HIP build, the same answer as MPIX_Query_cuda_support; 0 in others,
// whose device buffers are not AMD GPU memory.
extern "C" __attribute__((visibility("default"))) int MPIX_Query_rocm_support(void) {
#ifdef FERRY_HAVE_HIP
  return MPIX_Query_cuda_support();
#else
  return 0;
#endif
}

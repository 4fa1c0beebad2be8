#include "mpi_shim/module_loading.h"

#include <mpi.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "engine/common/elf_symbols.h"
#include "engine/gpu/gpu.h"

namespace ferry::shim {
namespace {

bool g_asked_for_eager = false;
bool g_asked_for_connections = false;

// Before main and before the program's first CUDA call, which is when the
// driver reads CUDA_MODULE_LOADING and CUDA_DEVICE_MAX_CONNECTIONS. Only for
// programs that name Ferry's device API (their kernels may wait on the
// proxy), and never over the user's own choice: eager loading costs
// start-up time and device memory, more connections more of the device's
// work queues.
__attribute__((constructor)) void prepare_cuda_for_device_api_programs() {
  const bool loading_chosen = std::getenv("CUDA_MODULE_LOADING") != nullptr;
  const bool connections_chosen = std::getenv("CUDA_DEVICE_MAX_CONNECTIONS") != nullptr;
  if (loading_chosen && connections_chosen) return;
  if (!elf_names_dynamic_symbol("/proc/self/exe", "ferry_win_device_handle")) return;
  if (!loading_chosen) g_asked_for_eager = setenv("CUDA_MODULE_LOADING", "EAGER", 0) == 0;
  if (!connections_chosen)
    g_asked_for_connections = setenv("CUDA_DEVICE_MAX_CONNECTIONS", kDeviceConnections, 0) == 0;
}

}  // namespace

bool asked_for_eager_loading() { return g_asked_for_eager; }

bool asked_for_device_connections() { return g_asked_for_connections; }

void warn_if_modules_load_lazily() {
  static std::atomic<bool> said{false};
  gpu::Backend* backend = gpu::active_backend();
  if (!backend || !backend->loads_modules_lazily() || said.exchange(true)) return;
  int rank = 0;
  PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank != 0) return;
  std::fprintf(stderr,
               "ferry: CUDA loads kernels lazily in this program: a kernel that waits on a rank of another machine "
               "(quiet, wait_until, barrier) hangs if another kernel is launched for the first time meanwhile; "
               "set CUDA_MODULE_LOADING=EAGER in the job's environment\n");
}

void warn_if_few_device_connections() {
  static std::atomic<bool> said{false};
  gpu::Backend* backend = gpu::active_backend();
  const char* variable = backend ? backend->work_queues_variable() : nullptr;
  if (!variable) return;
  const char* chosen = std::getenv(variable);
  if ((chosen && std::strcmp(chosen, kDeviceConnections) == 0) || said.exchange(true)) return;
  int rank = 0;
  PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank != 0) return;
  std::fprintf(stderr,
               "ferry: %s=%s: a kernel that waits on a rank of another machine hangs if Ferry's proxy copies "
               "through the same device work queue; %s (the most) makes that least likely\n",
               variable, chosen ? chosen : "unset (8)", kDeviceConnections);
}

}  // namespace ferry::shim

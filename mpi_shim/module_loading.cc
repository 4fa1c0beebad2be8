#include "mpi_shim/module_loading.h"

#include <mpi.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>

#include "engine/common/elf_symbols.h"
#include "engine/gpu/gpu.h"

namespace ferry::shim {
namespace {

bool g_asked_for_eager = false;

// Before main and before the program's first CUDA call, which is when the
// driver reads CUDA_MODULE_LOADING. Only for programs that name Ferry's
// device API (their kernels may wait on the proxy), and never over the
// user's own choice: eager loading costs start-up time and device memory.
__attribute__((constructor)) void prefer_eager_loading_for_device_api_programs() {
  if (std::getenv("CUDA_MODULE_LOADING")) return;
  if (!elf_names_dynamic_symbol("/proc/self/exe", "ferry_win_device_handle")) return;
  g_asked_for_eager = setenv("CUDA_MODULE_LOADING", "EAGER", 0) == 0;
}

}  // namespace

bool asked_for_eager_loading() { return g_asked_for_eager; }

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

}  // namespace ferry::shim

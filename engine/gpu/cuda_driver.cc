// The CUDA driver calls the backend makes (virtual memory management and
// stream memory operations), reached through the runtime's
// cudaGetDriverEntryPoint so that libferry.so does not link libcuda; and the
// conversion of runtime errors to Status.
#include "engine/gpu/cuda_backend_internal.h"

namespace ferry::gpu::cuda_detail {

Status from_cuda(cudaError_t error, const char* what) {
  if (error == cudaSuccess) return Status::kOk;
  cudaGetLastError();  // clear the sticky-free error so later calls are not blamed
  FERRY_WARN(Gpu, "%s: %s", what, cudaGetErrorString(error));
  return error == cudaErrorMemoryAllocation ? Status::kOutOfMemory : Status::kGpuError;
}

namespace {

bool driver_entry_point(const char* symbol, void** function) {
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
#if CUDART_VERSION >= 12050
  const cudaError_t error = cudaGetDriverEntryPointByVersion(symbol, function, 12000, cudaEnableDefault, &found);
#else
  const cudaError_t error = cudaGetDriverEntryPoint(symbol, function, cudaEnableDefault, &found);
#endif
  if (error == cudaSuccess && found == cudaDriverEntryPointSuccess && *function) return true;
  cudaGetLastError();
  FERRY_WARN(Gpu, "CUDA driver entry point %s not found", symbol);
  return false;
}

}  // namespace

const VmmDriver* vmm_driver() {
  static const VmmDriver* driver = [] () -> const VmmDriver* {
    auto* d = new VmmDriver{};
    const bool found =
        driver_entry_point("cuGetErrorString", reinterpret_cast<void**>(&d->get_error_string)) &&
        driver_entry_point("cuMemGetAllocationGranularity", reinterpret_cast<void**>(&d->get_allocation_granularity)) &&
        driver_entry_point("cuMemAddressReserve", reinterpret_cast<void**>(&d->address_reserve)) &&
        driver_entry_point("cuMemAddressFree", reinterpret_cast<void**>(&d->address_free)) &&
        driver_entry_point("cuMemCreate", reinterpret_cast<void**>(&d->create)) &&
        driver_entry_point("cuMemRelease", reinterpret_cast<void**>(&d->release)) &&
        driver_entry_point("cuMemExportToShareableHandle", reinterpret_cast<void**>(&d->export_to_shareable_handle)) &&
        driver_entry_point("cuMemImportFromShareableHandle",
                           reinterpret_cast<void**>(&d->import_from_shareable_handle)) &&
        driver_entry_point("cuMemMap", reinterpret_cast<void**>(&d->map)) &&
        driver_entry_point("cuMemUnmap", reinterpret_cast<void**>(&d->unmap)) &&
        driver_entry_point("cuMemSetAccess", reinterpret_cast<void**>(&d->set_access));
    if (found) return d;
    delete d;
    return nullptr;
  }();
  return driver;
}

const MemOpsDriver* memops_driver() {
  static const MemOpsDriver* driver = [] () -> const MemOpsDriver* {
    auto* d = new MemOpsDriver{};
    const bool found = driver_entry_point("cuGetErrorString", reinterpret_cast<void**>(&d->get_error_string)) &&
                       driver_entry_point("cuStreamWaitValue32", reinterpret_cast<void**>(&d->wait_value)) &&
                       driver_entry_point("cuStreamWriteValue32", reinterpret_cast<void**>(&d->write_value));
    if (found) return d;
    delete d;
    return nullptr;
  }();
  return driver;
}

const DmaBufDriver* dmabuf_driver() {
  static const DmaBufDriver* driver = [] () -> const DmaBufDriver* {
    auto* d = new DmaBufDriver{};
    const bool found =
        driver_entry_point("cuGetErrorString", reinterpret_cast<void**>(&d->get_error_string)) &&
        driver_entry_point("cuMemGetHandleForAddressRange", reinterpret_cast<void**>(&d->get_handle_for_address_range));
    if (found) return d;
    delete d;
    return nullptr;
  }();
  return driver;
}

bool modules_load_lazily() {
  static const bool lazy = [] {
    PFN_cuModuleGetLoadingMode_v11070 get_loading_mode = nullptr;
    if (!driver_entry_point("cuModuleGetLoadingMode", reinterpret_cast<void**>(&get_loading_mode))) return false;
    CUmoduleLoadingMode mode = CU_MODULE_EAGER_LOADING;
    return get_loading_mode(&mode) == CUDA_SUCCESS && mode == CU_MODULE_LAZY_LOADING;
  }();
  return lazy;
}

}  // namespace ferry::gpu::cuda_detail

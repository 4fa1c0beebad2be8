// What the CUDA backend's files share: the conversion of runtime and
// driver errors to Status, the driver calls reached through the runtime's
// entry points (cuda_driver.cc), and the device-to-device copy through a
// CUDA graph (cuda_graph_copy.cc) that CudaBackend (cuda_backend.cc) tries
// first. Compiled only when the CUDA toolkit is found; engine/gpu only.
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>

#include <cstddef>

#include "engine/gpu/gpu.h"

namespace ferry::gpu::cuda_detail {

// kOk for cudaSuccess; otherwise clears the error, logs it with what, and
// maps it to kOutOfMemory or kGpuError.
Status from_cuda(cudaError_t error, const char* what);

#define FERRY_CUDA(call) ::ferry::gpu::cuda_detail::from_cuda((call), #call)

// The driver's virtual memory management calls.
struct VmmDriver {
  PFN_cuGetErrorString_v6000 get_error_string;
  PFN_cuMemGetAllocationGranularity_v10020 get_allocation_granularity;
  PFN_cuMemAddressReserve_v10020 address_reserve;
  PFN_cuMemAddressFree_v10020 address_free;
  PFN_cuMemCreate_v10020 create;
  PFN_cuMemRelease_v10020 release;
  PFN_cuMemExportToShareableHandle_v10020 export_to_shareable_handle;
  PFN_cuMemImportFromShareableHandle_v10020 import_from_shareable_handle;
  PFN_cuMemMap_v10020 map;
  PFN_cuMemUnmap_v10020 unmap;
  PFN_cuMemSetAccess_v10020 set_access;
};

// nullptr when the driver lacks any of them (older than CUDA 10.2).
const VmmDriver* vmm_driver();

// The stream memory operations (stream_wait_value, stream_write_value).
struct MemOpsDriver {
  PFN_cuGetErrorString_v6000 get_error_string;
  PFN_cuStreamWaitValue32_v11070 wait_value;
  PFN_cuStreamWriteValue32_v11070 write_value;
};

// nullptr when the driver lacks them.
const MemOpsDriver* memops_driver();

// Device memory as a dma-buf (export_dmabuf).
struct DmaBufDriver {
  PFN_cuGetErrorString_v6000 get_error_string;
  PFN_cuMemGetHandleForAddressRange_v11070 get_handle_for_address_range;
};

// nullptr when the driver lacks it (older than CUDA 11.7).
const DmaBufDriver* dmabuf_driver();

template <typename Driver>
Status from_cu(const Driver* d, CUresult result, const char* what) {
  if (result == CUDA_SUCCESS) return Status::kOk;
  const char* text = nullptr;
  if (d->get_error_string(result, &text) != CUDA_SUCCESS || !text) text = "unknown error";
  FERRY_WARN(Gpu, "%s: %s (%d)", what, text, static_cast<int>(result));
  return result == CUDA_ERROR_OUT_OF_MEMORY ? Status::kOutOfMemory : Status::kGpuError;
}

#define FERRY_CU(d, call) ::ferry::gpu::cuda_detail::from_cu((d), (d)->call, #call)

// Whether the driver loads modules lazily (CUDA_MODULE_LOADING=LAZY, the
// default since CUDA 12.2); false when it cannot say.
bool modules_load_lazily();

// Device to device through the current device's copy graph (*done), or
// nothing done: the caller copies another way.
Status copy_by_graph(void* dst, const void* src, std::size_t bytes, cudaStream_t stream, bool* done);

}  // namespace ferry::gpu::cuda_detail

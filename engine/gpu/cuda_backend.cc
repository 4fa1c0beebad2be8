// CUDA backend, compiled when the CUDA toolkit is found. Runtime API for
// allocation, copies, streams, events and IPC; pointer classification goes
// through the driver already loaded by the application (see cuda_probe.cc),
// so classifying never starts CUDA in a process that has not.
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstring>
#include <mutex>

#include "engine/common/launcher.h"
#include "engine/gpu/cuda_probe.h"
#include "engine/gpu/gpu.h"

namespace ferry::gpu {
namespace {

Status from_cuda(cudaError_t error, const char* what) {
  if (error == cudaSuccess) return Status::kOk;
  cudaGetLastError();  // clear the sticky-free error so later calls are not blamed
  FERRY_WARN(Gpu, "%s: %s", what, cudaGetErrorString(error));
  return error == cudaErrorMemoryAllocation ? Status::kOutOfMemory : Status::kGpuError;
}

#define FERRY_CUDA(call) from_cuda((call), #call)

// An application that has not chosen a device gets one by its local rank, so
// ranks spread over the GPUs of a node as the launcher placed them.
void ensure_device_for_thread(int device_count) {
  if (cuda_thread_has_context() || device_count <= 0) return;
  const int local = local_rank();
  cudaSetDevice(local >= 0 ? local % device_count : 0);
}

// Copies run on the device that owns the memory when the thread has no
// current context, so they take the direct path.
void ensure_device_for_pointer(const void* ptr) {
  if (cuda_thread_has_context()) return;
  cudaPointerAttributes attributes{};
  if (cudaPointerGetAttributes(&attributes, ptr) == cudaSuccess && attributes.device >= 0)
    cudaSetDevice(attributes.device);
  cudaGetLastError();
}

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int device_count) : device_count_(device_count) {}

  BackendKind kind() const override { return BackendKind::kCuda; }
  int device_count() const override { return device_count_; }
  std::string describe_devices() const override {
    std::string out;
    for (int d = 0; d < device_count_; ++d) {
      cudaDeviceProp prop{};
      if (cudaGetDeviceProperties(&prop, d) != cudaSuccess) continue;
      char line[512];
      std::snprintf(line, sizeof(line), "cuda device %d: %s, sm_%d%d, %d SMs, %.1f GiB, PCI %04x:%02x:%02x\n", d,
                    prop.name, prop.major, prop.minor, prop.multiProcessorCount,
                    static_cast<double>(prop.totalGlobalMem) / (1 << 30), prop.pciDomainID, prop.pciBusID,
                    prop.pciDeviceID);
      out += line;
    }
    return out;
  }

  Status set_device(int device) override { return FERRY_CUDA(cudaSetDevice(device)); }

  Status device_alloc(std::size_t bytes, void** ptr) override {
    ensure_device_for_thread(device_count_);
    return FERRY_CUDA(cudaMalloc(ptr, bytes));
  }
  Status device_free(void* ptr) override { return FERRY_CUDA(cudaFree(ptr)); }
  Status pinned_alloc(std::size_t bytes, void** ptr) override {
    ensure_device_for_thread(device_count_);
    return FERRY_CUDA(cudaHostAlloc(ptr, bytes, cudaHostAllocPortable));
  }
  Status pinned_free(void* ptr) override { return FERRY_CUDA(cudaFreeHost(ptr)); }

  Status host_register(void* ptr, std::size_t bytes) override {
    return FERRY_CUDA(cudaHostRegister(ptr, bytes, cudaHostRegisterPortable | cudaHostRegisterMapped));
  }
  Status host_unregister(void* ptr) override { return FERRY_CUDA(cudaHostUnregister(ptr)); }

  Status copy(void* dst, const void* src, std::size_t bytes) override {
    if (bytes == 0) return Status::kOk;
    ensure_device_for_pointer(src);
    FERRY_CHECK(FERRY_CUDA(cudaMemcpy(dst, src, bytes, cudaMemcpyDefault)));
    // From pageable memory cudaMemcpy may return while the DMA to the device
    // is still in flight: a peer process reading the memory next (an RMA
    // window, a mapped buffer) must find the bytes there.
    return FERRY_CUDA(cudaStreamSynchronize(cudaStreamLegacy));
  }
  Status copy_async(void* dst, const void* src, std::size_t bytes, Stream stream) override {
    if (bytes == 0) return Status::kOk;
    return FERRY_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, reinterpret_cast<cudaStream_t>(stream)));
  }

  Status stream_create(Stream* stream) override {
    ensure_device_for_thread(device_count_);
    cudaStream_t s = nullptr;
    // A blocking stream: engine work queues behind the application's work on
    // the legacy default stream, which is where most codes produce buffers.
    FERRY_CHECK(FERRY_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamDefault)));
    *stream = reinterpret_cast<Stream>(s);
    return Status::kOk;
  }
  Status stream_destroy(Stream stream) override {
    return FERRY_CUDA(cudaStreamDestroy(reinterpret_cast<cudaStream_t>(stream)));
  }
  Status stream_synchronize(Stream stream) override {
    return FERRY_CUDA(cudaStreamSynchronize(reinterpret_cast<cudaStream_t>(stream)));
  }
  Status event_create(Event* event) override {
    cudaEvent_t e = nullptr;
    FERRY_CHECK(FERRY_CUDA(cudaEventCreate(&e)));
    *event = reinterpret_cast<Event>(e);
    return Status::kOk;
  }
  Status event_destroy(Event event) override {
    return FERRY_CUDA(cudaEventDestroy(reinterpret_cast<cudaEvent_t>(event)));
  }
  Status event_record(Event event, Stream stream) override {
    return FERRY_CUDA(cudaEventRecord(reinterpret_cast<cudaEvent_t>(event), reinterpret_cast<cudaStream_t>(stream)));
  }
  Status stream_wait_event(Stream stream, Event event) override {
    return FERRY_CUDA(cudaStreamWaitEvent(reinterpret_cast<cudaStream_t>(stream), reinterpret_cast<cudaEvent_t>(event),
                                          0));
  }
  Status event_synchronize(Event event) override {
    return FERRY_CUDA(cudaEventSynchronize(reinterpret_cast<cudaEvent_t>(event)));
  }
  Status event_elapsed_ms(Event start, Event end, float* ms) override {
    return FERRY_CUDA(cudaEventElapsedTime(ms, reinterpret_cast<cudaEvent_t>(start), reinterpret_cast<cudaEvent_t>(end)));
  }

  bool query_pointer(const void* ptr, PointerInfo* info) override { return cuda_query_pointer(ptr, info); }

  Status ipc_export(void* device_ptr, IpcHandle* handle) override {
    static_assert(sizeof(cudaIpcMemHandle_t) <= sizeof(IpcHandle::bytes), "CUDA IPC handle must fit");
    PointerInfo info;
    if (!cuda_query_pointer(device_ptr, &info) || info.kind != MemoryKind::kDevice ||
        info.base != reinterpret_cast<std::uintptr_t>(device_ptr))
      return Status::kInvalidArgument;
    // From now on peers read this memory: copies into it must be complete
    // when they return, and any still in flight now must land first.
    if (!cuda_set_sync_memops(device_ptr)) FERRY_WARN(Gpu, "cannot make copies into %p synchronous", device_ptr);
    FERRY_CHECK(FERRY_CUDA(cudaDeviceSynchronize()));
    cudaIpcMemHandle_t cuda_handle;
    FERRY_CHECK(FERRY_CUDA(cudaIpcGetMemHandle(&cuda_handle, device_ptr)));
    *handle = IpcHandle{};
    handle->owner = BackendKind::kCuda;
    handle->size = info.size;
    std::memcpy(handle->bytes, &cuda_handle, sizeof(cuda_handle));
    return Status::kOk;
  }
  Status ipc_import(const IpcHandle& handle, void** device_ptr) override {
    if (handle.owner != BackendKind::kCuda) return Status::kInvalidArgument;
    ensure_device_for_thread(device_count_);
    cudaIpcMemHandle_t cuda_handle;
    std::memcpy(&cuda_handle, handle.bytes, sizeof(cuda_handle));
    return FERRY_CUDA(cudaIpcOpenMemHandle(device_ptr, cuda_handle, cudaIpcMemLazyEnablePeerAccess));
  }
  Status ipc_close(void* device_ptr) override { return FERRY_CUDA(cudaIpcCloseMemHandle(device_ptr)); }

 private:
  int device_count_;
};

}  // namespace

Backend* cuda_backend() {
  static Backend* backend = [] () -> Backend* {
    int count = 0;
    cudaError_t error = cudaGetDeviceCount(&count);
    if (error != cudaSuccess || count == 0) {
      cudaGetLastError();
      FERRY_INFO(Gpu, "no usable CUDA device (%s)", error == cudaSuccess ? "none found" : cudaGetErrorString(error));
      return nullptr;
    }
    FERRY_INFO(Gpu, "CUDA backend: %d device(s)", count);
    return new CudaBackend(count);
  }();
  return backend;
}

}  // namespace ferry::gpu

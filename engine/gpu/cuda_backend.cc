// CUDA backend, compiled when the CUDA toolkit is found. Runtime API for
// allocation, copies, streams, events and IPC; pointer classification goes
// through the driver already loaded by the application (see cuda_probe.cc),
// so classifying never starts CUDA in a process that has not. The virtual
// memory calls (vm_*) are driver API, reached through the runtime's
// cudaGetDriverEntryPoint so that libferry.so does not link libcuda. What
// they share is in cuda_backend_internal.h: the driver calls
// (cuda_driver.cc) and the copy through a CUDA graph (cuda_graph_copy.cc).
#include <unistd.h>

#include <cstdio>
#include <cstring>

#include "engine/common/launcher.h"
#include "engine/gpu/cuda_backend_internal.h"
#include "engine/gpu/cuda_probe.h"
#include "engine/gpu/gpu.h"

namespace ferry::gpu {
namespace {

using cuda_detail::copy_by_graph;
using cuda_detail::dmabuf_driver;
using cuda_detail::DmaBufDriver;
using cuda_detail::memops_driver;
using cuda_detail::MemOpsDriver;
using cuda_detail::vmm_driver;
using cuda_detail::VmmDriver;

// Waits for the work in the legacy default stream and in the calling
// thread's per-thread default stream: where the application's cudaMemcpy
// calls go.
Status wait_for_default_streams() {
  FERRY_CHECK(FERRY_CUDA(cudaStreamSynchronize(cudaStreamLegacy)));
  return FERRY_CUDA(cudaStreamSynchronize(cudaStreamPerThread));
}

// Pinned memory on device, exportable as a POSIX file descriptor.
CUmemAllocationProp chunk_properties(int device) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  return prop;
}

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
  ExecutionSite execution_site() const override { return ExecutionSite::kDevice; }
  bool physical_devices() const override { return true; }
  bool device_atomics() const override { return true; }
  int device_count() const override { return device_count_; }
  int multiprocessor_count(int device) const override {
    int sms = 0;
    return cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) == cudaSuccess ? sms : 0;
  }

  std::uint64_t device_key(int device) const override {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, device) != cudaSuccess) return static_cast<std::uint64_t>(device);
    std::uint64_t key = 1469598103934665603ull;  // FNV-1a over the UUID
    for (char byte : prop.uuid.bytes) key = (key ^ static_cast<unsigned char>(byte)) * 1099511628211ull;
    return key;
  }

  bool processes_take_turns(int device) const override {
    int mps = 0;
    if (cudaDeviceGetAttribute(&mps, cudaDevAttrMpsEnabled, device) != cudaSuccess) cudaGetLastError();
    return !mps;
  }

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
    bool done = false;
    FERRY_CHECK(copy_by_graph(dst, src, bytes, cudaStreamLegacy, &done));
    if (done) return Status::kOk;
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
  Status copy_and_wait(void* dst, const void* src, std::size_t bytes, Stream stream) override {
    bool done = false;
    if (bytes > 0) FERRY_CHECK(copy_by_graph(dst, src, bytes, reinterpret_cast<cudaStream_t>(stream), &done));
    return done ? Status::kOk : Backend::copy_and_wait(dst, src, bytes, stream);
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
  Status stream_create_urgent(Stream* stream) override {
    ensure_device_for_thread(device_count_);
    int least = 0, greatest = 0;
    FERRY_CHECK(FERRY_CUDA(cudaDeviceGetStreamPriorityRange(&least, &greatest)));
    cudaStream_t s = nullptr;
    FERRY_CHECK(FERRY_CUDA(cudaStreamCreateWithPriority(&s, cudaStreamDefault, greatest)));
    *stream = reinterpret_cast<Stream>(s);
    return Status::kOk;
  }
  Status stream_create_independent(Stream* stream) override {
    ensure_device_for_thread(device_count_);
    cudaStream_t s = nullptr;
    FERRY_CHECK(FERRY_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)));
    *stream = reinterpret_cast<Stream>(s);
    return Status::kOk;
  }
  Status stream_destroy(Stream stream) override {
    return FERRY_CUDA(cudaStreamDestroy(reinterpret_cast<cudaStream_t>(stream)));
  }
  Status stream_synchronize(Stream stream) override {
    return FERRY_CUDA(cudaStreamSynchronize(reinterpret_cast<cudaStream_t>(stream)));
  }
  Status stream_done(Stream stream, bool* done) override {
    const cudaError_t state = cudaStreamQuery(reinterpret_cast<cudaStream_t>(stream));
    *done = state == cudaSuccess;
    return state == cudaErrorNotReady ? Status::kOk : FERRY_CUDA(state);
  }
  Status export_dmabuf(const void* device_ptr, std::size_t bytes, int* fd, std::uint64_t* offset) override {
    const DmaBufDriver* d = dmabuf_driver();
    if (!d) return Status::kUnsupported;
    // Whole host pages: the driver takes no other range.
    const auto page = static_cast<std::uintptr_t>(sysconf(_SC_PAGESIZE));
    const auto start = reinterpret_cast<std::uintptr_t>(device_ptr);
    const std::uintptr_t base = start / page * page, end = (start + bytes + page - 1) / page * page;
    int handle = -1;
    FERRY_CHECK(FERRY_CU(d, get_handle_for_address_range(&handle, static_cast<CUdeviceptr>(base), end - base,
                                                          CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0)));
    *fd = handle;
    *offset = start - base;
    return Status::kOk;
  }
  bool loads_modules_lazily() const override { return cuda_detail::modules_load_lazily(); }
  const char* work_queues_variable() const override { return "CUDA_DEVICE_MAX_CONNECTIONS"; }
  bool stream_memory_ops() const override { return memops_driver() != nullptr; }
  Status stream_wait_value(Stream stream, const std::uint32_t* word, std::uint32_t value) override {
    const MemOpsDriver* d = memops_driver();
    if (!d) return Status::kUnsupported;
    return FERRY_CU(d, wait_value(reinterpret_cast<CUstream>(stream), reinterpret_cast<CUdeviceptr>(word), value,
                                  CU_STREAM_WAIT_VALUE_GEQ));
  }
  Status stream_write_value(Stream stream, std::uint32_t* word, std::uint32_t value) override {
    const MemOpsDriver* d = memops_driver();
    if (!d) return Status::kUnsupported;
    // The default flags fence first: the copies queued before are visible
    // to whoever sees the value.
    return FERRY_CU(d, write_value(reinterpret_cast<CUstream>(stream), reinterpret_cast<CUdeviceptr>(word), value,
                                   CU_STREAM_WRITE_VALUE_DEFAULT));
  }
  Status write_value_now(std::uint32_t* word, std::uint32_t value) override {
    const MemOpsDriver* d = memops_driver();
    if (!d) return Status::kUnsupported;
    // A non-blocking stream of its own: the engine's streams, and the legacy
    // stream that waits for them, may be stuck behind a wait on this word.
    cudaStream_t s = nullptr;
    FERRY_CHECK(FERRY_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)));
    Status status = FERRY_CU(d, write_value(reinterpret_cast<CUstream>(s), reinterpret_cast<CUdeviceptr>(word), value,
                                            CU_STREAM_WRITE_VALUE_DEFAULT));
    if (ok(status)) status = FERRY_CUDA(cudaStreamSynchronize(s));
    cudaStreamDestroy(s);
    return status;
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
  Status event_done(Event event, bool* done) override {
    const cudaError_t state = cudaEventQuery(reinterpret_cast<cudaEvent_t>(event));
    *done = state == cudaSuccess;
    return state == cudaErrorNotReady ? Status::kOk : FERRY_CUDA(state);
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
    // when they return, and any still in flight now must land first (a
    // pageable cudaMemcpy returns before its copy lands). Not by
    // cudaDeviceSynchronize, which waits for every stream, the engine's
    // waits on peers' flags too, and crashed inside the driver while other
    // threads of the process made CUDA calls.
    if (!cuda_set_sync_memops(device_ptr)) FERRY_WARN(Gpu, "cannot make copies into %p synchronous", device_ptr);
    FERRY_CHECK(wait_for_default_streams());
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

  Status vm_granularity(std::size_t* bytes) override {
    const VmmDriver* d = vmm_driver();
    if (!d) return Status::kUnsupported;
    int device = 0;
    FERRY_CHECK(current_device(&device));
    const CUmemAllocationProp prop = chunk_properties(device);
    return FERRY_CU(d, get_allocation_granularity(bytes, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  }
  Status vm_reserve(std::size_t bytes, void** base) override {
    const VmmDriver* d = vmm_driver();
    if (!d) return Status::kUnsupported;
    std::size_t alignment = 0;
    FERRY_CHECK(vm_granularity(&alignment));
    CUdeviceptr address = 0;
    FERRY_CHECK(FERRY_CU(d, address_reserve(&address, bytes, alignment, 0, 0)));
    *base = reinterpret_cast<void*>(address);
    return Status::kOk;
  }
  Status vm_unreserve(void* base, std::size_t bytes) override {
    const VmmDriver* d = vmm_driver();
    if (!d) return Status::kUnsupported;
    return FERRY_CU(d, address_free(reinterpret_cast<CUdeviceptr>(base), bytes));
  }
  Status vm_create(std::size_t bytes, VmChunk* chunk) override {
    const VmmDriver* d = vmm_driver();
    if (!d) return Status::kUnsupported;
    int device = 0;
    FERRY_CHECK(current_device(&device));
    const CUmemAllocationProp prop = chunk_properties(device);
    CUmemGenericAllocationHandle handle = 0;
    FERRY_CHECK(FERRY_CU(d, create(&handle, bytes, &prop, 0)));
    *chunk = VmChunk{static_cast<std::uint64_t>(handle), bytes};
    return Status::kOk;
  }
  Status vm_export(const VmChunk& chunk, int* fd) override {
    const VmmDriver* d = vmm_driver();
    if (!d) return Status::kUnsupported;
    *fd = -1;
    return FERRY_CU(d, export_to_shareable_handle(fd, static_cast<CUmemGenericAllocationHandle>(chunk.handle),
                                                  CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
  }
  Status vm_import(int fd, std::size_t bytes, VmChunk* chunk) override {
    const VmmDriver* d = vmm_driver();
    if (!d) return Status::kUnsupported;
    ensure_device_for_thread(device_count_);
    CUmemGenericAllocationHandle handle = 0;
    FERRY_CHECK(FERRY_CU(d, import_from_shareable_handle(&handle, reinterpret_cast<void*>(static_cast<std::intptr_t>(fd)),
                                                         CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)));
    *chunk = VmChunk{static_cast<std::uint64_t>(handle), bytes};
    return Status::kOk;
  }
  Status vm_release(const VmChunk& chunk) override {
    const VmmDriver* d = vmm_driver();
    if (!d) return Status::kUnsupported;
    return FERRY_CU(d, release(static_cast<CUmemGenericAllocationHandle>(chunk.handle)));
  }
  Status vm_map(void* address, const VmChunk& chunk) override {
    const VmmDriver* d = vmm_driver();
    if (!d) return Status::kUnsupported;
    int device = 0;
    FERRY_CHECK(current_device(&device));
    const auto ptr = reinterpret_cast<CUdeviceptr>(address);
    FERRY_CHECK(FERRY_CU(d, map(ptr, chunk.bytes, 0, static_cast<CUmemGenericAllocationHandle>(chunk.handle), 0)));
    CUmemAccessDesc access{};
    access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    access.location.id = device;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    const Status status = FERRY_CU(d, set_access(ptr, chunk.bytes, &access, 1));
    if (!ok(status)) d->unmap(ptr, chunk.bytes);
    return status;
  }
  Status vm_unmap(void* address, std::size_t bytes) override {
    const VmmDriver* d = vmm_driver();
    if (!d) return Status::kUnsupported;
    return FERRY_CU(d, unmap(reinterpret_cast<CUdeviceptr>(address), bytes));
  }

  // The thread's device, chosen by local rank when the application chose none.
  Status current_device(int* device) override {
    ensure_device_for_thread(device_count_);
    return FERRY_CUDA(cudaGetDevice(device));
  }
  bool chosen_device(int* device) override {
    return cuda_thread_has_context() && cudaGetDevice(device) == cudaSuccess;
  }

 private:
  int device_count_;
};

}  // namespace

namespace {
std::string g_cuda_unavailable;  // set once, by cuda_backend()'s first call
}  // namespace

Backend* cuda_backend() {
  static Backend* backend = [] () -> Backend* {
    int count = 0;
    cudaError_t error = cudaGetDeviceCount(&count);
    if (error != cudaSuccess || count == 0) {
      cudaGetLastError();
      g_cuda_unavailable = error == cudaSuccess ? std::string("the CUDA runtime finds no device")
                                                : std::string("the CUDA runtime cannot run: ") +
                                                      cudaGetErrorString(error) + " (" + cudaGetErrorName(error) + ")";
      FERRY_INFO(Gpu, "no usable CUDA device: %s", g_cuda_unavailable.c_str());
      return nullptr;
    }
    FERRY_INFO(Gpu, "CUDA backend: %d device(s)", count);
    return new CudaBackend(count);
  }();
  return backend;
}

std::string cuda_unavailable_reason() { return cuda_backend() ? std::string() : g_cuda_unavailable; }

}  // namespace ferry::gpu

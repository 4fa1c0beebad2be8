// HIP backend (AMD GPUs, ROCm), compiled with -DFERRY_GPU=hip: the runtime
// API for allocation, copies, streams, events, IPC and stream memory
// operations; pointer classification in hip_probe.cc. Built and run in CI
// without an AMD GPU, where hip_backend() is null and the emulated device
// serves; it has not yet run on AMD hardware.
//
// What the CUDA backend has and this one does not (each answers
// kUnsupported or false, and callers take another path):
//  - virtual memory management (vm_*): device windows are plain device
//    memory mapped by the peers through IPC handles, not a symmetric heap;
//  - dma-buf export (export_dmabuf): the ib provider stages device buffers;
//  - the copy through a graph: device copies are hipMemcpy;
//  - LL128 (whole_line_stores() is false): the tuner never picks it;
//  - choosing a device by local rank: a thread uses the device the
//    application set (hipSetDevice), else device 0.
#include <hip/hip_runtime_api.h>

#include <cstdio>
#include <cstring>

#include "engine/gpu/gpu.h"
#include "engine/gpu/hip_probe.h"

namespace ferry::gpu {
namespace {

// kOk for hipSuccess; otherwise clears the error, logs it with what, and
// maps it to kOutOfMemory or kGpuError.
Status from_hip(hipError_t error, const char* what) {
  if (error == hipSuccess) return Status::kOk;
  (void)hipGetLastError();
  FERRY_WARN(Gpu, "%s: %s", what, hipGetErrorString(error));
  return error == hipErrorOutOfMemory ? Status::kOutOfMemory : Status::kGpuError;
}
#define FERRY_HIP(call) from_hip((call), #call)

hipStream_t native(Stream stream) { return reinterpret_cast<hipStream_t>(stream); }
hipEvent_t native(Event event) { return reinterpret_cast<hipEvent_t>(event); }

class HipBackend final : public Backend {
 public:
  explicit HipBackend(int device_count) : device_count_(device_count) {}

  BackendKind kind() const override { return BackendKind::kHip; }
  ExecutionSite execution_site() const override { return ExecutionSite::kDevice; }
  bool physical_devices() const override { return true; }
  bool device_atomics() const override { return true; }
  bool whole_line_stores() const override { return false; }
  int device_count() const override { return device_count_; }
  int multiprocessor_count(int device) const override {
    int units = 0;
    return hipDeviceGetAttribute(&units, hipDeviceAttributeMultiprocessorCount, device) == hipSuccess ? units : 0;
  }

  std::uint64_t device_key(int device) const override {
    hipUUID uuid{};
    if (hipDeviceGetUuid(&uuid, device) != hipSuccess) {
      (void)hipGetLastError();
      return static_cast<std::uint64_t>(device);
    }
    std::uint64_t key = 1469598103934665603ull;  // FNV-1a over the UUID
    for (char byte : uuid.bytes) key = (key ^ static_cast<unsigned char>(byte)) * 1099511628211ull;
    return key;
  }

  std::string describe_devices() const override {
    std::string out;
    for (int d = 0; d < device_count_; ++d) {
      hipDeviceProp_t prop{};
      if (hipGetDeviceProperties(&prop, d) != hipSuccess) continue;
      char line[512];
      std::snprintf(line, sizeof(line), "hip device %d: %s, %s, %d CUs, %.1f GiB, PCI %04x:%02x:%02x\n", d, prop.name,
                    prop.gcnArchName, prop.multiProcessorCount, static_cast<double>(prop.totalGlobalMem) / (1 << 30),
                    prop.pciDomainID, prop.pciBusID, prop.pciDeviceID);
      out += line;
    }
    return out;
  }

  Status set_device(int device) override { return FERRY_HIP(hipSetDevice(device)); }
  Status current_device(int* device) override { return FERRY_HIP(hipGetDevice(device)); }

  Status device_alloc(std::size_t bytes, void** ptr) override { return FERRY_HIP(hipMalloc(ptr, bytes)); }
  Status device_free(void* ptr) override { return FERRY_HIP(hipFree(ptr)); }
  Status pinned_alloc(std::size_t bytes, void** ptr) override {
    return FERRY_HIP(hipHostMalloc(ptr, bytes, hipHostMallocPortable));
  }
  Status pinned_free(void* ptr) override { return FERRY_HIP(hipHostFree(ptr)); }
  Status host_register(void* ptr, std::size_t bytes) override {
    return FERRY_HIP(hipHostRegister(ptr, bytes, hipHostRegisterPortable | hipHostRegisterMapped));
  }
  Status host_unregister(void* ptr) override { return FERRY_HIP(hipHostUnregister(ptr)); }

  Status copy(void* dst, const void* src, std::size_t bytes) override {
    if (bytes == 0) return Status::kOk;
    FERRY_CHECK(FERRY_HIP(hipMemcpy(dst, src, bytes, hipMemcpyDefault)));
    // As the CUDA backend: the bytes are in dst for a peer process that
    // reads it next.
    return FERRY_HIP(hipStreamSynchronize(nullptr));
  }
  Status copy_async(void* dst, const void* src, std::size_t bytes, Stream stream) override {
    if (bytes == 0) return Status::kOk;
    return FERRY_HIP(hipMemcpyAsync(dst, src, bytes, hipMemcpyDefault, native(stream)));
  }

  Status stream_create(Stream* stream) override {
    hipStream_t s = nullptr;
    // A blocking stream: engine work queues behind the application's work
    // on the null stream.
    FERRY_CHECK(FERRY_HIP(hipStreamCreateWithFlags(&s, hipStreamDefault)));
    *stream = reinterpret_cast<Stream>(s);
    return Status::kOk;
  }
  Status stream_create_urgent(Stream* stream) override {
    int least = 0, greatest = 0;
    FERRY_CHECK(FERRY_HIP(hipDeviceGetStreamPriorityRange(&least, &greatest)));
    hipStream_t s = nullptr;
    FERRY_CHECK(FERRY_HIP(hipStreamCreateWithPriority(&s, hipStreamDefault, greatest)));
    *stream = reinterpret_cast<Stream>(s);
    return Status::kOk;
  }
  Status stream_create_independent(Stream* stream) override {
    hipStream_t s = nullptr;
    FERRY_CHECK(FERRY_HIP(hipStreamCreateWithFlags(&s, hipStreamNonBlocking)));
    *stream = reinterpret_cast<Stream>(s);
    return Status::kOk;
  }
  Status stream_destroy(Stream stream) override { return FERRY_HIP(hipStreamDestroy(native(stream))); }
  Status stream_synchronize(Stream stream) override { return FERRY_HIP(hipStreamSynchronize(native(stream))); }
  Status stream_done(Stream stream, bool* done) override {
    const hipError_t state = hipStreamQuery(native(stream));
    *done = state == hipSuccess;
    return state == hipErrorNotReady ? Status::kOk : FERRY_HIP(state);
  }

  // hipStreamWaitValueGte compares the word as an unsigned value, not as
  // CUDA's wrap-around difference: the same answer for the engine's
  // counters until they wrap (2^32 calls on one buffer).
  bool stream_memory_ops() const override { return true; }
  Status stream_wait_value(Stream stream, const std::uint32_t* word, std::uint32_t value) override {
    return FERRY_HIP(hipStreamWaitValue32(native(stream), const_cast<std::uint32_t*>(word), value,
                                          hipStreamWaitValueGte, 0xffffffffu));
  }
  Status stream_write_value(Stream stream, std::uint32_t* word, std::uint32_t value) override {
    return FERRY_HIP(hipStreamWriteValue32(native(stream), word, value, 0));
  }
  Status write_value_now(std::uint32_t* word, std::uint32_t value) override {
    // A non-blocking stream of its own: the engine's streams may be stuck
    // behind a wait on this word.
    hipStream_t s = nullptr;
    FERRY_CHECK(FERRY_HIP(hipStreamCreateWithFlags(&s, hipStreamNonBlocking)));
    Status status = FERRY_HIP(hipStreamWriteValue32(s, word, value, 0));
    if (ok(status)) status = FERRY_HIP(hipStreamSynchronize(s));
    (void)hipStreamDestroy(s);
    return status;
  }

  Status event_create(Event* event) override {
    hipEvent_t e = nullptr;
    FERRY_CHECK(FERRY_HIP(hipEventCreate(&e)));
    *event = reinterpret_cast<Event>(e);
    return Status::kOk;
  }
  Status event_destroy(Event event) override { return FERRY_HIP(hipEventDestroy(native(event))); }
  Status event_record(Event event, Stream stream) override {
    return FERRY_HIP(hipEventRecord(native(event), native(stream)));
  }
  Status stream_wait_event(Stream stream, Event event) override {
    return FERRY_HIP(hipStreamWaitEvent(native(stream), native(event), 0));
  }
  Status event_synchronize(Event event) override { return FERRY_HIP(hipEventSynchronize(native(event))); }
  Status event_done(Event event, bool* done) override {
    const hipError_t state = hipEventQuery(native(event));
    *done = state == hipSuccess;
    return state == hipErrorNotReady ? Status::kOk : FERRY_HIP(state);
  }
  Status event_elapsed_ms(Event start, Event end, float* ms) override {
    return FERRY_HIP(hipEventElapsedTime(ms, native(start), native(end)));
  }

  bool query_pointer(const void* ptr, PointerInfo* info) override { return hip_query_pointer(ptr, info); }

  Status ipc_export(void* device_ptr, IpcHandle* handle) override {
    static_assert(sizeof(hipIpcMemHandle_t) <= sizeof(IpcHandle::bytes), "HIP IPC handle must fit");
    PointerInfo info;
    if (!hip_query_pointer(device_ptr, &info) || info.kind != MemoryKind::kDevice ||
        info.base != reinterpret_cast<std::uintptr_t>(device_ptr))
      return Status::kInvalidArgument;
    // Peers read this memory from now on: copies still in flight on the
    // null stream land first.
    FERRY_CHECK(FERRY_HIP(hipStreamSynchronize(nullptr)));
    hipIpcMemHandle_t hip_handle;
    FERRY_CHECK(FERRY_HIP(hipIpcGetMemHandle(&hip_handle, device_ptr)));
    *handle = IpcHandle{};
    handle->owner = BackendKind::kHip;
    handle->size = info.size;
    std::memcpy(handle->bytes, &hip_handle, sizeof(hip_handle));
    return Status::kOk;
  }
  Status ipc_import(const IpcHandle& handle, void** device_ptr) override {
    if (handle.owner != BackendKind::kHip) return Status::kInvalidArgument;
    hipIpcMemHandle_t hip_handle;
    std::memcpy(&hip_handle, handle.bytes, sizeof(hip_handle));
    return FERRY_HIP(hipIpcOpenMemHandle(device_ptr, hip_handle, hipIpcMemLazyEnablePeerAccess));
  }
  Status ipc_close(void* device_ptr) override { return FERRY_HIP(hipIpcCloseMemHandle(device_ptr)); }

  // No virtual memory management here yet (HIP 5.2 has none to export as a
  // file descriptor): windows take IPC-mapped device memory instead.
  Status vm_granularity(std::size_t*) override { return Status::kUnsupported; }
  Status vm_reserve(std::size_t, void**) override { return Status::kUnsupported; }
  Status vm_unreserve(void*, std::size_t) override { return Status::kUnsupported; }
  Status vm_create(std::size_t, VmChunk*) override { return Status::kUnsupported; }
  Status vm_export(const VmChunk&, int*) override { return Status::kUnsupported; }
  Status vm_import(int, std::size_t, VmChunk*) override { return Status::kUnsupported; }
  Status vm_release(const VmChunk&) override { return Status::kUnsupported; }
  Status vm_map(void*, const VmChunk&) override { return Status::kUnsupported; }
  Status vm_unmap(void*, std::size_t) override { return Status::kUnsupported; }

 private:
  int device_count_;
};

std::string g_hip_unavailable;  // set once, by hip_backend()'s first call

}  // namespace

Backend* hip_backend() {
  static Backend* backend = [] () -> Backend* {
    int count = 0;
    if (!hip_device_present(&count, &g_hip_unavailable)) {
      FERRY_INFO(Gpu, "no usable HIP device: %s", g_hip_unavailable.c_str());
      return nullptr;
    }
    FERRY_INFO(Gpu, "HIP backend: %d device(s)", count);
    return new HipBackend(count);
  }();
  return backend;
}

std::string hip_unavailable_reason() { return hip_backend() ? std::string() : g_hip_unavailable; }

}  // namespace ferry::gpu

// CUDA backend, compiled when the CUDA toolkit is found. Runtime API for
// allocation, copies, streams, events and IPC; pointer classification goes
// through the driver already loaded by the application (see cuda_probe.cc),
// so classifying never starts CUDA in a process that has not. The virtual
// memory calls (vm_*) are driver API, reached through the runtime's
// cudaGetDriverEntryPoint so that libferry.so does not link libcuda.
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>

#include <atomic>
#include <chrono>
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

// Waits for the work in the legacy default stream and in the calling
// thread's per-thread default stream: where the application's cudaMemcpy
// calls go.
Status wait_for_default_streams() {
  FERRY_CHECK(FERRY_CUDA(cudaStreamSynchronize(cudaStreamLegacy)));
  return FERRY_CUDA(cudaStreamSynchronize(cudaStreamPerThread));
}

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

// nullptr when the driver lacks any of them (older than CUDA 10.2).
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

// The stream memory operations (stream_wait_value, stream_write_value).
struct MemOpsDriver {
  PFN_cuGetErrorString_v6000 get_error_string;
  PFN_cuStreamWaitValue32_v11070 wait_value;
  PFN_cuStreamWriteValue32_v11070 write_value;
};

// nullptr when the driver lacks them.
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

template <typename Driver>
Status from_cu(const Driver* d, CUresult result, const char* what) {
  if (result == CUDA_SUCCESS) return Status::kOk;
  const char* text = nullptr;
  if (d->get_error_string(result, &text) != CUDA_SUCCESS || !text) text = "unknown error";
  FERRY_WARN(Gpu, "%s: %s (%d)", what, text, static_cast<int>(result));
  return result == CUDA_ERROR_OUT_OF_MEMORY ? Status::kOutOfMemory : Status::kGpuError;
}

#define FERRY_CU(d, call) from_cu((d), (d)->call, #call)

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

// Copies between device buffers through a CUDA graph: a copy-engine copy
// whose node takes each call's pointers (or still holds them from a copy
// before), then a stream write of a word in mapped host memory that the
// caller spins on. On an H200 this returns sooner than cudaMemcpy and a
// synchronize (bench/copy-latency, bench/RESULTS.md), and, unlike a copy
// kernel, needs no SM an application kernel may be holding. Launched on the
// caller's stream (copy(): the legacy default stream, where cudaMemcpy's
// copy runs, so it is ordered after the same work). One per device; one copy
// at a time (a busy copier sends the caller the ordinary way).
class GraphCopier {
 public:
  // The copier of the current device, made at first use; nullptr when the
  // driver lacks stream memory operations or making it failed.
  static GraphCopier* current() {
    int device = 0;
    if (cudaGetDevice(&device) != cudaSuccess || device < 0 || device >= kMaxDevices) {
      cudaGetLastError();
      return nullptr;
    }
    static std::mutex made_mutex;
    static GraphCopier* copiers[kMaxDevices] = {};
    static bool failed[kMaxDevices] = {};
    std::lock_guard<std::mutex> lock(made_mutex);
    if (!copiers[device] && !failed[device]) {
      auto* copier = new GraphCopier;
      if (copier->make()) {
        copiers[device] = copier;
      } else {
        delete copier;  // its resources leak: a failure here is rare and once
        failed[device] = true;
        FERRY_INFO(Gpu, "device %d: no copy graph; device copies take cudaMemcpy", device);
      }
    }
    return copiers[device];
  }

  // Copies device memory to device memory and returns once the bytes are in
  // dst (*done), or leaves both untouched (*done false) when the copier is
  // busy or the graph cannot take these pointers: the caller copies another
  // way.
  Status copy(void* dst, const void* src, std::size_t bytes, cudaStream_t stream, bool* done) {
    *done = false;
    std::unique_lock<std::mutex> lock(mutex_, std::try_to_lock);
    if (!lock.owns_lock() || broken_) return Status::kOk;
    Exec* exec = exec_for(dst, src, bytes);
    if (!exec) return Status::kOk;
    __atomic_store_n(done_word_, 0u, __ATOMIC_RELAXED);
    const cudaError_t launched = cudaGraphLaunch(exec->exec, stream);
    if (launched != cudaSuccess) {
      // Nothing queued (e.g. another context is current): copies take
      // cudaMemcpy from now on.
      FERRY_INFO(Gpu, "copy graph: launch failed (%s); device copies take cudaMemcpy", cudaGetErrorString(launched));
      cudaGetLastError();
      broken_ = true;
      return Status::kOk;
    }
    // Spins through the short copies this is for; one still waiting for
    // other work after kSpin is waited for by synchronizing, which spins or
    // blocks as the application chose, and reports errors.
    const auto spin_end = std::chrono::steady_clock::now() + kSpin;
    for (unsigned spins = 1; __atomic_load_n(done_word_, __ATOMIC_ACQUIRE) == 0; ++spins) {
      if (spins % 1024 || std::chrono::steady_clock::now() < spin_end) continue;
      const cudaError_t state = cudaStreamSynchronize(stream);
      if (state != cudaSuccess) {
        broken_ = true;
        return from_cuda(state, "device copy graph");
      }
      break;  // the word is written by then
    }
    copies_.fetch_add(1, std::memory_order_relaxed);
    *done = true;
    return Status::kOk;
  }

  static std::uint64_t copies() { return copies_.load(std::memory_order_relaxed); }

 private:
  static constexpr int kMaxDevices = 64;
  static constexpr std::chrono::microseconds kSpin{50};
  // Instantiations of the graph, each keeping the pointers of its last copy:
  // a copy like one of them launches it as it is, sooner than after an
  // update (bench/copy-latency, bench/RESULTS.md). Loops repeat their copies.
  static constexpr int kExecs = 8;
  struct Exec {
    cudaGraphExec_t exec = nullptr;
    void* dst = nullptr;  // null: holds no copy that can be launched as it is
    const void* src = nullptr;
    std::size_t bytes = 0;
    std::uint64_t used = 0;
  };

  // The instantiation that copies src to dst, updated for it if none does
  // (the least recently used; instantiated at its first use); nullptr when
  // the graph cannot take these pointers.
  Exec* exec_for(void* dst, const void* src, std::size_t bytes) {
    Exec* oldest = &execs_[0];
    for (Exec& e : execs_) {
      if (e.exec && e.dst == dst && e.src == src && e.bytes == bytes) {
        e.used = ++uses_;
        return &e;
      }
      if (e.used < oldest->used) oldest = &e;
    }
    if (!oldest->exec && cudaGraphInstantiate(&oldest->exec, graph_, 0) != cudaSuccess) {
      oldest->exec = nullptr;
      cudaGetLastError();
      return nullptr;
    }
    oldest->dst = nullptr;
    // Refused: pointers of another context than the graph's, and
    // cudaMemcpyDefault (the kind must be named).
    const cudaError_t taken =
        cudaGraphExecMemcpyNodeSetParams1D(oldest->exec, copy_node_, dst, src, bytes, cudaMemcpyDeviceToDevice);
    if (taken != cudaSuccess) {
      FERRY_TRACE(Gpu, "copy graph refused %p -> %p (%zu bytes): %s", src, dst, bytes, cudaGetErrorString(taken));
      cudaGetLastError();
      return nullptr;
    }
    *oldest = Exec{oldest->exec, dst, src, bytes, ++uses_};
    return oldest;
  }

  // Captures the graph on a stream of its own, copying between two words of
  // a scratch allocation; later calls give it their own pointers.
  bool make() {
    const MemOpsDriver* d = memops_driver();
    if (!d) return false;
    // Each step's failure is named once, in the INFO log.
    auto fine = [](cudaError_t error, const char* step) {
      if (error == cudaSuccess) return true;
      FERRY_INFO(Gpu, "copy graph: %s: %s", step, cudaGetErrorString(error));
      cudaGetLastError();
      return false;
    };
    cudaStream_t capture = nullptr;
    cudaGraph_t graph = nullptr;  // kept as graph_
    void* word_on_device = nullptr;
    bool made = fine(cudaStreamCreateWithFlags(&capture, cudaStreamNonBlocking), "stream") &&
                fine(cudaMalloc(&scratch_, 16), "scratch") &&
                fine(cudaHostAlloc(reinterpret_cast<void**>(&done_word_), sizeof(std::uint32_t),
                                   cudaHostAllocMapped | cudaHostAllocPortable),
                     "word") &&
                fine(cudaHostGetDevicePointer(&word_on_device, done_word_, 0), "word's device address") &&
                fine(cudaStreamBeginCapture(capture, cudaStreamCaptureModeThreadLocal), "capture");
    if (made) {
      // (Both queued even if the first fails: the capture must be ended.)
      char* words = static_cast<char*>(scratch_);
      const bool copied =
          fine(cudaMemcpyAsync(words + 8, words, 8, cudaMemcpyDeviceToDevice, capture), "copy in capture");
      const bool written = ok(FERRY_CU(d, write_value(reinterpret_cast<CUstream>(capture),
                                                      reinterpret_cast<CUdeviceptr>(word_on_device), 1,
                                                      CU_STREAM_WRITE_VALUE_DEFAULT)));
      made = fine(cudaStreamEndCapture(capture, &graph), "end of capture") && copied && written;
    }
    // The copy is the root: the write after it is captured as a copy node too.
    std::size_t roots = 1;
    cudaGraphNodeType type = cudaGraphNodeTypeEmpty;
    made = made && fine(cudaGraphGetRootNodes(graph, &copy_node_, &roots), "root node") && roots == 1 &&
           fine(cudaGraphNodeGetType(copy_node_, &type), "node type");
    if (made && type != cudaGraphNodeTypeMemcpy) {
      FERRY_INFO(Gpu, "copy graph: the captured copy is not a copy node");
      made = false;
    }
    made = made && copy_node_ && fine(cudaGraphInstantiate(&execs_[0].exec, graph, 0), "instantiate");
    // The graph stays: its node names the copy in every instantiation's update.
    graph_ = graph;
    if (capture) cudaStreamDestroy(capture);
    return made;
  }

  static inline std::atomic<std::uint64_t> copies_{0};
  std::mutex mutex_;
  cudaGraph_t graph_ = nullptr;
  cudaGraphNode_t copy_node_ = nullptr;  // graph_'s, the copy in each Exec
  Exec execs_[kExecs];
  std::uint64_t uses_ = 0;
  void* scratch_ = nullptr;
  std::uint32_t* done_word_ = nullptr;  // mapped host memory
  bool broken_ = false;
};

// (classify: a call's buffers are known already, gpu::CallBuffers.)
bool is_device_memory(const void* ptr) {
  const PointerInfo info = classify(ptr);
  return info.owner == BackendKind::kCuda && info.kind == MemoryKind::kDevice;
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

  // Device to device through the current device's copy graph (*done), or
  // nothing done.
  static Status copy_by_graph(void* dst, const void* src, std::size_t bytes, cudaStream_t stream, bool* done) {
    *done = false;
    if (!is_device_memory(dst) || !is_device_memory(src)) return Status::kOk;
    GraphCopier* copier = GraphCopier::current();
    return copier ? copier->copy(dst, src, bytes, stream, done) : Status::kOk;
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

std::uint64_t cuda_graph_copies() { return GraphCopier::copies(); }

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

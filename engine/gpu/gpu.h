// One small runtime API over the device backends: CUDA, HIP (AMD GPUs), and
// a host-emulated device for machines without a GPU (DESIGN.md, "The host-emulated device").
// Only engine/gpu maps a vendor runtime; everything above calls this.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

#include "engine/common/loader_watch.h"
#include "engine/common/status.h"

namespace ferry::gpu {

enum class BackendKind : int { kNone = 0, kCuda = 1, kEmulated = 2, kHip = 3 };

const char* backend_kind_name(BackendKind kind);

// Where a backend's kernels run (the engine's reductions, copy lists,
// Simple protocol and worker): on the device, launched on its streams, or on
// the host, by the thread that enqueues them, through host views (the
// emulated device: no time slices, no blocks to fill).
enum class ExecutionSite : int { kDevice, kHost };

enum class MemoryKind : int {
  kHost,     // pageable or pinned host memory: any MPI can read it
  kDevice,   // GPU (or emulated device) memory: host code must not touch it
  kManaged,  // migrates on demand; host-accessible
};

struct PointerInfo {
  MemoryKind kind = MemoryKind::kHost;
  BackendKind owner = BackendKind::kNone;
  int device = -1;
  std::uintptr_t base = 0;  // allocation range, when known
  std::size_t size = 0;
  std::uint64_t allocation_id = 0;  // unique per allocation in this process, when known
};

// Opaque, fixed-size handle that another process on the machine can import.
struct IpcHandle {
  BackendKind owner;
  std::uint32_t reserved;
  std::uint64_t size;
  unsigned char bytes[64];
};
static_assert(sizeof(IpcHandle) == 80, "IpcHandle travels between processes; keep its layout fixed");

// Physical device memory that is mapped at addresses of the caller's choice
// (CUDA's virtual memory management; the emulated device does the same with
// a memfd). handle is the backend's: a CUmemGenericAllocationHandle, or the
// emulated device's memfd.
struct VmChunk {
  std::uint64_t handle = 0;
  std::size_t bytes = 0;
};

struct StreamImpl;
struct EventImpl;
using Stream = StreamImpl*;
using Event = EventImpl*;

class Backend {
 public:
  virtual ~Backend() = default;
  // What the backend is, for ferry-info and the identity ranks exchange
  // (backend_id); the engine asks the questions below instead.
  virtual BackendKind kind() const = 0;
  virtual ExecutionSite execution_site() const = 0;
  // Real devices, whose links the machine's topology describes (worth
  // discovering); the emulated device is one stand-in that ranks share.
  virtual bool physical_devices() const { return false; }
  // Kernels update device memory atomically (a window's accumulate
  // without its lock).
  virtual bool device_atomics() const { return false; }
  // Eight threads of a warp storing a 128-byte aligned line, 16 bytes each in
  // one instruction, deliver it to a peer whole: LL128 rests on it (as
  // NCCL's does on NVIDIA GPUs). AMD GPUs promise no such thing, so the HIP
  // backend says no and LL128 does not run there.
  virtual bool whole_line_stores() const { return true; }
  virtual int device_count() const = 0;
  // One line per device, for ferry-info.
  virtual std::string describe_devices() const = 0;
  // The device's streaming multiprocessors; 0 where that means nothing (the
  // emulated device).
  virtual int multiprocessor_count(int device) const { return 0; }
  // The same value in every process that uses this physical device.
  virtual std::uint64_t device_key(int device) const { return static_cast<std::uint64_t>(device); }
  // Whether kernels of two processes on device take turns in time slices
  // rather than run at once (CUDA without MPS); the emulated device's run at once.
  virtual bool processes_take_turns(int device) const { return false; }

  // Makes device the current one for this thread's later calls.
  virtual Status set_device(int device) = 0;
  // The device this thread's calls go to.
  virtual Status current_device(int* device) {
    *device = 0;
    return Status::kOk;
  }
  // The device this thread has chosen, if it has (nothing is set up to
  // answer: CUDA makes no context).
  virtual bool chosen_device(int* device) { return ok(current_device(device)); }

  virtual Status device_alloc(std::size_t bytes, void** ptr) = 0;
  virtual Status device_free(void* ptr) = 0;
  // Host memory the device copies to and from at full speed.
  virtual Status pinned_alloc(std::size_t bytes, void** ptr) = 0;
  virtual Status pinned_free(void* ptr) = 0;

  // Pins host memory and maps it for the device's copies and kernels.
  virtual Status host_register(void* ptr, std::size_t bytes) = 0;
  virtual Status host_unregister(void* ptr) = 0;

  // Blocking copy; dst and src may each be host or this backend's device memory.
  virtual Status copy(void* dst, const void* src, std::size_t bytes) = 0;
  virtual Status copy_async(void* dst, const void* src, std::size_t bytes, Stream stream) = 0;
  // A copy on stream, after the work queued there, that returns once the
  // bytes are in dst (and that work is done).
  virtual Status copy_and_wait(void* dst, const void* src, std::size_t bytes, Stream stream) {
    FERRY_CHECK(copy_async(dst, src, bytes, stream));
    return stream_synchronize(stream);
  }

  virtual Status stream_create(Stream* stream) = 0;
  // A stream whose kernels the GPU schedules before those of ordinary
  // streams as SMs free up: for the engine's short kernels that would
  // otherwise wait behind every block of an application kernel.
  virtual Status stream_create_urgent(Stream* stream) { return stream_create(stream); }
  // A stream that never waits for the application's default stream, nor it
  // for this one: for copies that must go on while an application kernel
  // waits for them (the GDA proxy's).
  virtual Status stream_create_independent(Stream* stream) { return stream_create(stream); }
  virtual Status stream_destroy(Stream stream) = 0;
  virtual Status stream_synchronize(Stream stream) = 0;
  virtual Status event_create(Event* event) = 0;
  virtual Status event_destroy(Event event) = 0;
  virtual Status event_record(Event event, Stream stream) = 0;
  virtual Status event_synchronize(Event event) = 0;
  // Whether the work before the event's latest record has finished, without
  // waiting (true for an event never recorded).
  virtual Status event_done(Event event, bool* done) = 0;
  // Work queued on stream after this waits for the event's latest record.
  virtual Status stream_wait_event(Stream stream, Event event) = 0;
  virtual Status event_elapsed_ms(Event start, Event end, float* ms) = 0;

  // Stream memory operations on 32-bit words of device memory (this
  // device's, or a peer's mapped here), for protocols between processes that
  // need no kernel: work queued after stream_wait_value waits until
  // (int32_t)(*word - value) >= 0, a comparison that survives wrap-around;
  // stream_write_value stores value once the work queued before it is done
  // and visible to peers. kUnsupported where stream_memory_ops() is false.
  virtual bool stream_memory_ops() const { return false; }
  virtual Status stream_wait_value(Stream stream, const std::uint32_t* word, std::uint32_t value) {
    return Status::kUnsupported;
  }
  virtual Status stream_write_value(Stream stream, std::uint32_t* word, std::uint32_t value) {
    return Status::kUnsupported;
  }
  // Stores value at once, past every stream (including ones stuck in a
  // stream_wait_value): how a caller that gave up on its peers releases them.
  virtual Status write_value_now(std::uint32_t* word, std::uint32_t value) { return Status::kUnsupported; }
  // Whether everything queued on stream has finished, without waiting.
  virtual Status stream_done(Stream stream, bool* done) = 0;

  // Whether the runtime loads a kernel at its first launch (CUDA's lazy
  // module loading). Such a load waits until the device is idle: a kernel
  // that waits on Ferry's host-side proxy then never sees it move.
  virtual bool loads_modules_lazily() const { return false; }
  // The environment variable that sets over how many hardware work queues
  // the runtime spreads a process's streams (CUDA_DEVICE_MAX_CONNECTIONS),
  // or null: where two streams share a queue, work on one waits behind the
  // other's, and a copy behind a kernel waiting for it never runs.
  virtual const char* work_queues_variable() const { return nullptr; }

  // True when ptr lies in memory this backend manages; fills info.
  virtual bool query_pointer(const void* ptr, PointerInfo* info) = 0;

  // The address host-side executors use for device memory: the pointer
  // itself on a GPU, the read-write view on the emulated device.
  virtual void* host_view(const void* device_ptr) { return const_cast<void*>(device_ptr); }

  // A dma-buf file descriptor for the host pages around [device_ptr,
  // device_ptr + bytes), *offset being device_ptr's within it, for a network
  // device to register (GPUDirect RDMA); the caller closes it. kUnsupported
  // where the backend or its driver has none.
  virtual Status export_dmabuf(const void* /*device_ptr*/, std::size_t /*bytes*/, int* /*fd*/,
                               std::uint64_t* /*offset*/) {
    return Status::kUnsupported;
  }

  // Exports the allocation that begins at device_ptr.
  virtual Status ipc_export(void* device_ptr, IpcHandle* handle) = 0;
  virtual Status ipc_import(const IpcHandle& handle, void** device_ptr) = 0;
  virtual Status ipc_close(void* device_ptr) = 0;

  // Virtual memory, for the symmetric heap (engine/pgas/symmetric_heap.h):
  // reserve address space, create chunks of device memory, map them (or a
  // peer process's, imported from a file descriptor) at chosen addresses.
  // Mapped memory is device memory to classify() and query_pointer() (CUDA
  // reports the whole reservation as its range, the emulated device each
  // chunk); a reserved address with nothing mapped there is not. Sizes and addresses
  // are multiples of vm_granularity(); a chunk is mapped whole.
  virtual Status vm_granularity(std::size_t* bytes) = 0;
  // Address space only: nothing may touch it until a chunk is mapped there.
  virtual Status vm_reserve(std::size_t bytes, void** base) = 0;
  // Gives back a reservation; unmap its chunks first.
  virtual Status vm_unreserve(void* base, std::size_t bytes) = 0;
  // A new chunk on the current device. It counts as allocated (the emulated
  // device's FERRY_EMULATED_MAX_BYTES) until vm_release.
  virtual Status vm_create(std::size_t bytes, VmChunk* chunk) = 0;
  // A new file descriptor naming the chunk, for another process of this
  // machine (send it with engine/transport/fd_passing.h); the caller closes it.
  virtual Status vm_export(const VmChunk& chunk, int* fd) = 0;
  // The chunk an exported descriptor names; fd stays the caller's to close.
  virtual Status vm_import(int fd, std::size_t bytes, VmChunk* chunk) = 0;
  // Drops the handle; the memory lives on while any process maps it.
  virtual Status vm_release(const VmChunk& chunk) = 0;
  // Maps the chunk at address, inside a reservation, read-write for the
  // current device.
  virtual Status vm_map(void* address, const VmChunk& chunk) = 0;
  virtual Status vm_unmap(void* address, std::size_t bytes) = 0;
};

// The backend chosen by FERRY_DEVICE, initialised on first call (which may
// start the GPU driver). nullptr when the requested backend is unavailable.
Backend* active_backend();

// The emulated device, always available.
Backend* emulated_backend();

// The CUDA backend if it was compiled in and a GPU is usable, else nullptr.
// Probing starts the CUDA driver: call only when CUDA is wanted.
Backend* cuda_backend();
// Why cuda_backend() is null: this build has no CUDA backend, the CUDA
// runtime's error (no driver, an old driver, no device), or no device
// found; empty when it is not.
std::string cuda_unavailable_reason();
// A sentence for the user when FERRY_DEVICE names a backend that cannot
// run here (device allocations then fail); empty otherwise.
std::string device_setting_problem();

// The HIP backend if it was compiled in and an AMD GPU is usable, else
// nullptr. Without the amdgpu driver, HIP is never started to find out.
Backend* hip_backend();
// Why hip_backend() is null; empty when it is not.
std::string hip_unavailable_reason();

// Device-to-device copies the CUDA backend's copy() made through its copy
// graph so far (0 without CUDA); for tests.
std::uint64_t cuda_graph_copies();

// Classifies a pointer without starting any GPU runtime: a process that has
// not loaded one pays only for the emulated-device lookup.
PointerInfo classify(const void* ptr);

// The buffers of one intercepted call, classified once: while a CallBuffers
// lives on a thread, classify() answers for the pointers remember()
// classified in it without asking the driver again (a query per pointer,
// timed in bench/RESULTS.md; MPI forbids freeing a call's buffers during the
// call). Scopes nest; each remembers its first kMaxPointers.
class CallBuffers {
 public:
  static constexpr int kMaxPointers = 4;
  CallBuffers();
  ~CallBuffers();
  CallBuffers(const CallBuffers&) = delete;
  CallBuffers& operator=(const CallBuffers&) = delete;
  // classify(ptr), remembered by the thread's innermost scope (if any).
  static PointerInfo remember(const void* ptr);
  // What a scope open on this thread remembers of ptr, or nullptr.
  static const PointerInfo* known(const void* ptr);

 private:
  const void* pointers_[kMaxPointers] = {};
  PointerInfo infos_[kMaxPointers];
  int count_ = 0;
  CallBuffers* outer_;
};

// The backend's kind as ranks exchange it: equal on two ranks when they use
// the same backend; kNoBackendId for none.
constexpr std::int32_t kNoBackendId = 0;
std::int32_t backend_id(const Backend* backend);

// Blocking copy between any two pointers, by whichever backend owns them.
Status copy(void* dst, const void* src, std::size_t bytes);

// The backend that owns a pointer's memory, or nullptr for host memory.
Backend* owner_backend(const PointerInfo& info);

// True once this process has a device runtime in use: emulated device
// memory was allocated or imported (the emulated device sets the flag) or a
// GPU driver is loaded. Never starts one. Called on every intercepted MPI
// call, so inline: once true it is one load; before that three, since a
// look that found no GPU driver holds while the loader adds nothing
// (g_runtime_watch, marked by the look in cuda_probe.cc).
bool probe_device_runtime();
extern std::atomic<bool> g_device_runtime_seen;
extern LoaderWatch g_runtime_watch;
inline bool device_runtime_active() {
  if (g_device_runtime_seen.load(std::memory_order_relaxed)) return true;
  return g_runtime_watch.changed() && probe_device_runtime();
}

}  // namespace ferry::gpu

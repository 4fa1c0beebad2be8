// The host-emulated device. Device memory is a memfd mapped twice: the
// address handed out is PROT_NONE, so host code that touches it faults just
// as it would on a GPU pointer, while the backend works through a private
// read-write "shadow" mapping of the same pages. The memfd is what another
// process imports (through /proc/<pid>/fd), like a CUDA IPC handle.
// Virtual memory (vm_*) follows the same scheme: a reservation is a
// PROT_NONE range plus a shadow range of the same size, and a chunk (a
// memfd) is mapped at the same offset in both, so chunks mapped next to each
// other are contiguous in the shadow too.
// Streams are worker threads; kernels and copies are host functions.
#include "engine/gpu/gpu.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <shared_mutex>
#include <thread>

#include "engine/common/params.h"

namespace ferry::gpu {

struct StreamImpl {
  std::mutex mutex;
  std::condition_variable wake;
  std::condition_variable idle;
  std::deque<std::function<void()>> tasks;
  bool busy = false;
  bool stopping = false;
  std::thread worker;
};

struct EventImpl {
  std::mutex mutex;
  std::condition_variable done;
  std::uint64_t recorded = 0;  // records issued
  std::uint64_t completed = 0; // records reached by the stream
  std::chrono::steady_clock::time_point when;
};

namespace {

struct Allocation {
  std::uint64_t id = 0;     // never reused, unlike addresses and descriptors
  std::uintptr_t user = 0;  // PROT_NONE address given to the caller
  char* shadow = nullptr;   // read-write view used by the backend
  std::size_t size = 0;     // bytes requested
  std::size_t mapped = 0;   // bytes mapped (page multiple)
  int fd = -1;
  bool imported = false;
  bool vm = false;  // a chunk mapped into a reservation (vm_map); fd is not kept
};

// A vm_reserve range and its shadow.
struct Reservation {
  char* shadow = nullptr;
  std::size_t bytes = 0;
};

struct EmulatedIpcPayload {
  std::int32_t pid;
  std::int32_t fd;
  std::uint64_t allocation_id;  // tells apart allocations that reuse a descriptor
};
static_assert(sizeof(EmulatedIpcPayload) <= sizeof(IpcHandle::bytes), "payload must fit the handle");

std::size_t page_round(std::size_t bytes) {
  const std::size_t page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  return (bytes + page - 1) / page * page;
}

void worker_loop(StreamImpl* s) {
  std::unique_lock<std::mutex> lock(s->mutex);
  for (;;) {
    s->wake.wait(lock, [s] { return s->stopping || !s->tasks.empty(); });
    if (s->tasks.empty() && s->stopping) return;
    auto task = std::move(s->tasks.front());
    s->tasks.pop_front();
    s->busy = true;
    lock.unlock();
    task();
    lock.lock();
    s->busy = false;
    if (s->tasks.empty()) s->idle.notify_all();
  }
}

void enqueue(StreamImpl* s, std::function<void()> task) {
  {
    std::lock_guard<std::mutex> lock(s->mutex);
    s->tasks.push_back(std::move(task));
  }
  s->wake.notify_one();
}

class EmulatedBackend final : public Backend {
 public:
  BackendKind kind() const override { return BackendKind::kEmulated; }
  ExecutionSite execution_site() const override { return ExecutionSite::kHost; }
  int device_count() const override { return 1; }
  Status set_device(int device) override { return device == 0 ? Status::kOk : Status::kInvalidArgument; }
  std::string describe_devices() const override {
    return "emulated device 0: host shared memory, limit " +
           std::to_string(params().emulated_max_bytes) + " bytes (FERRY_EMULATED_MAX_BYTES)";
  }

  Status device_alloc(std::size_t bytes, void** ptr) override {
    *ptr = nullptr;
    if (bytes == 0) return Status::kInvalidArgument;
    const std::size_t mapped = page_round(bytes);
    if (allocated_bytes_.fetch_add(mapped) + mapped > static_cast<std::size_t>(params().emulated_max_bytes)) {
      allocated_bytes_.fetch_sub(mapped);
      FERRY_WARN(Gpu, "emulated device allocation of %zu bytes exceeds FERRY_EMULATED_MAX_BYTES", bytes);
      return Status::kOutOfMemory;
    }
    int fd = memfd_create("ferry-emulated-device", MFD_CLOEXEC);
    if (fd < 0 || ftruncate(fd, static_cast<off_t>(mapped)) != 0) {
      if (fd >= 0) close(fd);
      allocated_bytes_.fetch_sub(mapped);
      return Status::kOutOfMemory;
    }
    Allocation a;
    Status status = map_allocation(fd, bytes, mapped, &a);
    if (!ok(status)) {
      close(fd);
      allocated_bytes_.fetch_sub(mapped);
      return status;
    }
    register_allocation(a);
    *ptr = reinterpret_cast<void*>(a.user);
    FERRY_TRACE(Gpu, "emulated alloc %zu bytes at %p", bytes, *ptr);
    return Status::kOk;
  }

  Status device_free(void* ptr) override {
    if (!ptr) return Status::kOk;
    Allocation a;
    if (!unregister_allocation(ptr, /*imported=*/false, /*vm=*/false, &a)) return Status::kInvalidArgument;
    unmap_allocation(a);
    allocated_bytes_.fetch_sub(a.mapped);
    return Status::kOk;
  }

  Status pinned_alloc(std::size_t bytes, void** ptr) override {
    *ptr = std::aligned_alloc(4096, page_round(bytes ? bytes : 1));
    return *ptr ? Status::kOk : Status::kOutOfMemory;
  }
  Status pinned_free(void* ptr) override {
    std::free(ptr);
    return Status::kOk;
  }

  // Host memory is the emulated device's own: nothing to pin or map.
  Status host_register(void*, std::size_t) override { return Status::kOk; }
  Status host_unregister(void*) override { return Status::kOk; }

  Status copy(void* dst, const void* src, std::size_t bytes) override { return copy_async(dst, src, bytes, nullptr); }

  Status copy_async(void* dst, const void* src, std::size_t bytes, Stream stream) override {
    if (bytes == 0) return Status::kOk;
    char* d = translate(dst, bytes);
    const char* s = translate(src, bytes);
    if (!d || !s) return Status::kInvalidArgument;
    if (!stream) {
      std::memmove(d, s, bytes);
      return Status::kOk;
    }
    enqueue(stream, [d, s, bytes] { std::memmove(d, s, bytes); });
    return Status::kOk;
  }

  Status stream_create(Stream* stream) override {
    auto* s = new StreamImpl;
    s->worker = std::thread(worker_loop, s);
    *stream = s;
    return Status::kOk;
  }
  Status stream_destroy(Stream stream) override {
    if (!stream) return Status::kOk;
    {
      std::lock_guard<std::mutex> lock(stream->mutex);
      stream->stopping = true;
    }
    stream->wake.notify_all();
    stream->worker.join();
    delete stream;
    return Status::kOk;
  }
  Status stream_synchronize(Stream stream) override {
    if (!stream) return Status::kOk;
    std::unique_lock<std::mutex> lock(stream->mutex);
    stream->idle.wait(lock, [stream] { return stream->tasks.empty() && !stream->busy; });
    return Status::kOk;
  }

  Status stream_done(Stream stream, bool* done) override {
    if (!stream) {
      *done = true;
      return Status::kOk;
    }
    std::lock_guard<std::mutex> lock(stream->mutex);
    *done = stream->tasks.empty() && !stream->busy;
    return Status::kOk;
  }

  bool stream_memory_ops() const override { return true; }
  // The wait gives up after FERRY_HANDSHAKE_TIMEOUT: the executors run a
  // kernel on the calling thread once its stream is idle, so a wait that
  // never ended would hold that thread where no deadline could free it. The
  // caller's own deadline reports the failure.
  Status stream_wait_value(Stream stream, const std::uint32_t* word, std::uint32_t value) override {
    auto* shared = reinterpret_cast<std::atomic<std::uint32_t>*>(translate(word, sizeof(*word)));
    if (!shared) return Status::kInvalidArgument;
    const auto limit = std::chrono::seconds(std::max<std::int64_t>(1, params().handshake_timeout));
    auto wait = [shared, value, limit] {
      const auto deadline = std::chrono::steady_clock::now() + limit;
      for (int spins = 0;; ++spins) {
        if (static_cast<std::int32_t>(shared->load(std::memory_order_acquire) - value) >= 0) return;
        if (std::chrono::steady_clock::now() > deadline) return;
        if (spins < 64) {
          std::this_thread::yield();
        } else {
          std::this_thread::sleep_for(std::chrono::microseconds(50));
        }
      }
    };
    if (stream) {
      enqueue(stream, wait);
    } else {
      wait();
    }
    return Status::kOk;
  }
  Status stream_write_value(Stream stream, std::uint32_t* word, std::uint32_t value) override {
    auto* shared = reinterpret_cast<std::atomic<std::uint32_t>*>(translate(word, sizeof(*word)));
    if (!shared) return Status::kInvalidArgument;
    auto store = [shared, value] { shared->store(value, std::memory_order_release); };
    if (stream) {
      enqueue(stream, store);
    } else {
      store();
    }
    return Status::kOk;
  }
  Status write_value_now(std::uint32_t* word, std::uint32_t value) override {
    return stream_write_value(nullptr, word, value);
  }

  Status event_create(Event* event) override {
    *event = new EventImpl;
    return Status::kOk;
  }
  Status event_destroy(Event event) override {
    delete event;
    return Status::kOk;
  }
  Status event_record(Event event, Stream stream) override {
    std::uint64_t ticket;
    {
      std::lock_guard<std::mutex> lock(event->mutex);
      ticket = ++event->recorded;
    }
    auto mark = [event, ticket] {
      std::lock_guard<std::mutex> lock(event->mutex);
      event->when = std::chrono::steady_clock::now();
      event->completed = ticket;
      event->done.notify_all();
    };
    if (stream) {
      enqueue(stream, mark);
    } else {
      mark();
    }
    return Status::kOk;
  }
  Status stream_wait_event(Stream stream, Event event) override {
    std::uint64_t ticket;
    {
      std::lock_guard<std::mutex> lock(event->mutex);
      ticket = event->recorded;
    }
    auto wait = [event, ticket] {
      std::unique_lock<std::mutex> lock(event->mutex);
      event->done.wait(lock, [event, ticket] { return event->completed >= ticket; });
    };
    if (stream) {
      enqueue(stream, wait);
    } else {
      wait();
    }
    return Status::kOk;
  }
  Status event_synchronize(Event event) override {
    std::unique_lock<std::mutex> lock(event->mutex);
    event->done.wait(lock, [event] { return event->completed == event->recorded; });
    return Status::kOk;
  }
  Status event_done(Event event, bool* done) override {
    std::lock_guard<std::mutex> lock(event->mutex);
    *done = event->completed == event->recorded;
    return Status::kOk;
  }
  Status event_elapsed_ms(Event start, Event end, float* ms) override {
    FERRY_CHECK(event_synchronize(start));
    FERRY_CHECK(event_synchronize(end));
    if (start->completed == 0 || end->completed == 0) return Status::kInvalidArgument;
    *ms = std::chrono::duration<float, std::milli>(end->when - start->when).count();
    return Status::kOk;
  }

  bool query_pointer(const void* ptr, PointerInfo* info) override {
    if (count_.load(std::memory_order_acquire) == 0) return false;
    std::shared_lock<std::shared_mutex> lock(mutex_);
    const Allocation* a = find_locked(reinterpret_cast<std::uintptr_t>(ptr));
    if (!a) return false;
    info->kind = MemoryKind::kDevice;
    info->owner = BackendKind::kEmulated;
    info->device = 0;
    info->base = a->user;
    info->size = a->size;
    info->allocation_id = a->id;
    return true;
  }

  void* host_view(const void* device_ptr) override { return translate(device_ptr, 0); }

  Status ipc_export(void* device_ptr, IpcHandle* handle) override {
    std::shared_lock<std::shared_mutex> lock(mutex_);
    const Allocation* a = find_locked(reinterpret_cast<std::uintptr_t>(device_ptr));
    if (!a || a->user != reinterpret_cast<std::uintptr_t>(device_ptr)) return Status::kInvalidArgument;
    if (a->vm) return Status::kUnsupported;  // as cudaIpcGetMemHandle refuses VMM memory
    std::memset(handle, 0, sizeof(*handle));
    handle->owner = BackendKind::kEmulated;
    handle->size = a->size;
    EmulatedIpcPayload payload{static_cast<std::int32_t>(getpid()), a->fd, a->id};
    std::memcpy(handle->bytes, &payload, sizeof(payload));
    return Status::kOk;
  }

  Status ipc_import(const IpcHandle& handle, void** device_ptr) override {
    *device_ptr = nullptr;
    if (handle.owner != BackendKind::kEmulated || handle.size == 0) return Status::kInvalidArgument;
    EmulatedIpcPayload payload;
    std::memcpy(&payload, handle.bytes, sizeof(payload));
    const std::string path = "/proc/" + std::to_string(payload.pid) + "/fd/" + std::to_string(payload.fd);
    int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
    if (fd < 0) {
      FERRY_WARN(Gpu, "cannot import emulated device memory from %s: %s", path.c_str(), std::strerror(errno));
      return Status::kSystemError;
    }
    Allocation a;
    Status status = map_allocation(fd, handle.size, page_round(handle.size), &a);
    if (!ok(status)) {
      close(fd);
      return status;
    }
    a.imported = true;
    register_allocation(a);
    *device_ptr = reinterpret_cast<void*>(a.user);
    return Status::kOk;
  }

  Status ipc_close(void* device_ptr) override {
    Allocation a;
    if (!unregister_allocation(device_ptr, /*imported=*/true, /*vm=*/false, &a)) return Status::kInvalidArgument;
    unmap_allocation(a);
    return Status::kOk;
  }

  Status vm_granularity(std::size_t* bytes) override {
    *bytes = page_round(1);
    return Status::kOk;
  }

  Status vm_reserve(std::size_t bytes, void** base) override {
    *base = nullptr;
    if (bytes == 0 || bytes != page_round(bytes)) return Status::kInvalidArgument;
    void* user = reserve_range(nullptr, bytes);
    if (!user) return Status::kOutOfMemory;
    void* shadow = reserve_range(nullptr, bytes);
    if (!shadow) {
      munmap(user, bytes);
      return Status::kOutOfMemory;
    }
    std::unique_lock<std::shared_mutex> lock(mutex_);
    reservations_[reinterpret_cast<std::uintptr_t>(user)] = Reservation{static_cast<char*>(shadow), bytes};
    *base = user;
    return Status::kOk;
  }

  Status vm_unreserve(void* base, std::size_t bytes) override {
    const auto user = reinterpret_cast<std::uintptr_t>(base);
    std::unique_lock<std::shared_mutex> lock(mutex_);
    auto it = reservations_.find(user);
    if (it == reservations_.end() || it->second.bytes != bytes) return Status::kInvalidArgument;
    auto mapped = allocations_.lower_bound(user);
    if (mapped != allocations_.end() && mapped->first < user + bytes) return Status::kInvalidArgument;
    munmap(base, bytes);
    munmap(it->second.shadow, bytes);
    reservations_.erase(it);
    return Status::kOk;
  }

  Status vm_create(std::size_t bytes, VmChunk* chunk) override {
    if (bytes == 0 || bytes != page_round(bytes)) return Status::kInvalidArgument;
    if (allocated_bytes_.fetch_add(bytes) + bytes > static_cast<std::size_t>(params().emulated_max_bytes)) {
      allocated_bytes_.fetch_sub(bytes);
      FERRY_WARN(Gpu, "emulated device chunk of %zu bytes exceeds FERRY_EMULATED_MAX_BYTES", bytes);
      return Status::kOutOfMemory;
    }
    const int fd = memfd_create("ferry-emulated-vm", MFD_CLOEXEC);
    if (fd < 0 || ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
      if (fd >= 0) close(fd);
      allocated_bytes_.fetch_sub(bytes);
      return Status::kOutOfMemory;
    }
    std::unique_lock<std::shared_mutex> lock(mutex_);
    created_chunks_[fd] = bytes;
    *chunk = VmChunk{static_cast<std::uint64_t>(fd), bytes};
    return Status::kOk;
  }

  Status vm_export(const VmChunk& chunk, int* fd) override {
    *fd = fcntl(static_cast<int>(chunk.handle), F_DUPFD_CLOEXEC, 0);
    return *fd >= 0 ? Status::kOk : Status::kSystemError;
  }

  Status vm_import(int fd, std::size_t bytes, VmChunk* chunk) override {
    struct stat st;
    if (fstat(fd, &st) != 0 || static_cast<std::size_t>(st.st_size) < bytes || bytes != page_round(bytes))
      return Status::kInvalidArgument;
    const int own = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (own < 0) return Status::kSystemError;
    *chunk = VmChunk{static_cast<std::uint64_t>(own), bytes};
    return Status::kOk;
  }

  Status vm_release(const VmChunk& chunk) override {
    const int fd = static_cast<int>(chunk.handle);
    {
      std::unique_lock<std::shared_mutex> lock(mutex_);
      auto it = created_chunks_.find(fd);
      if (it != created_chunks_.end()) {
        allocated_bytes_.fetch_sub(it->second);
        created_chunks_.erase(it);
      }
    }
    return close(fd) == 0 ? Status::kOk : Status::kInvalidArgument;
  }

  Status vm_map(void* address, const VmChunk& chunk) override {
    const auto user = reinterpret_cast<std::uintptr_t>(address);
    char* shadow = nullptr;
    {
      std::shared_lock<std::shared_mutex> lock(mutex_);
      auto it = reservations_.upper_bound(user);
      if (it == reservations_.begin() || chunk.bytes == 0 || chunk.bytes != page_round(chunk.bytes) ||
          user != page_round(user))
        return Status::kInvalidArgument;
      --it;
      if (user + chunk.bytes > it->first + it->second.bytes) return Status::kInvalidArgument;
      auto mapped = allocations_.upper_bound(user);
      if ((mapped != allocations_.end() && mapped->first < user + chunk.bytes) || find_locked(user))
        return Status::kInvalidArgument;
      shadow = it->second.shadow + (user - it->first);
    }
    const int fd = static_cast<int>(chunk.handle);
    if (mmap(address, chunk.bytes, PROT_NONE, MAP_SHARED | MAP_FIXED, fd, 0) == MAP_FAILED) return Status::kSystemError;
    if (mmap(shadow, chunk.bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0) == MAP_FAILED) {
      reserve_range(address, chunk.bytes);
      return Status::kSystemError;
    }
    Allocation a;
    a.user = user;
    a.shadow = shadow;
    a.size = chunk.bytes;
    a.mapped = chunk.bytes;
    a.vm = true;
    register_allocation(a);
    return Status::kOk;
  }

  Status vm_unmap(void* address, std::size_t bytes) override {
    {
      std::shared_lock<std::shared_mutex> lock(mutex_);
      auto it = allocations_.find(reinterpret_cast<std::uintptr_t>(address));
      if (it == allocations_.end() || it->second.mapped != bytes) return Status::kInvalidArgument;
    }
    Allocation a;
    if (!unregister_allocation(address, /*imported=*/false, /*vm=*/true, &a)) return Status::kInvalidArgument;
    // Back to reserved address space, as it was before the map.
    reserve_range(address, a.mapped);
    reserve_range(a.shadow, a.mapped);
    return Status::kOk;
  }

  char* translate(const void* ptr, std::size_t bytes) {
    const auto address = reinterpret_cast<std::uintptr_t>(ptr);
    if (count_.load(std::memory_order_acquire) == 0) return const_cast<char*>(static_cast<const char*>(ptr));
    std::shared_lock<std::shared_mutex> lock(mutex_);
    const Allocation* a = find_locked(address);
    if (!a) return const_cast<char*>(static_cast<const char*>(ptr));
    if (address + bytes > a->user + a->size && !(a->vm && vm_run_reaches_locked(a, address + bytes))) {
      FERRY_WARN(Gpu, "access of %zu bytes at %p runs past its emulated allocation", bytes, ptr);
      return nullptr;
    }
    return a->shadow + (address - a->user);
  }

 private:
  static Status map_allocation(int fd, std::size_t size, std::size_t mapped, Allocation* a) {
    void* user = mmap(nullptr, mapped, PROT_NONE, MAP_SHARED, fd, 0);
    if (user == MAP_FAILED) return Status::kOutOfMemory;
    void* shadow = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (shadow == MAP_FAILED) {
      munmap(user, mapped);
      return Status::kOutOfMemory;
    }
    a->user = reinterpret_cast<std::uintptr_t>(user);
    a->shadow = static_cast<char*>(shadow);
    a->size = size;
    a->mapped = mapped;
    a->fd = fd;
    return Status::kOk;
  }

  // Address space with nothing behind it, at address when it is not null.
  static void* reserve_range(void* address, std::size_t bytes) {
    void* range = mmap(address, bytes, PROT_NONE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | (address ? MAP_FIXED : 0), -1, 0);
    return range == MAP_FAILED ? nullptr : range;
  }

  // Whether the chunks mapped right after a's, next to it in the user range
  // and in the shadow, reach end: an access may span them.
  bool vm_run_reaches_locked(const Allocation* a, std::uintptr_t end) const {
    auto it = allocations_.find(a->user);
    for (;;) {
      const std::uintptr_t next_user = it->second.user + it->second.size;
      if (end <= next_user) return true;
      const char* next_shadow = it->second.shadow + it->second.size;
      if (++it == allocations_.end() || !it->second.vm || it->second.user != next_user ||
          it->second.shadow != next_shadow)
        return false;
    }
  }

  static void unmap_allocation(const Allocation& a) {
    munmap(reinterpret_cast<void*>(a.user), a.mapped);
    munmap(a.shadow, a.mapped);
    close(a.fd);
  }

  void register_allocation(Allocation a) {
    std::unique_lock<std::shared_mutex> lock(mutex_);
    a.id = ++last_id_;
    g_device_runtime_seen.store(true, std::memory_order_relaxed);
    allocations_[a.user] = a;
    count_.fetch_add(1, std::memory_order_release);
  }

  bool unregister_allocation(void* ptr, bool imported, bool vm, Allocation* out) {
    std::unique_lock<std::shared_mutex> lock(mutex_);
    auto it = allocations_.find(reinterpret_cast<std::uintptr_t>(ptr));
    if (it == allocations_.end() || it->second.imported != imported || it->second.vm != vm) return false;
    *out = it->second;
    allocations_.erase(it);
    count_.fetch_sub(1, std::memory_order_release);
    return true;
  }

  const Allocation* find_locked(std::uintptr_t address) const {
    auto it = allocations_.upper_bound(address);
    if (it == allocations_.begin()) return nullptr;
    --it;
    const Allocation& a = it->second;
    return address < a.user + a.mapped ? &a : nullptr;
  }

  std::shared_mutex mutex_;
  std::map<std::uintptr_t, Allocation> allocations_;
  std::map<std::uintptr_t, Reservation> reservations_;  // by user base
  std::map<int, std::size_t> created_chunks_;          // vm_create's memfds, until vm_release
  std::atomic<std::size_t> count_{0};
  std::atomic<std::size_t> allocated_bytes_{0};
  std::uint64_t last_id_ = 0;

 public:
};

EmulatedBackend* emulated() {
  // Never destroyed: allocations may be freed from atexit handlers.
  static EmulatedBackend* backend = new EmulatedBackend;
  return backend;
}

}  // namespace

Backend* emulated_backend() { return emulated(); }

}  // namespace ferry::gpu

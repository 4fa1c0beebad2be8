// The host-emulated device. Device memory is a memfd mapped twice: the
// address handed out is PROT_NONE, so host code that touches it faults just
// as it would on a GPU pointer, while the backend works through a private
// read-write "shadow" mapping of the same pages. The memfd is what another
// process imports (through /proc/<pid>/fd), like a CUDA IPC handle.
// Virtual memory (vm_*) follows the same scheme: a reservation is a
// PROT_NONE range plus a shadow range of the same size, and a chunk (a
// memfd) is mapped at the same offset in both, so chunks mapped next to each
// other are contiguous in the shadow too.
// Streams are worker threads; kernels and copies are host functions
// (emulated_streams.cc). IPC and virtual memory are in emulated_vm.cc; this
// file holds device memory and the allocation table.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>
#include <mutex>
#include <shared_mutex>
#include <string>

#include "engine/common/params.h"
#include "engine/gpu/emulated_internal.h"

namespace ferry::gpu {
namespace emulated_detail {

std::size_t page_round(std::size_t bytes) {
  const std::size_t page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  return (bytes + page - 1) / page * page;
}

std::string EmulatedBackend::describe_devices() const {
  return "emulated device 0: host shared memory, limit " +
         std::to_string(params().emulated_max_bytes) + " bytes (FERRY_EMULATED_MAX_BYTES)";
}

Status EmulatedBackend::device_alloc(std::size_t bytes, void** ptr) {
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

Status EmulatedBackend::device_free(void* ptr) {
  if (!ptr) return Status::kOk;
  Allocation a;
  if (!unregister_allocation(ptr, /*imported=*/false, /*vm=*/false, &a)) return Status::kInvalidArgument;
  unmap_allocation(a);
  allocated_bytes_.fetch_sub(a.mapped);
  return Status::kOk;
}

Status EmulatedBackend::pinned_alloc(std::size_t bytes, void** ptr) {
  *ptr = std::aligned_alloc(4096, page_round(bytes ? bytes : 1));
  return *ptr ? Status::kOk : Status::kOutOfMemory;
}

Status EmulatedBackend::pinned_free(void* ptr) {
  std::free(ptr);
  return Status::kOk;
}

bool EmulatedBackend::query_pointer(const void* ptr, PointerInfo* info) {
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

char* EmulatedBackend::translate(const void* ptr, std::size_t bytes) {
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

Status EmulatedBackend::map_allocation(int fd, std::size_t size, std::size_t mapped, Allocation* a) {
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

// Whether the chunks mapped right after a's, next to it in the user range
// and in the shadow, reach end: an access may span them.
bool EmulatedBackend::vm_run_reaches_locked(const Allocation* a, std::uintptr_t end) const {
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

void EmulatedBackend::unmap_allocation(const Allocation& a) {
  munmap(reinterpret_cast<void*>(a.user), a.mapped);
  munmap(a.shadow, a.mapped);
  close(a.fd);
}

void EmulatedBackend::register_allocation(Allocation a) {
  std::unique_lock<std::shared_mutex> lock(mutex_);
  a.id = ++last_id_;
  g_device_runtime_seen.store(true, std::memory_order_relaxed);
  allocations_[a.user] = a;
  count_.fetch_add(1, std::memory_order_release);
}

bool EmulatedBackend::unregister_allocation(void* ptr, bool imported, bool vm, Allocation* out) {
  std::unique_lock<std::shared_mutex> lock(mutex_);
  auto it = allocations_.find(reinterpret_cast<std::uintptr_t>(ptr));
  if (it == allocations_.end() || it->second.imported != imported || it->second.vm != vm) return false;
  *out = it->second;
  allocations_.erase(it);
  count_.fetch_sub(1, std::memory_order_release);
  return true;
}

const Allocation* EmulatedBackend::find_locked(std::uintptr_t address) const {
  auto it = allocations_.upper_bound(address);
  if (it == allocations_.begin()) return nullptr;
  --it;
  const Allocation& a = it->second;
  return address < a.user + a.mapped ? &a : nullptr;
}

}  // namespace emulated_detail

namespace {

using emulated_detail::EmulatedBackend;

EmulatedBackend* emulated() {
  // Never destroyed: allocations may be freed from atexit handlers.
  static EmulatedBackend* backend = new EmulatedBackend;
  return backend;
}

}  // namespace

Backend* emulated_backend() { return emulated(); }

}  // namespace ferry::gpu

// The emulated device's IPC and virtual memory (emulated.cc describes the
// scheme). An exported allocation is imported by opening its memfd through
// /proc/<pid>/fd; a reservation is a PROT_NONE range plus a shadow range,
// and a chunk (a memfd) is mapped at the same offset in both.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <mutex>
#include <shared_mutex>
#include <string>

#include "engine/common/params.h"
#include "engine/gpu/emulated_internal.h"

namespace ferry::gpu::emulated_detail {
namespace {

struct EmulatedIpcPayload {
  std::int32_t pid;
  std::int32_t fd;
  std::uint64_t allocation_id;  // tells apart allocations that reuse a descriptor
};
static_assert(sizeof(EmulatedIpcPayload) <= sizeof(IpcHandle::bytes), "payload must fit the handle");

// Address space with nothing behind it, at address when it is not null.
void* reserve_range(void* address, std::size_t bytes) {
  void* range = mmap(address, bytes, PROT_NONE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | (address ? MAP_FIXED : 0), -1, 0);
  return range == MAP_FAILED ? nullptr : range;
}

}  // namespace

Status EmulatedBackend::ipc_export(void* device_ptr, IpcHandle* handle) {
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

Status EmulatedBackend::ipc_import(const IpcHandle& handle, void** device_ptr) {
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

Status EmulatedBackend::ipc_close(void* device_ptr) {
  Allocation a;
  if (!unregister_allocation(device_ptr, /*imported=*/true, /*vm=*/false, &a)) return Status::kInvalidArgument;
  unmap_allocation(a);
  return Status::kOk;
}

Status EmulatedBackend::vm_granularity(std::size_t* bytes) {
  *bytes = page_round(1);
  return Status::kOk;
}

Status EmulatedBackend::vm_reserve(std::size_t bytes, void** base) {
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

Status EmulatedBackend::vm_unreserve(void* base, std::size_t bytes) {
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

Status EmulatedBackend::vm_create(std::size_t bytes, VmChunk* chunk) {
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

Status EmulatedBackend::vm_export(const VmChunk& chunk, int* fd) {
  *fd = fcntl(static_cast<int>(chunk.handle), F_DUPFD_CLOEXEC, 0);
  return *fd >= 0 ? Status::kOk : Status::kSystemError;
}

Status EmulatedBackend::vm_import(int fd, std::size_t bytes, VmChunk* chunk) {
  struct stat st;
  if (fstat(fd, &st) != 0 || static_cast<std::size_t>(st.st_size) < bytes || bytes != page_round(bytes))
    return Status::kInvalidArgument;
  const int own = fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (own < 0) return Status::kSystemError;
  *chunk = VmChunk{static_cast<std::uint64_t>(own), bytes};
  return Status::kOk;
}

Status EmulatedBackend::vm_release(const VmChunk& chunk) {
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

Status EmulatedBackend::vm_map(void* address, const VmChunk& chunk) {
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

Status EmulatedBackend::vm_unmap(void* address, std::size_t bytes) {
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

}  // namespace ferry::gpu::emulated_detail

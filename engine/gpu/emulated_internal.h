// What the host-emulated device's files share: the backend class and its
// allocation table (emulated.cc), through which the streams
// (emulated_streams.cc) and the IPC and virtual memory calls
// (emulated_vm.cc) find the shadow of a device address.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <shared_mutex>
#include <string>

#include "engine/gpu/gpu.h"

namespace ferry::gpu::emulated_detail {

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

// bytes rounded up to whole pages.
std::size_t page_round(std::size_t bytes);

class EmulatedBackend final : public Backend {
 public:
  BackendKind kind() const override { return BackendKind::kEmulated; }
  ExecutionSite execution_site() const override { return ExecutionSite::kHost; }
  int device_count() const override { return 1; }
  Status set_device(int device) override { return device == 0 ? Status::kOk : Status::kInvalidArgument; }
  std::string describe_devices() const override;

  // Memory and the allocation table (emulated.cc).
  Status device_alloc(std::size_t bytes, void** ptr) override;
  Status device_free(void* ptr) override;
  Status pinned_alloc(std::size_t bytes, void** ptr) override;
  Status pinned_free(void* ptr) override;

  // Host memory is the emulated device's own: nothing to pin or map.
  Status host_register(void*, std::size_t) override { return Status::kOk; }
  Status host_unregister(void*) override { return Status::kOk; }

  bool query_pointer(const void* ptr, PointerInfo* info) override;
  void* host_view(const void* device_ptr) override { return translate(device_ptr, 0); }

  // The backend's read-write view of bytes at ptr: their shadow when ptr is
  // emulated device memory, ptr itself otherwise; nullptr when the bytes run
  // past the allocation (and the chunks mapped after it).
  char* translate(const void* ptr, std::size_t bytes);

  // Copies, streams, events and stream memory operations
  // (emulated_streams.cc).
  Status copy(void* dst, const void* src, std::size_t bytes) override { return copy_async(dst, src, bytes, nullptr); }
  Status copy_async(void* dst, const void* src, std::size_t bytes, Stream stream) override;
  Status stream_create(Stream* stream) override;
  Status stream_destroy(Stream stream) override;
  Status stream_synchronize(Stream stream) override;
  Status stream_done(Stream stream, bool* done) override;
  bool stream_memory_ops() const override { return true; }
  Status stream_wait_value(Stream stream, const std::uint32_t* word, std::uint32_t value) override;
  Status stream_write_value(Stream stream, std::uint32_t* word, std::uint32_t value) override;
  Status write_value_now(std::uint32_t* word, std::uint32_t value) override;
  Status event_create(Event* event) override;
  Status event_destroy(Event event) override;
  Status event_record(Event event, Stream stream) override;
  Status stream_wait_event(Stream stream, Event event) override;
  Status event_synchronize(Event event) override;
  Status event_done(Event event, bool* done) override;
  Status event_elapsed_ms(Event start, Event end, float* ms) override;

  // IPC and virtual memory (emulated_vm.cc).
  Status ipc_export(void* device_ptr, IpcHandle* handle) override;
  Status ipc_import(const IpcHandle& handle, void** device_ptr) override;
  Status ipc_close(void* device_ptr) override;
  Status vm_granularity(std::size_t* bytes) override;
  Status vm_reserve(std::size_t bytes, void** base) override;
  Status vm_unreserve(void* base, std::size_t bytes) override;
  Status vm_create(std::size_t bytes, VmChunk* chunk) override;
  Status vm_export(const VmChunk& chunk, int* fd) override;
  Status vm_import(int fd, std::size_t bytes, VmChunk* chunk) override;
  Status vm_release(const VmChunk& chunk) override;
  Status vm_map(void* address, const VmChunk& chunk) override;
  Status vm_unmap(void* address, std::size_t bytes) override;

 private:
  // The allocation table (emulated.cc).
  static Status map_allocation(int fd, std::size_t size, std::size_t mapped, Allocation* a);
  bool vm_run_reaches_locked(const Allocation* a, std::uintptr_t end) const;
  static void unmap_allocation(const Allocation& a);
  void register_allocation(Allocation a);
  bool unregister_allocation(void* ptr, bool imported, bool vm, Allocation* out);
  const Allocation* find_locked(std::uintptr_t address) const;

  std::shared_mutex mutex_;
  std::map<std::uintptr_t, Allocation> allocations_;
  std::map<std::uintptr_t, Reservation> reservations_;  // by user base
  std::map<int, std::size_t> created_chunks_;          // vm_create's memfds, until vm_release
  std::atomic<std::size_t> count_{0};
  std::atomic<std::size_t> allocated_bytes_{0};
  std::uint64_t last_id_ = 0;
};

}  // namespace ferry::gpu::emulated_detail

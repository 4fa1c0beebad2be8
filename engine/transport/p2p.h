// The p2p transport: device buffers of processes on one machine, mapped
// into each other's address space (CUDA IPC, or the emulated device's
// descriptor passing) so kernels load and store the peer's memory directly.
// Both directions are cached: an allocation is exported once, a peer's
// allocation is mapped once and reused until evicted.
#pragma once

#include <cstdint>
#include <list>
#include <map>
#include <mutex>

#include "engine/gpu/gpu.h"

namespace ferry {

// A buffer as a peer sees it: the allocation's handle and the offset in it,
// and what tells this allocation apart from an earlier one at the same
// address (a freed and reallocated buffer can carry the same IPC handle).
struct ExportedBuffer {
  gpu::IpcHandle handle;
  std::uint64_t offset;
  std::uint64_t allocation_id;  // unique within the exporting process
  std::uint64_t base;           // the allocation's address in the exporter
  std::int32_t pid;             // the exporting process
  std::int32_t reserved;
};
static_assert(sizeof(ExportedBuffer) == 112, "ExportedBuffer travels between processes; keep its layout fixed");

class PeerMemory {
 public:
  // Mappings kept before the least recently used one is closed.
  static constexpr std::size_t kMaxImports = 256;

  PeerMemory() = default;
  ~PeerMemory();
  PeerMemory(const PeerMemory&) = delete;
  PeerMemory& operator=(const PeerMemory&) = delete;

  Status export_buffer(const void* ptr, ExportedBuffer* out);
  // The peer's buffer at this process's address; valid until the next call.
  Status import_buffer(const ExportedBuffer& in, void** mapped);

 private:
  struct ExportKey {
    gpu::BackendKind owner;
    std::uint64_t allocation_id;
    bool operator<(const ExportKey& o) const {
      return owner != o.owner ? owner < o.owner : allocation_id < o.allocation_id;
    }
  };
  // An exporter's allocation: (process, allocation id) never repeats.
  struct ImportKey {
    std::int32_t pid;
    std::uint64_t allocation_id;
    bool operator<(const ImportKey& o) const {
      return pid != o.pid ? pid < o.pid : allocation_id < o.allocation_id;
    }
  };
  struct Import {
    void* base;
    gpu::BackendKind owner;
    std::uint64_t exporter_base;
    std::list<ImportKey>::iterator lru;
  };
  void close_import(std::map<ImportKey, Import>::iterator it);

  std::mutex mutex_;
  std::map<ExportKey, gpu::IpcHandle> exports_;
  std::map<ImportKey, Import> imports_;
  std::list<ImportKey> lru_;  // most recently used first
};

}  // namespace ferry

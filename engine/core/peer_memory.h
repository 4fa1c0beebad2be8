// Device buffers of processes on one machine, mapped into each other's
// address space (CUDA IPC, or the emulated device's descriptor passing) so
// kernels load and store the peer's memory directly: what the p2p transport
// (engine/transport/p2p_transport.h), the nonblocking collectives' board,
// device windows and point-to-point through peer memory stand on. Both
// directions are cached: an allocation is exported once, a peer's
// allocation is mapped once and reused until evicted.
#pragma once

#include <cstdint>
#include <list>
#include <map>
#include <mutex>

#include "engine/gpu/gpu.h"

namespace ferry {

// A buffer as a peer sees it: the allocation's handle and the offset in it,
// and the allocation's identity (a freed and reallocated buffer can carry
// the same IPC handle, never the same identity).
struct ExportedBuffer {
  gpu::IpcHandle handle;
  std::uint64_t offset;
  std::uint64_t allocation_id;  // unique within the exporting process
  std::uint64_t base;           // the allocation's address in the exporting process
  std::int32_t pid;             // the exporting process
  std::int32_t reserved;
};
static_assert(sizeof(ExportedBuffer) == 112, "ExportedBuffer travels between processes; keep its layout fixed");

class PeerMemory {
 public:
  // Mappings kept before the least recently used one is closed.
  static constexpr std::size_t kMaxImports = 256;

  PeerMemory() = default;
  // keep_on_miss: a miss closes nothing but the least recently used mapping
  // past kMaxImports (point-to-point, where a program may alternate between
  // many buffers of one peer); a freed allocation's mapping then lives until
  // evicted, or until its addresses are mapped again.
  explicit PeerMemory(bool keep_on_miss) : keep_on_miss_(keep_on_miss) {}
  ~PeerMemory();
  PeerMemory(const PeerMemory&) = delete;
  PeerMemory& operator=(const PeerMemory&) = delete;

  Status export_buffer(const void* ptr, ExportedBuffer* out);
  // The same, with ptr's classification already at hand.
  Status export_buffer(const void* ptr, const gpu::PointerInfo& info, ExportedBuffer* out);

  // Maps the peers' buffers one collective needs; mapped[i] is valid until
  // the next call. A buffer new to the cache means its owner may have freed
  // memory since the last call, and CUDA hands a freed block's IPC identity
  // to the next allocation: so on a miss, every other mapping of that
  // process's memory is closed first, and no stale mapping can be reused.
  Status import_buffers(const ExportedBuffer* buffers, std::size_t count, void** mapped);
  Status import_buffer(const ExportedBuffer& buffer, void** mapped) { return import_buffers(&buffer, 1, mapped); }

  // Maps a buffer for as long as an RMA window exposes it: a pinned mapping
  // is never evicted or closed on a miss until every pin is released.
  Status pin_buffer(const ExportedBuffer& buffer, void** mapped);
  void unpin_buffer(const ExportedBuffer& buffer);

  std::size_t mapped_count() const { return imports_.size(); }

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
    gpu::IpcHandle handle;
    std::list<ImportKey>::iterator lru;
    int pins;
  };
  Status import_locked(const ExportedBuffer* buffers, std::size_t count, void** mapped);
  void close_import(std::map<ImportKey, Import>::iterator it);

  bool keep_on_miss_ = false;
  std::mutex mutex_;
  std::map<ExportKey, gpu::IpcHandle> exports_;
  std::map<ImportKey, Import> imports_;
  std::list<ImportKey> lru_;  // most recently used first
};

}  // namespace ferry

#include "engine/core/peer_memory.h"

#include <unistd.h>

#include <cstring>
#include <set>
#include <string>

namespace ferry {
namespace {

// Mappings are shared by every PeerMemory of the process (one per engine
// communicator, one per window's), because CUDA maps an IPC handle at most
// once per process: a second open of a mapped handle fails.
class SharedImports {
 public:
  Status open(const ExportedBuffer& in, void** base) {
    std::lock_guard<std::mutex> lock(mutex_);
    const Key key = key_of(in.handle);
    auto it = imports_.find(key);
    if (it != imports_.end()) {
      if (it->second.pid == in.pid && it->second.allocation_id == in.allocation_id) {
        ++it->second.references;
        *base = it->second.base;
        return Status::kOk;
      }
      // The handle of a freed allocation now names a new one. Whoever still
      // holds the old mapping holds freed memory: close it, so the new
      // allocation can be mapped; their release becomes a no-op.
      close_mapping(it->second);
      imports_.erase(it);
    }
    // Likewise a mapping of the same process's memory that overlaps this
    // allocation's addresses there: its allocation was freed (live ones do
    // not overlap), and CUDA would refuse the new one as already mapped.
    const std::uint64_t end = in.base + in.handle.size;
    for (auto other = imports_.begin(); other != imports_.end();) {
      const Shared& old = other->second;
      const bool stale = old.pid == in.pid && old.allocation_id != in.allocation_id && old.exporter_base < end &&
                         in.base < old.exporter_base + old.size;
      if (stale) {
        close_mapping(old);
        other = imports_.erase(other);
      } else {
        ++other;
      }
    }
    gpu::Backend* backend = gpu::owner_backend({gpu::MemoryKind::kDevice, in.handle.owner});
    if (!backend) return Status::kUnavailable;
    FERRY_CHECK(backend->ipc_import(in.handle, base));
    imports_[key] = Shared{in.pid, in.allocation_id, in.base, in.handle.size, *base, in.handle.owner, 1};
    return Status::kOk;
  }

  void release(const gpu::IpcHandle& handle, std::int32_t pid, std::uint64_t allocation_id) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = imports_.find(key_of(handle));
    if (it == imports_.end() || it->second.pid != pid || it->second.allocation_id != allocation_id) return;
    if (--it->second.references > 0) return;
    close_mapping(it->second);
    imports_.erase(it);
  }

 private:
  using Key = std::pair<gpu::BackendKind, std::string>;
  struct Shared {
    std::int32_t pid;
    std::uint64_t allocation_id;
    std::uint64_t exporter_base;  // where the memory is in the exporting process
    std::uint64_t size;
    void* base;                   // where it is mapped here
    gpu::BackendKind owner;
    int references;
  };
  static Key key_of(const gpu::IpcHandle& handle) {
    return {handle.owner, std::string(reinterpret_cast<const char*>(handle.bytes), sizeof(handle.bytes))};
  }
  static void close_mapping(const Shared& shared) {
    if (gpu::Backend* backend = gpu::owner_backend({gpu::MemoryKind::kDevice, shared.owner}))
      FERRY_LOG_IF_FAILED(backend->ipc_close(shared.base));
  }

  std::mutex mutex_;
  std::map<Key, Shared> imports_;
};

SharedImports& shared_imports() {
  static auto* imports = new SharedImports;  // outlives every PeerMemory
  return *imports;
}

}  // namespace

PeerMemory::~PeerMemory() {
  while (!imports_.empty()) close_import(imports_.begin());
}

void PeerMemory::close_import(std::map<ImportKey, Import>::iterator it) {
  shared_imports().release(it->second.handle, it->first.pid, it->first.allocation_id);
  lru_.erase(it->second.lru);
  imports_.erase(it);
}

Status PeerMemory::export_buffer(const void* ptr, ExportedBuffer* out) {
  return export_buffer(ptr, gpu::classify(ptr), out);
}

Status PeerMemory::export_buffer(const void* ptr, const gpu::PointerInfo& info, ExportedBuffer* out) {
  gpu::Backend* backend = gpu::owner_backend(info);
  if (info.kind != gpu::MemoryKind::kDevice || !backend || info.allocation_id == 0) return Status::kInvalidArgument;
  std::memset(out, 0, sizeof(*out));
  out->offset = reinterpret_cast<std::uintptr_t>(ptr) - info.base;
  out->allocation_id = info.allocation_id;
  out->base = info.base;
  out->pid = static_cast<std::int32_t>(getpid());
  const ExportKey key{info.owner, info.allocation_id};
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = exports_.find(key);
    if (it != exports_.end()) {
      out->handle = it->second;
      return Status::kOk;
    }
  }
  // Not under the lock: the export waits for the application's copies,
  // which may wait for the engine's streams, and those for peers whose
  // progress needs this process's other threads.
  gpu::IpcHandle handle;
  FERRY_CHECK(backend->ipc_export(reinterpret_cast<void*>(info.base), &handle));
  std::lock_guard<std::mutex> lock(mutex_);
  out->handle = exports_.emplace(key, handle).first->second;
  return Status::kOk;
}

Status PeerMemory::import_buffers(const ExportedBuffer* buffers, std::size_t count, void** mapped) {
  std::lock_guard<std::mutex> lock(mutex_);
  return import_locked(buffers, count, mapped);
}

Status PeerMemory::pin_buffer(const ExportedBuffer& buffer, void** mapped) {
  std::lock_guard<std::mutex> lock(mutex_);
  FERRY_CHECK(import_locked(&buffer, 1, mapped));
  ++imports_.find(ImportKey{buffer.pid, buffer.allocation_id})->second.pins;
  return Status::kOk;
}

void PeerMemory::unpin_buffer(const ExportedBuffer& buffer) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = imports_.find(ImportKey{buffer.pid, buffer.allocation_id});
  if (it != imports_.end() && it->second.pins > 0) --it->second.pins;
}

Status PeerMemory::import_locked(const ExportedBuffer* buffers, std::size_t count, void** mapped) {
  std::set<ImportKey> wanted;
  std::set<std::int32_t> owners_with_misses;
  for (std::size_t i = 0; i < count; ++i) {
    const ImportKey key{buffers[i].pid, buffers[i].allocation_id};
    wanted.insert(key);
    if (!keep_on_miss_ && imports_.find(key) == imports_.end()) owners_with_misses.insert(key.pid);
  }
  for (auto it = imports_.begin(); it != imports_.end();) {
    auto next = std::next(it);
    if (owners_with_misses.count(it->first.pid) && !wanted.count(it->first) && it->second.pins == 0)
      close_import(it);
    it = next;
  }

  for (std::size_t i = 0; i < count; ++i) {
    const ExportedBuffer& in = buffers[i];
    const ImportKey key{in.pid, in.allocation_id};
    auto it = imports_.find(key);
    if (it == imports_.end()) {
      if (in.offset >= in.handle.size) return Status::kInvalidArgument;
      if (imports_.size() >= kMaxImports) {
        for (auto oldest = lru_.rbegin(); oldest != lru_.rend(); ++oldest) {
          if (wanted.count(*oldest) || imports_.find(*oldest)->second.pins > 0) continue;
          close_import(imports_.find(*oldest));
          break;
        }
      }
      void* base = nullptr;
      FERRY_CHECK(shared_imports().open(in, &base));
      lru_.push_front(key);
      it = imports_.emplace(key, Import{base, in.handle, lru_.begin(), 0}).first;
      FERRY_TRACE(Transport, "mapped allocation %llu of process %d (%llu bytes) at %p",
                  static_cast<unsigned long long>(in.allocation_id), in.pid,
                  static_cast<unsigned long long>(in.handle.size), base);
    } else {
      lru_.splice(lru_.begin(), lru_, it->second.lru);
    }
    mapped[i] = static_cast<char*>(it->second.base) + in.offset;
  }
  return Status::kOk;
}

}  // namespace ferry

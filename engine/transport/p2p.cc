#include "engine/transport/p2p.h"

#include <unistd.h>

#include <cstring>

namespace ferry {

PeerMemory::~PeerMemory() {
  while (!imports_.empty()) close_import(imports_.begin());
}

void PeerMemory::close_import(std::map<ImportKey, Import>::iterator it) {
  if (gpu::Backend* backend = gpu::owner_backend({gpu::MemoryKind::kDevice, it->second.owner}))
    backend->ipc_close(it->second.base);
  lru_.erase(it->second.lru);
  imports_.erase(it);
}

Status PeerMemory::export_buffer(const void* ptr, ExportedBuffer* out) {
  const gpu::PointerInfo info = gpu::classify(ptr);
  gpu::Backend* backend = gpu::owner_backend(info);
  if (info.kind != gpu::MemoryKind::kDevice || !backend || info.allocation_id == 0) return Status::kInvalidArgument;
  std::memset(out, 0, sizeof(*out));
  out->offset = reinterpret_cast<std::uintptr_t>(ptr) - info.base;
  out->allocation_id = info.allocation_id;
  out->base = info.base;
  out->pid = static_cast<std::int32_t>(getpid());
  std::lock_guard<std::mutex> lock(mutex_);
  const ExportKey key{info.owner, info.allocation_id};
  auto it = exports_.find(key);
  if (it == exports_.end()) {
    gpu::IpcHandle handle;
    FERRY_CHECK(backend->ipc_export(reinterpret_cast<void*>(info.base), &handle));
    it = exports_.emplace(key, handle).first;
  }
  out->handle = it->second;
  return Status::kOk;
}

Status PeerMemory::import_buffer(const ExportedBuffer& in, void** mapped) {
  gpu::Backend* backend = gpu::owner_backend({gpu::MemoryKind::kDevice, in.handle.owner});
  if (!backend) return Status::kUnavailable;
  if (in.offset >= in.handle.size) return Status::kInvalidArgument;
  std::lock_guard<std::mutex> lock(mutex_);
  const ImportKey key{in.pid, in.allocation_id};
  auto it = imports_.find(key);
  if (it == imports_.end()) {
    // A new allocation at an address we have mapped means the old one was
    // freed: close its mapping now rather than keep its memory alive.
    for (auto old = imports_.begin(); old != imports_.end();) {
      auto next = std::next(old);
      if (old->first.pid == in.pid && old->second.exporter_base == in.base) close_import(old);
      old = next;
    }
    if (imports_.size() >= kMaxImports) close_import(imports_.find(lru_.back()));
    void* base = nullptr;
    FERRY_CHECK(backend->ipc_import(in.handle, &base));
    lru_.push_front(key);
    it = imports_.emplace(key, Import{base, in.handle.owner, in.base, lru_.begin()}).first;
    FERRY_TRACE(Transport, "mapped allocation %llu of process %d (%llu bytes) at %p",
                static_cast<unsigned long long>(in.allocation_id), in.pid,
                static_cast<unsigned long long>(in.handle.size), base);
  } else {
    lru_.splice(lru_.begin(), lru_, it->second.lru);
  }
  *mapped = static_cast<char*>(it->second.base) + in.offset;
  return Status::kOk;
}

}  // namespace ferry

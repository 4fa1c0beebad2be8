#include "engine/transport/p2p.h"

#include <cstring>

namespace ferry {

bool PeerMemory::HandleKey::operator<(const HandleKey& o) const {
  return std::memcmp(&handle, &o.handle, sizeof(handle)) < 0;
}

PeerMemory::~PeerMemory() {
  for (auto& [key, import] : imports_) {
    if (gpu::Backend* backend = gpu::owner_backend({gpu::MemoryKind::kDevice, import.owner}))
      backend->ipc_close(import.base);
  }
}

Status PeerMemory::export_buffer(const void* ptr, ExportedBuffer* out) {
  const gpu::PointerInfo info = gpu::classify(ptr);
  gpu::Backend* backend = gpu::owner_backend(info);
  if (info.kind != gpu::MemoryKind::kDevice || !backend || info.allocation_id == 0) return Status::kInvalidArgument;
  std::memset(out, 0, sizeof(*out));
  out->offset = reinterpret_cast<std::uintptr_t>(ptr) - info.base;
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
  HandleKey key{in.handle};
  auto it = imports_.find(key);
  if (it == imports_.end()) {
    if (imports_.size() >= kMaxImports) {
      auto oldest = imports_.find(lru_.back());
      gpu::owner_backend({gpu::MemoryKind::kDevice, oldest->second.owner})->ipc_close(oldest->second.base);
      imports_.erase(oldest);
      lru_.pop_back();
    }
    void* base = nullptr;
    FERRY_CHECK(backend->ipc_import(in.handle, &base));
    lru_.push_front(key);
    it = imports_.emplace(key, Import{base, in.handle.owner, lru_.begin()}).first;
    FERRY_TRACE(Transport, "mapped a peer allocation of %llu bytes at %p",
                static_cast<unsigned long long>(in.handle.size), base);
  } else {
    lru_.splice(lru_.begin(), lru_, it->second.lru);
  }
  *mapped = static_cast<char*>(it->second.base) + in.offset;
  return Status::kOk;
}

}  // namespace ferry

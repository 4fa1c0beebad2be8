#include "engine/pgas/device_access.h"

#include <cstring>

namespace ferry {

Status DeviceAccess::create(Window& window, std::unique_ptr<DeviceAccess>* out) {
  PeerGroup& group = window.group();
  gpu::Backend* backend = window.backend();
  std::unique_ptr<DeviceAccess> access(new DeviceAccess(backend, group.peer_memory()));
  const int n = window.size(), me = window.rank();

  // This rank's sync block, zeroed, exported to the peers.
  const std::size_t sync_bytes = kSyncWords * sizeof(unsigned long long);
  ExportedBuffer mine{};
  std::int32_t ready = ok(backend->device_alloc(sync_bytes, &access->sync_block_));
  if (ready) {
    const std::vector<unsigned long long> zeros(kSyncWords, 0);
    ready = ok(backend->copy(access->sync_block_, zeros.data(), sync_bytes)) &&
            ok(group.peer_memory().export_buffer(access->sync_block_, &mine));
  }
  struct Published {
    ExportedBuffer sync;
    std::int32_t ready;
    std::int32_t reserved;
  };
  Published published{mine, ready, 0};
  std::vector<Published> all(n);
  FERRY_CHECK(group.bootstrap().allgather(&published, all.data(), sizeof(published)));
  for (const Published& p : all)
    if (!p.ready) return Status::kUnavailable;

  // Tables as kernels read them: window memory, window sizes, sync blocks.
  std::vector<void*> peers(n), sync(n);
  std::vector<unsigned long long> peer_bytes(n);
  access->peer_sync_blocks_.assign(n, ExportedBuffer{});
  std::int32_t mapped = 1;
  for (int r = 0; r < n; ++r) {
    peers[r] = window.memory(r);
    peer_bytes[r] = window.bytes(r);
    if (r == me) {
      sync[r] = access->sync_block_;
    } else if (ok(group.peer_memory().pin_buffer(all[r].sync, &sync[r]))) {
      access->peer_sync_blocks_[r] = all[r].sync;
    } else {
      mapped = 0;
    }
  }
  std::vector<std::int32_t> everyone(n);
  FERRY_CHECK(group.bootstrap().allgather(&mapped, everyone.data(), sizeof(mapped)));
  for (std::int32_t m : everyone)
    if (!m) return Status::kUnavailable;

  const std::size_t pointer_bytes = n * sizeof(void*), size_bytes = n * sizeof(unsigned long long);
  std::vector<char> tables(2 * pointer_bytes + size_bytes);
  std::memcpy(tables.data(), peers.data(), pointer_bytes);
  std::memcpy(tables.data() + pointer_bytes, peer_bytes.data(), size_bytes);
  std::memcpy(tables.data() + pointer_bytes + size_bytes, sync.data(), pointer_bytes);
  FERRY_CHECK(backend->device_alloc(tables.size(), &access->tables_));
  FERRY_CHECK(backend->copy(access->tables_, tables.data(), tables.size()));
  char* device_tables = static_cast<char*>(access->tables_);

  ferry_window_device_t& h = access->handle_;
  h.rank = me;
  h.size = n;
  h.bytes = window.bytes(me);
  h.peers = reinterpret_cast<void* const*>(device_tables);
  h.peer_bytes = reinterpret_cast<const unsigned long long*>(device_tables + pointer_bytes);
  h.sync = reinterpret_cast<unsigned long long* const*>(device_tables + pointer_bytes + size_bytes);
  // No rank's kernel may reach a peer's sync block before the peer zeroed it.
  FERRY_CHECK(group.bootstrap().barrier());
  *out = std::move(access);
  return Status::kOk;
}

DeviceAccess::~DeviceAccess() {
  for (const ExportedBuffer& pinned : peer_sync_blocks_)
    if (pinned.allocation_id != 0) peer_memory_.unpin_buffer(pinned);
  if (tables_) FERRY_LOG_IF_FAILED(backend_->device_free(tables_));
  if (sync_block_) FERRY_LOG_IF_FAILED(backend_->device_free(sync_block_));
}

}  // namespace ferry

#include "engine/transport/p2p_transport.h"

namespace ferry {
namespace {

// A registered buffer: how a peer maps it, and how many bytes it lends.
struct P2pKey {
  ExportedBuffer exported;
  std::uint64_t bytes;
};

ExportedBuffer exported_of(const MemoryKey& key) { return unpack_memory_key<P2pKey>(key).exported; }

}  // namespace

bool P2pTransport::can_connect(const PeerView& view) const {
  return view.one_machine_one_backend() && view.path == TransportKind::kP2p;
}

Status P2pTransport::register_memory(const void* ptr, std::size_t bytes, MemoryKey* key) {
  P2pKey p2p{};
  FERRY_CHECK(memory_.export_buffer(ptr, &p2p.exported));
  p2p.bytes = bytes;
  *key = pack_memory_key(p2p);
  return Status::kOk;
}

Status P2pTransport::map(int, const MemoryKey& key, void** mapped) {
  return memory_.pin_buffer(exported_of(key), mapped);
}

void P2pTransport::unmap(int, const MemoryKey& key) { memory_.unpin_buffer(exported_of(key)); }

Status P2pTransport::post_write(int peer, const void* local, const MemoryKey& key, std::size_t offset,
                                std::size_t bytes, Completion* completion) {
  if (!within_lent(unpack_memory_key<P2pKey>(key).bytes, offset, bytes)) return Status::kInvalidArgument;
  void* mapped = nullptr;
  FERRY_CHECK(map(peer, key, &mapped));
  const Status copied = gpu::copy(static_cast<char*>(mapped) + offset, local, bytes);
  unmap(peer, key);
  completion->done = ok(copied);
  return copied;
}

Status P2pTransport::post_signal(int peer, const MemoryKey& key, std::size_t offset, std::uint64_t value,
                                 Completion* completion) {
  if (offset % sizeof(value) != 0) return Status::kInvalidArgument;
  return post_write(peer, &value, key, offset, sizeof(value), completion);
}

}  // namespace ferry

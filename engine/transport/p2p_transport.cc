#include "engine/transport/p2p_transport.h"

#include <cstring>

namespace ferry {
namespace {

// A registered buffer: how a peer maps it, and how many bytes it lends.
struct P2pKey {
  ExportedBuffer exported;
  std::uint64_t bytes;
};
static_assert(sizeof(P2pKey) <= sizeof(MemoryKey), "a p2p key must fit a memory key");

P2pKey p2p_key_of(const MemoryKey& key) {
  P2pKey p2p;
  std::memcpy(&p2p, key.bytes, sizeof(p2p));
  return p2p;
}

ExportedBuffer exported_of(const MemoryKey& key) { return p2p_key_of(key).exported; }

}  // namespace

bool P2pTransport::can_connect(const PeerView& view) const {
  return same_machine(view.self, view.peer) && view.self.backend == view.peer.backend &&
         view.self.backend != gpu::kNoBackendId && view.path == TransportKind::kP2p;
}

Status P2pTransport::register_memory(const void* ptr, std::size_t bytes, MemoryKey* key) {
  P2pKey p2p{};
  FERRY_CHECK(memory_.export_buffer(ptr, &p2p.exported));
  p2p.bytes = bytes;
  *key = MemoryKey{};
  std::memcpy(key->bytes, &p2p, sizeof(p2p));
  return Status::kOk;
}

Status P2pTransport::map(int, const MemoryKey& key, void** mapped) {
  return memory_.pin_buffer(exported_of(key), mapped);
}

void P2pTransport::unmap(int, const MemoryKey& key) { memory_.unpin_buffer(exported_of(key)); }

Status P2pTransport::post_write(int peer, const void* local, const MemoryKey& key, std::size_t offset,
                                std::size_t bytes, Completion* completion) {
  const std::uint64_t lent = p2p_key_of(key).bytes;
  if (offset > lent || bytes > lent - offset) return Status::kInvalidArgument;
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

Status P2pTransport::test(Completion* completion, bool* done) {
  *done = completion->done;
  return Status::kOk;
}

}  // namespace ferry

// The p2p transport (transport.h) over PeerMemory (engine/core/peer_memory.h): peers on one
// machine with one device backend map each other's device allocations, so a
// pointer from map() is the peer's device memory itself.
#pragma once

#include "engine/core/peer_memory.h"
#include "engine/transport/transport.h"

namespace ferry {

class P2pTransport final : public Transport {
 public:
  TransportKind type() const override { return TransportKind::kP2p; }
  // One machine, one device backend, and a path the topology finds fit for
  // peer access (below the CPU: NVLink, xGMI or PCIe switches).
  bool can_connect(const PeerView& view) const override;
  bool maps_device_memory() const override { return true; }
  // Nothing to make between the ranks: buffers are exported and mapped as
  // they are registered and mapped.
  Status connect(Bootstrap&) override { return Status::kOk; }

  // ptr must be device memory of a backend that exports it; peers write
  // within [ptr, ptr + bytes).
  Status register_memory(const void* ptr, std::size_t bytes, MemoryKey* key) override;
  // Pinned: the mapping is never evicted before unmap.
  Status map(int peer, const MemoryKey& key, void** mapped) override;
  void unmap(int peer, const MemoryKey& key) override;
  // Blocking copies into the mapping: done when they return.
  Status post_write(int peer, const void* local, const MemoryKey& key, std::size_t offset, std::size_t bytes,
                    Completion* completion) override;
  Status post_signal(int peer, const MemoryKey& key, std::size_t offset, std::uint64_t value,
                     Completion* completion) override;

  // The mappings themselves, for parts that export and pin buffers by
  // their own protocol (windows, device access).
  PeerMemory& memory() { return memory_; }

 private:
  PeerMemory memory_;
};

}  // namespace ferry

// How the engine reaches its peers: one interface every transport
// implements (p2p: peers' device memory mapped here; shm: host shared
// memory of the machine; a network transport later), tried per peer in
// priority order (transport_table.h), as NCCL tries its transports.
//
// A transport answers whether it can connect to a peer (from both ranks'
// identities and the path the topology's search found between them), sets
// itself up collectively, registers memory under a key a peer can use, maps
// a peer's key to a pointer where it has one (the load/store path the
// LL/Simple/copy-engine protocols are written in), and writes into a peer's
// registered memory with a completion to test. The network transport, which
// maps nothing, sends and receives (two-sided) instead.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "engine/common/status.h"
#include "engine/core/ranks.h"
#include "engine/gpu/gpu.h"
#include "engine/topology/search.h"

namespace ferry {

class Bootstrap;

// What a transport judges a peer by.
struct PeerView {
  const RankIdentity& self;
  const RankIdentity& peer;
  // What the topology's search calls for between the two ranks' devices (p2p
  // where there is no topology to ask).
  TransportKind path;

  // One machine and one device backend (not none): what every transport
  // within a machine needs.
  bool one_machine_one_backend() const {
    return same_machine(self, peer) && self.backend == peer.backend && self.backend != gpu::kNoBackendId;
  }
};

// Registered memory as a peer names it: what register_memory gives and map
// and post_write take. Opaque outside its transport; fixed size, so keys
// travel in allgathers.
struct MemoryKey {
  std::uint8_t bytes[128];
};
static_assert(sizeof(MemoryKey) == 128, "MemoryKey travels between processes; keep its layout fixed");

// A transport's own description of registered memory, in a key and back.
template <typename Contents>
MemoryKey pack_memory_key(const Contents& contents) {
  static_assert(sizeof(Contents) <= sizeof(MemoryKey) && std::is_trivially_copyable<Contents>::value,
                "a key's contents must fit a memory key and copy as bytes");
  MemoryKey key{};
  std::memcpy(key.bytes, &contents, sizeof(contents));
  return key;
}
template <typename Contents>
Contents unpack_memory_key(const MemoryKey& key) {
  static_assert(sizeof(Contents) <= sizeof(MemoryKey) && std::is_trivially_copyable<Contents>::value,
                "a key's contents must fit a memory key and copy as bytes");
  Contents contents;
  std::memcpy(&contents, key.bytes, sizeof(contents));
  return contents;
}

// Whether [offset, offset + bytes) lies within lent bytes (no overflow).
inline bool within_lent(std::uint64_t lent, std::size_t offset, std::size_t bytes) {
  return offset <= lent && bytes <= lent - offset;
}

// The completion of a posted operation; test() says when it is done.
struct Completion {
  bool done = false;
};

class Transport {
 public:
  virtual ~Transport() = default;
  virtual TransportKind type() const = 0;
  // Lower case: p2p, shm, net.
  const char* name() const { return transport_kind_label(type()); }

  // Whether this rank can reach peer through this transport (never asked
  // for itself).
  virtual bool can_connect(const PeerView& view) const = 0;
  // Whether a pointer from map() reaches the peer's device memory itself
  // (kernels load and store it), not host memory between the two.
  virtual bool maps_device_memory() const = 0;
  // Collective over the bootstrap's ranks, which must all call it: makes what
  // the transport needs between them (the same outcome on every rank;
  // kUnavailable on all when any could not).
  virtual Status connect(Bootstrap& bootstrap) = 0;

  // Registers [ptr, ptr + bytes) of this process for peers to reach.
  virtual Status register_memory(const void* ptr, std::size_t bytes, MemoryKey* key) = 0;
  // A pointer here to the memory peer registered under key, valid until
  // unmap; kUnsupported where the transport maps nothing.
  virtual Status map(int peer, const MemoryKey& key, void** mapped) = 0;
  virtual void unmap(int peer, const MemoryKey& key) = 0;

  // Copies bytes from local (host or device memory of this process) to
  // offset in the memory peer registered under key; done when test() says.
  virtual Status post_write(int peer, const void* local, const MemoryKey& key, std::size_t offset,
                            std::size_t bytes, Completion* completion) = 0;
  // Stores value in the 8-byte word at offset of peer's registered memory,
  // after every write posted to peer before it has landed.
  virtual Status post_signal(int peer, const MemoryKey& key, std::size_t offset, std::uint64_t value,
                             Completion* completion) = 0;
  // Two-sided: sends bytes of local (host or device memory of this process)
  // to peer's post_recv of the same tag and bytes; messages of one tag
  // between two ranks match in posting order. kUnsupported where the
  // transport only maps and writes.
  virtual Status post_send(int, const void*, std::size_t, int, Completion*) { return Status::kUnsupported; }
  virtual Status post_recv(int, void*, std::size_t, int, Completion*) { return Status::kUnsupported; }

  // Moves posted operations on; *done tells whether completion's has ended.
  // By default, for transports whose posts complete before they return.
  virtual Status test(Completion* completion, bool* done) {
    *done = completion->done;
    return Status::kOk;
  }
};

}  // namespace ferry

// The shm transport (transport.h) over SharedSegments (shm.h): ranks of one
// machine reach each other through one host shared-memory segment per rank,
// registered with the device, where device memory cannot be mapped between
// them. Memory registered for peers lies in this rank's segment.
#pragma once

#include <memory>

#include "engine/transport/shm.h"
#include "engine/transport/transport.h"

namespace ferry {

class ShmTransport final : public Transport {
 public:
  // Segments of segment_bytes, pinned for backend's device (nullptr: plain
  // host memory), made by connect().
  ShmTransport(gpu::Backend* backend, std::size_t segment_bytes) : backend_(backend), segment_bytes_(segment_bytes) {}

  TransportKind type() const override { return TransportKind::kShm; }
  // One machine, one device backend, and a path on it that is not the
  // network (peer access or host memory both do).
  bool can_connect(const PeerView& view) const override;
  bool maps_device_memory() const override { return false; }
  // Every rank of the bootstrap must share one machine.
  Status connect(Bootstrap& bootstrap) override;

  // [ptr, ptr + bytes) must lie in this rank's segment.
  Status register_memory(const void* ptr, std::size_t bytes, MemoryKey* key) override;
  Status map(int peer, const MemoryKey& key, void** mapped) override;
  void unmap(int, const MemoryKey&) override {}
  // Blocking copies into the peer's segment: done when they return.
  Status post_write(int peer, const void* local, const MemoryKey& key, std::size_t offset, std::size_t bytes,
                    Completion* completion) override;
  Status post_signal(int peer, const MemoryKey& key, std::size_t offset, std::uint64_t value,
                     Completion* completion) override;

  // The segments once connected, else nullptr.
  SharedSegments* segments() const { return segments_.get(); }

 private:
  gpu::Backend* backend_;
  std::size_t segment_bytes_;
  std::unique_ptr<SharedSegments> segments_;
  int rank_ = -1;
};

}  // namespace ferry

// GPU-initiated access (ferry/device.h) to a device window whose ranks span
// machines: the handle's kernels reach this rank's own memory, and that of
// the peers whose device memory this process maps (ranks of this machine,
// where the engine's plan reaches them by p2p), by load and store, and
// every other rank through a GDA queue (ferry/gda_ring.h) that a proxy
// thread of this process drains over a network of its own: the net
// transport's ib provider where FERRY_NET allows it and every rank has an
// RDMA port, else its socket provider (engine/transport/gda). The proxy writes what peers put into
// this rank's window memory and sync block, so signals and barriers work as
// on one machine; it is the only writer of the words it adds to (the
// device API sends this rank's own signals, adds and barrier arrivals
// through the queue too).
//
// Created collectively over the window's ranks the first time a rank asks
// for the handle, or with the window when host-initiated calls use the
// queue too (FERRY_RMA_ACROSS=queue: a second ring, for host threads, and
// the accumulates' combiner); destroyed collectively (MPI_Win_free), after
// every rank's operations have finished.
#pragma once

#include <functional>
#include <memory>

#include <vector>

#include "engine/bootstrap/bootstrap.h"
#include "engine/core/peer_group.h"
#include "engine/gpu/gpu.h"
#include "ferry/device_handle.h"
#include "ferry/gda_ring.h"

namespace ferry {

namespace gda {
class GdaNetExecutor;
class GdaProxy;
}  // namespace gda

class RemoteAccess {
 public:
  // Ids of the memory the proxy serves.
  static constexpr unsigned short kWindowId = 0;
  static constexpr unsigned short kSyncId = 1;

  // This rank's window memory: device memory of the backend, or host memory
  // (a rank of a window of device and host memory; no kernel maps it); null
  // with bytes 0.
  struct Memory {
    void* base = nullptr;
    std::size_t bytes = 0;
    bool device = true;
  };
  // Combines accumulates from the host's queue (gda_net.h); may be null.
  using Combiner = std::function<Status(std::uint64_t code, const void* origin, void* target, std::size_t bytes)>;

  // Collective over bootstrap's ranks, the window's in its order.
  static Status create(std::unique_ptr<Bootstrap> bootstrap, gpu::Backend* backend, Memory memory,
                       Combiner combiner, std::unique_ptr<RemoteAccess>* out);
  // Collective: waits until this rank's operations have finished and every
  // rank got there, then stops the proxy (not collective once a peer is
  // lost).
  ~RemoteAccess();
  RemoteAccess(const RemoteAccess&) = delete;
  RemoteAccess& operator=(const RemoteAccess&) = delete;

  const ferry_window_device_t& handle() const { return handle_; }

  // The queue of this process's host threads (host-initiated calls), beside
  // the kernels' (the handle's): descriptors posted there with window
  // kWindowId reach every rank of the window.
  const gda::GdaRing& host_queue() const { return host_ring_; }
  // Waits until every operation posted on the host queue so far has
  // finished (visible at its target); kOk, or why the proxy stopped (also
  // when it stopped over the kernels' queue).
  Status quiet_host() const;
  // kOk, or why the proxy stopped (kPeerEnded: a peer's connection closed,
  // its process most likely ended; kInvalidArgument: a peer refused a request).
  Status status() const;

 private:
  RemoteAccess() = default;
  // Maps a peer's sync block and window memory (*sync_here, *memory_here),
  // leaving null what cannot be mapped (the queue then reaches the peer).
  void map_peer(const ExportedBuffer& memory, std::uint64_t bytes, const ExportedBuffer& sync, void** memory_here,
                void** sync_here);

  // Maps the peers of this machine (and keeps their mappings pinned); its
  // bootstrap is the window's ranks'.
  std::unique_ptr<PeerGroup> group_;
  std::vector<ExportedBuffer> pinned_;  // peers' window memory and sync blocks mapped here
  gpu::Backend* backend_ = nullptr;
  std::unique_ptr<gda::GdaNetExecutor> executor_;
  std::unique_ptr<gda::GdaProxy> proxy_;
  ferry_window_device_t handle_{};
  void* ring_ = nullptr;        // the GdaRing the handle points to (device memory)
  gda::GdaRing host_ring_{};
  void* sync_block_ = nullptr;  // this rank's
  void* tables_ = nullptr;      // device memory behind the handle's pointers
};

}  // namespace ferry

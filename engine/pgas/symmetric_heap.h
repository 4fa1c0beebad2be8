// The symmetric heap: device memory at the same offsets on every rank of a
// group of processes on one machine, with every rank's memory mapped into
// every process.
//
// Each process reserves one virtual range of size() * stride() bytes and
// maps rank r's memory at base() + r * stride(): its own chunks in its own
// slot, the peers' chunks (received as file descriptors) in theirs. So the
// copy of symmetric object X that rank r holds is at
//
//     base() + r * stride() + offset(X)
//
// in every process, and any rank loads and stores any rank's copy with the
// backend's copies, or from kernels, without a message. Physical memory is
// mapped in chunks (granularity multiples, 2 MiB by default) as allocations
// reach them, and stays mapped until the heap goes.
//
// allocate and free are collective, like nvshmem_malloc and nvshmem_free:
// every rank calls them in the same order with the same arguments. The
// allocator (first fit over offsets, 256-byte aligned) then makes the same
// choices on every rank; each call checks that the ranks agree (sizes,
// offsets, the pointer freed) and that every rank could do its part before
// anything changes, so a call either takes effect on every rank or on none,
// and returns the same status everywhere.
//
// One thread per rank calls allocate and free; peer_address, contains and
// the accessors may be called from any thread. Destruction is local: each
// process unmaps everything; memory goes when its last mapping does.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "engine/bootstrap/bootstrap.h"
#include "engine/gpu/gpu.h"
#include "engine/transport/fd_passing.h"

namespace ferry {

struct SymmetricHeapOptions {
  // Bytes of physical memory mapped at a time; rounded up to the backend's
  // granularity. 0: 2 MiB.
  std::size_t chunk_bytes = 0;
  // How chunk descriptors travel between processes (fd_passing.h).
  FdPassing fd_passing = FdPassing::kAuto;
};

class SymmetricHeap {
 public:
  // Alignment of every allocation's offset.
  static constexpr std::size_t kAlignment = 256;

  using Options = SymmetricHeapOptions;

  // Collective over the bootstrap's ranks, which must share one machine and
  // backend. Each rank can allocate up to max_bytes_per_rank (rounded up to
  // whole chunks). The bootstrap must outlive the heap; memory is created on
  // the calling thread's current device.
  static Status create(Bootstrap& bootstrap, gpu::Backend* backend, std::size_t max_bytes_per_rank,
                       std::unique_ptr<SymmetricHeap>* out, const Options& options = {});
  ~SymmetricHeap();
  SymmetricHeap(const SymmetricHeap&) = delete;
  SymmetricHeap& operator=(const SymmetricHeap&) = delete;

  // Collective: this rank's copy of a new object of bytes. Out of heap on
  // every rank (or out of device memory on any): kOutOfMemory everywhere.
  // Ranks asking for different sizes: kInvalidArgument everywhere. bytes 0:
  // kOk and nullptr.
  Status allocate(std::size_t bytes, void** ptr);
  // Collective: frees the object at ptr (this rank's copy, as allocate gave
  // it; nullptr is ignored). Ranks freeing different objects, or something
  // not allocated: kInvalidArgument everywhere.
  Status free(void* ptr);

  // Rank r's copy of the object at ptr, which may point into any rank's copy
  // (and anywhere inside the object); nullptr when ptr is not in the heap or
  // r is not a rank.
  void* peer_address(const void* ptr, int r) const;
  // True when ptr lies in any rank's slot of the heap (mapped or not).
  bool contains(const void* ptr) const;
  // The offset of ptr within its rank's slot; ptr must be in the heap.
  std::size_t offset_of(const void* ptr) const;

  int rank() const { return rank_; }
  int size() const { return size_; }
  gpu::Backend* backend() const { return backend_; }
  void* base() const { return base_; }
  // Bytes between two ranks' slots: the most one rank can allocate.
  std::size_t stride() const { return stride_; }
  std::size_t chunk_bytes() const { return chunk_bytes_; }
  // Bytes of each rank's slot backed by memory (whole chunks, from offset 0).
  std::size_t mapped_bytes() const { return mapped_chunks_ * chunk_bytes_; }
  // How the last chunks' descriptors came (kAuto before any did).
  FdPassing fd_passing_used() const { return fd_passing_used_; }

 private:
  SymmetricHeap(Bootstrap& bootstrap, gpu::Backend* backend) : bootstrap_(bootstrap), backend_(backend) {}

  char* slot(int r) const { return static_cast<char*>(base_) + static_cast<std::size_t>(r) * stride_; }
  // Creates, exchanges and maps chunks [mapped_chunks_, chunks) on every rank.
  Status grow(std::size_t chunks);
  // Unmaps and releases chunks [first, first + count) of every slot.
  void drop_chunks(std::size_t first, std::size_t count);

  Bootstrap& bootstrap_;
  gpu::Backend* backend_;
  int rank_ = 0;
  int size_ = 0;
  FdPassing fd_passing_ = FdPassing::kAuto;
  FdPassing fd_passing_used_ = FdPassing::kAuto;
  void* base_ = nullptr;
  std::size_t stride_ = 0;
  std::size_t chunk_bytes_ = 0;
  std::size_t mapped_chunks_ = 0;
  // chunks_[c * size_ + r]: rank r's chunk c, as mapped here.
  std::vector<gpu::VmChunk> chunks_;
  std::map<std::size_t, std::size_t> free_;  // offset -> bytes, coalesced
  std::map<std::size_t, std::size_t> used_;  // offset -> bytes
};

}  // namespace ferry

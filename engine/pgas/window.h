// An RMA window over device memory: every rank's window memory mapped into
// every other rank (the p2p transport), so a put or get is one copy into or
// out of the peer's memory and an accumulate is a reduction kernel on it.
// Synchronization lives in a small host shared-memory block per rank: the
// passive-target lock word, the accumulate lock, and the post and complete
// counters of general active-target epochs. A dynamic window has no memory
// of its own: each rank attaches device regions, listed in its control block
// with a generation counter, and origins map a region when they first reach
// it. A rank's window memory, or an attached region, may be host memory that
// this engine only lists: locate() says so, and the caller moves those bytes
// another way (the shim: the real MPI's window). MPI-free: mpi_shim/rma*.cc
// map the MPI calls onto this.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "engine/core/peer_group.h"
#include "engine/pgas/symmetric_heap.h"
#include "engine/common/types.h"
#include "engine/core/peer_memory.h"

namespace ferry {

// What an accumulate does with the target's elements.
struct AccumulateOp {
  enum Kind { kReduce, kReplace, kNoOp } kind;
  ReduceOp reduce;  // for kReduce
};

class Window {
 public:
  // Regions one rank of a dynamic window can have attached at once.
  static constexpr int kMaxRegions = 64;

  // One piece of an operation: the bytes at origin + origin (and at result +
  // result) pair with those at the target location + target.
  struct Segment {
    std::ptrdiff_t origin;
    std::ptrdiff_t result;
    std::size_t target;
    std::size_t bytes;
  };

  // Collective over comm's ranks, which must all map each other's device
  // memory. base is this rank's window memory (device memory of the active
  // backend), or null with size 0. A dynamic window has none (size 0 on
  // every rank): memory comes with attach().
  // With heap, base is this rank's copy of one symmetric object of at least
  // size bytes on every rank (SymmetricHeap::allocate): peers' memory is
  // already mapped there, and nothing is exported.
  // With host_memory, [base, base + size) is host memory: listed (sizes and
  // ranges are checked) but never mapped; locate() reports it.
  static Status create(PeerGroup& group, void* base, std::size_t size, int disp_unit,
                       std::unique_ptr<Window>* out, bool dynamic = false, const SymmetricHeap* heap = nullptr,
                       bool host_memory = false);
  // Not collective: call close() on every rank first.
  ~Window();
  Window(const Window&) = delete;
  Window& operator=(const Window&) = delete;

  // Collective: completes this rank's operations and waits until every rank
  // has, so no peer still reaches into memory about to be freed.
  Status close();

  PeerGroup& group() const { return group_; }
  gpu::Backend* backend() const { return backend_; }
  int rank() const { return group_.rank(); }
  int size() const { return group_.size(); }
  std::size_t bytes(int rank) const { return ranks_[rank].bytes; }
  int disp_unit(int rank) const { return ranks_[rank].disp_unit; }
  // rank's window memory as this process reaches it (null for size 0 and
  // for host memory).
  void* memory(int rank) const { return ranks_[rank].mapped; }
  bool host_memory(int rank) const { return ranks_[rank].host; }

  // Whether an access epoch to target is open (fence, start, lock, lock_all).
  bool may_access(int target) const;
  // Whether a passive-target epoch (lock or lock_all) covers target.
  bool passive_access(int target) const;
  bool exposure_open() const { return !exposure_group_.empty(); }
  bool access_group_open() const { return !access_group_.empty(); }
  bool locked(int target) const { return lock_all_ || held_[target] != Held::kNone; }
  bool lock_all_held() const { return lock_all_; }
  // Whether this rank's lock on target (not lock_all) is exclusive.
  bool exclusive_lock(int target) const { return held_[target] == Held::kExclusive; }
  bool any_lock_held() const;

  bool dynamic() const { return dynamic_; }
  // Dynamic windows: this rank's device memory [base, base + bytes) becomes
  // reachable at its own address (host_memory: listed only). kInvalidArgument
  // when it overlaps an attached region, kOutOfMemory when kMaxRegions are
  // attached already.
  Status attach(void* base, std::size_t bytes, bool host_memory = false);
  // Whether base starts a region attached here, and whether it is host memory.
  bool attached(const void* base, bool* host_memory) const;
  // kInvalidArgument when no attached region starts at base.
  Status detach(const void* base);

  // Where the bytes [first, first + bytes) of target's window lie in this
  // process: first is an offset into its window memory or, in a dynamic
  // window, an address in one region attached at the target.
  // kInvalidArgument when the range lies outside; *at is null when bytes is 0.
  // When it lies in host memory (in_host, if given, becomes true), *at is
  // null too: the caller must reach it some other way.
  Status locate(int target, std::int64_t first, std::size_t bytes, char** at, bool* in_host = nullptr);

  // Data movement at a location from locate(). Puts and gets are queued
  // segment by segment and complete at the next flush or synchronization.
  Status put(const void* origin, char* at, const Segment* segments, std::size_t count);
  Status get(void* origin, const char* at, const Segment* segments, std::size_t count);
  // Atomic with respect to every other accumulate on target, over all the
  // segments together: result (if not null) receives the target's elements
  // from before; op then combines origin into them. Segments are whole
  // elements. Completes before returning.
  Status accumulate(const void* origin, void* result, int target, char* at, const Segment* segments,
                    std::size_t count, std::size_t element_bytes, DataType type, AccumulateOp op);
  // The same for element types and ops no kernel has: combine(origin,
  // target, bytes) applies op on host copies of the elements, packed in
  // segment order (origin null for NO_OP), under the target's accumulate lock.
  using HostCombine = std::function<Status(const void* origin, void* target, std::size_t bytes)>;
  Status accumulate_on_host(const void* origin, void* result, int target, char* at, const Segment* segments,
                            std::size_t count, const HostCombine& combine);
  // Atomically: result = target element; if it equals compare, it becomes origin.
  Status compare_and_swap(const void* origin, const void* compare, void* result, int target, char* at,
                          std::size_t element_bytes);

  // Run while start(), wait() and lock() wait for other ranks: when those
  // ranks may be waiting in another layer (the real MPI) for this one to
  // make progress there.
  void set_progress(std::function<void()> progress) { progress_ = std::move(progress); }

  // Completes every operation this rank issued (locally and at the targets).
  Status flush();

  // Active target: fence.
  Status fence(bool opens_epoch);
  // General active target: ranks are window ranks.
  Status post(const std::vector<int>& origins);
  Status start(const std::vector<int>& targets);
  Status complete();
  Status wait();
  Status test(bool* done);

  // Passive target.
  Status lock(int target, bool exclusive);
  Status unlock(int target);
  Status lock_all();
  Status unlock_all();

 private:
  struct RankMemory {
    ExportedBuffer exported;
    void* mapped;
    std::uint64_t bytes;
    std::int32_t disp_unit;
    std::int32_t has_memory;  // mapped from an export, to unpin at the end
    bool host;
  };
  enum class Held : std::uint8_t { kNone, kShared, kExclusive };
  struct Control;
  struct Region;
  struct RegionTable;
  // A dynamic window's regions at one target, as this rank last read them.
  struct KnownRegion {
    std::uint64_t base;
    std::uint64_t bytes;
    ExportedBuffer exported;
    bool host;
    void* mapped;  // pinned on first use; null before
  };
  struct PeerRegions {
    std::uint64_t generation = ~std::uint64_t{0};
    std::vector<KnownRegion> regions;
  };

  Window(PeerGroup& group, gpu::Backend* backend) : group_(group), backend_(backend) {}
  Control& control(int rank) const;
  RegionTable& regions(int rank) const;
  Status refresh_regions(int target);
  void unpin_regions(PeerRegions& peer);
  Status reserve_scratch(std::size_t bytes);
  // Whether an accumulate is the GPU's own atomics on the target memory.
  bool native_atomics(const char* at, const Segment* segments, std::size_t count, std::size_t element_bytes,
                      DataType type, AccumulateOp op) const;
  // Device memory aligned to the element: a kernel may use it in place.
  static bool device_aligned(const void* p, std::size_t element_bytes);
  // at[i] = at[i] op origin[i] on the device; the caller holds the target's
  // accumulate lock.
  Status reduce_into(char* at, const void* origin, std::size_t count, std::size_t element_bytes, DataType type,
                     ReduceOp op);

  PeerGroup& group_;
  gpu::Backend* backend_;
  gpu::Stream stream_ = nullptr;
  std::vector<RankMemory> ranks_;
  std::unique_ptr<SharedSegments> control_;
  void* scratch_ = nullptr;
  std::size_t scratch_bytes_ = 0;
  bool dynamic_ = false;
  std::function<void()> progress_;
  std::vector<PeerRegions> peer_regions_;  // dynamic windows, per target

  bool fence_epoch_ = false;
  bool lock_all_ = false;
  std::vector<Held> held_;
  std::vector<int> access_group_;
  std::vector<int> exposure_group_;
  // Post and complete notices consumed so far, per peer.
  std::vector<std::uint64_t> posts_seen_;
  std::vector<std::uint64_t> completes_seen_;
};

}  // namespace ferry

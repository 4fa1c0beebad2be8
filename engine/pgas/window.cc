#include "engine/pgas/window.h"

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <vector>

#include "engine/core/executor.h"
#include "engine/pgas/atomics.h"

namespace ferry {
namespace {

// Published by each rank when the window is created.
struct Published {
  ExportedBuffer exported;
  std::uint64_t bytes;
  std::int32_t disp_unit;
  std::int32_t has_memory;
  std::int32_t ready;
  std::int32_t host_memory;
};

constexpr std::int64_t kExclusive = -1;
constexpr std::size_t kControlHeaderBytes = 64;

// Waits that depend on another process: spin briefly, then give the core
// away (ranks often outnumber cores on a shared node), running progress
// (when set) each time.
template <typename Ready>
void wait_until(Ready ready, const std::function<void()>* progress = nullptr) {
  for (int spins = 0; !ready(); ++spins)
    if (spins > 64) {
      if (progress && *progress) (*progress)();
      sched_yield();
    }
}

}  // namespace

// Lives in the rank's host shared-memory segment; zero-filled at creation.
struct Window::Control {
  std::atomic<std::int64_t> lock;  // 0 free, kExclusive, or the count of shared holders
  std::atomic<std::int32_t> accumulate_lock;
  // Then posts[size] and completes[size] (std::atomic<std::uint64_t>):
  // posts[t] counts the exposure epochs target t opened to this rank,
  // completes[o] the access epochs origin o closed to it.
  std::atomic<std::uint64_t>* posts() {
    return reinterpret_cast<std::atomic<std::uint64_t>*>(reinterpret_cast<char*>(this) + kControlHeaderBytes);
  }
  std::atomic<std::uint64_t>* completes(int size) { return posts() + size; }
};
static_assert(sizeof(std::atomic<std::uint64_t>) == 8 && std::atomic<std::uint64_t>::is_always_lock_free,
              "the control block is shared between processes: its atomics must be lock-free");

// A dynamic window's regions, after the post and complete counters. Only the
// owning rank writes it; origins read it as a seqlock: generation is odd
// while a change is under way and grows by two with each attach or detach.
struct Window::Region {
  std::uint64_t base;  // the address in the owning process
  std::uint64_t bytes;
  std::uint32_t host;  // host memory: listed, not exported
  std::uint32_t reserved;
  ExportedBuffer exported;
};
struct Window::RegionTable {
  std::atomic<std::uint64_t> generation;
  std::int32_t count;
  std::int32_t reserved;
  Region regions[kMaxRegions];
};

Status Window::create(PeerGroup& group, void* base, std::size_t size, int disp_unit, std::unique_ptr<Window>* out,
                      bool dynamic, const SymmetricHeap* heap, bool host_memory) {
  gpu::Backend* backend = gpu::active_backend();
  if (!backend || !group.all_peers_mapped() || (dynamic && size != 0)) return Status::kUnavailable;
  std::unique_ptr<Window> window(new Window(group, backend));
  window->dynamic_ = dynamic;
  const int n = group.size();
  const int me = group.rank();

  Published mine{};
  mine.bytes = size;
  mine.disp_unit = disp_unit;
  mine.has_memory = size > 0 && !host_memory;
  mine.host_memory = size > 0 && host_memory;
  mine.ready = !mine.has_memory || heap || ok(group.peer_memory().export_buffer(base, &mine.exported));
  mine.ready = mine.ready && ok(backend->stream_create(&window->stream_));
  std::vector<Published> all(n);
  FERRY_CHECK(group.bootstrap().allgather(&mine, all.data(), sizeof(mine)));
  for (const Published& p : all)
    if (!p.ready) return Status::kInvalidArgument;

  // Map every peer's memory for the window's lifetime, then agree.
  window->ranks_.resize(n);
  std::int32_t mapped = 1;
  for (int r = 0; r < n; ++r) {
    RankMemory& rm = window->ranks_[r];
    rm.exported = all[r].exported;
    rm.bytes = all[r].bytes;
    rm.disp_unit = all[r].disp_unit;
    rm.has_memory = all[r].has_memory;
    rm.host = all[r].host_memory;
    rm.mapped = nullptr;
    if (!rm.has_memory) continue;
    if (r == me) {
      rm.mapped = base;
    } else if (heap) {
      rm.mapped = heap->peer_address(base, r);
      rm.has_memory = 0;  // nothing pinned to release
      if (!rm.mapped) mapped = 0;
    } else if (!ok(group.peer_memory().pin_buffer(rm.exported, &rm.mapped))) {
      rm.has_memory = 0;  // not pinned: nothing to release
      mapped = 0;
    }
  }
  std::vector<std::int32_t> everyone(n);
  FERRY_CHECK(group.bootstrap().allgather(&mapped, everyone.data(), sizeof(mapped)));
  for (std::int32_t m : everyone)
    if (!m) return Status::kUnavailable;

  const std::size_t counters = kControlHeaderBytes + 2 * n * sizeof(std::uint64_t);
  FERRY_CHECK(SharedSegments::create(group.bootstrap(), backend, counters + (dynamic ? sizeof(RegionTable) : 0),
                                     &window->control_));
  if (dynamic) window->peer_regions_.resize(n);
  window->held_.assign(n, Held::kNone);
  window->posts_seen_.assign(n, 0);
  window->completes_seen_.assign(n, 0);
  FERRY_INFO(Pgas, "window of %d ranks: %zu bytes here, every peer mapped", n, size);
  *out = std::move(window);
  return Status::kOk;
}

Window::~Window() {
  for (int r = 0; r < static_cast<int>(ranks_.size()); ++r)
    if (r != rank() && ranks_[r].has_memory) group_.peer_memory().unpin_buffer(ranks_[r].exported);
  for (PeerRegions& peer : peer_regions_) unpin_regions(peer);
  if (stream_) FERRY_LOG_IF_FAILED(backend_->stream_destroy(stream_));
  if (scratch_) FERRY_LOG_IF_FAILED(backend_->device_free(scratch_));
}

Status Window::close() {
  FERRY_CHECK(flush());
  return group_.bootstrap().barrier();
}

Window::Control& Window::control(int rank) const { return *reinterpret_cast<Control*>(control_->segment(rank)); }

bool Window::passive_access(int target) const { return lock_all_ || held_[target] != Held::kNone; }

bool Window::may_access(int target) const {
  return fence_epoch_ || passive_access(target) ||
         std::find(access_group_.begin(), access_group_.end(), target) != access_group_.end();
}

bool Window::any_lock_held() const {
  return lock_all_ || std::any_of(held_.begin(), held_.end(), [](Held h) { return h != Held::kNone; });
}

Window::RegionTable& Window::regions(int rank) const {
  static_assert(sizeof(Region) == 136 && sizeof(RegionTable) == 16 + 136 * kMaxRegions,
                "the region table is shared between processes; keep its layout fixed");
  return *reinterpret_cast<RegionTable*>(control_->segment(rank) + kControlHeaderBytes +
                                         2 * size() * sizeof(std::uint64_t));
}

Status Window::attach(void* base, std::size_t bytes, bool host_memory) {
  RegionTable& table = regions(rank());
  const std::uint64_t begin = reinterpret_cast<std::uintptr_t>(base), end = begin + bytes;
  for (int i = 0; i < table.count; ++i) {
    const Region& r = table.regions[i];
    if (begin < r.base + r.bytes && r.base < end) return Status::kInvalidArgument;
  }
  if (table.count == kMaxRegions) return Status::kOutOfMemory;
  Region region{begin, bytes, host_memory, 0, {}};
  if (bytes > 0 && !host_memory) FERRY_CHECK(group_.peer_memory().export_buffer(base, &region.exported));
  const std::uint64_t generation = table.generation.load(std::memory_order_relaxed);
  table.generation.store(generation + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  table.regions[table.count++] = region;
  table.generation.store(generation + 2, std::memory_order_release);
  return Status::kOk;
}

bool Window::attached(const void* base, bool* host_memory) const {
  const RegionTable& table = regions(rank());
  for (int i = 0; i < table.count; ++i)
    if (table.regions[i].base == reinterpret_cast<std::uintptr_t>(base)) {
      *host_memory = table.regions[i].host;
      return true;
    }
  return false;
}

Status Window::detach(const void* base) {
  RegionTable& table = regions(rank());
  const std::uint64_t address = reinterpret_cast<std::uintptr_t>(base);
  int found = 0;
  while (found < table.count && table.regions[found].base != address) ++found;
  if (found == table.count) return Status::kInvalidArgument;
  const std::uint64_t generation = table.generation.load(std::memory_order_relaxed);
  table.generation.store(generation + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  table.regions[found] = table.regions[--table.count];
  table.generation.store(generation + 2, std::memory_order_release);
  return Status::kOk;
}

void Window::unpin_regions(PeerRegions& peer) {
  for (const KnownRegion& r : peer.regions)
    if (r.mapped && &peer != &peer_regions_[rank()]) group_.peer_memory().unpin_buffer(r.exported);
  peer.regions.clear();
}

// Reads target's table anew (a consistent copy, retried while the target
// changes it) and forgets the mappings of the old one.
Status Window::refresh_regions(int target) {
  PeerRegions& peer = peer_regions_[target];
  unpin_regions(peer);
  RegionTable& table = regions(target);
  std::vector<KnownRegion> copy;
  std::uint64_t before = 0;
  wait_until([&] {
    before = table.generation.load(std::memory_order_acquire);
    if (before % 2) return false;
    const int count = std::min(table.count, kMaxRegions);
    copy.clear();
    for (int i = 0; i < count; ++i) {
      const Region& r = table.regions[i];
      copy.push_back({r.base, r.bytes, r.exported, r.host != 0, nullptr});
    }
    std::atomic_thread_fence(std::memory_order_acquire);
    return table.generation.load(std::memory_order_relaxed) == before;
  });
  peer.regions = std::move(copy);
  peer.generation = before;
  return Status::kOk;
}

Status Window::locate(int target, std::int64_t first, std::size_t bytes, char** at, bool* in_host) {
  *at = nullptr;
  if (in_host) *in_host = false;
  if (bytes == 0) return Status::kOk;
  if (first < 0) return Status::kInvalidArgument;
  const std::uint64_t begin = static_cast<std::uint64_t>(first), end = begin + bytes;
  if (!dynamic_) {
    if (end > ranks_[target].bytes) return Status::kInvalidArgument;
    if (ranks_[target].host) {
      if (!in_host) return Status::kInvalidArgument;
      *in_host = true;
      return Status::kOk;
    }
    *at = static_cast<char*>(ranks_[target].mapped) + begin;
    return Status::kOk;
  }
  PeerRegions& peer = peer_regions_[target];
  if (regions(target).generation.load(std::memory_order_acquire) != peer.generation)
    FERRY_CHECK(refresh_regions(target));
  for (KnownRegion& r : peer.regions) {
    if (begin < r.base || end > r.base + r.bytes) continue;
    if (r.host) {
      if (!in_host) return Status::kInvalidArgument;
      *in_host = true;
      return Status::kOk;
    }
    if (!r.mapped) {
      if (target == rank())
        r.mapped = reinterpret_cast<void*>(static_cast<std::uintptr_t>(r.base));
      else
        FERRY_CHECK(group_.peer_memory().pin_buffer(r.exported, &r.mapped));
    }
    *at = static_cast<char*>(r.mapped) + (begin - r.base);
    return Status::kOk;
  }
  return Status::kInvalidArgument;
}

Status Window::put(const void* origin, char* at, const Segment* segments, std::size_t count) {
  for (std::size_t i = 0; i < count; ++i) {
    const Segment& s = segments[i];
    if (s.bytes) FERRY_CHECK(backend_->copy_async(at + s.target, static_cast<const char*>(origin) + s.origin, s.bytes, stream_));
  }
  return Status::kOk;
}

Status Window::get(void* origin, const char* at, const Segment* segments, std::size_t count) {
  for (std::size_t i = 0; i < count; ++i) {
    const Segment& s = segments[i];
    if (s.bytes) FERRY_CHECK(backend_->copy_async(static_cast<char*>(origin) + s.origin, at + s.target, s.bytes, stream_));
  }
  return Status::kOk;
}

Status Window::flush() { return backend_->stream_synchronize(stream_); }

Status Window::reserve_scratch(std::size_t bytes) {
  if (scratch_bytes_ >= bytes) return Status::kOk;
  if (scratch_) FERRY_CHECK(backend_->device_free(scratch_));
  scratch_ = nullptr;
  scratch_bytes_ = 0;
  FERRY_CHECK(backend_->device_alloc(bytes, &scratch_));
  scratch_bytes_ = bytes;
  return Status::kOk;
}

Status Window::reduce_into(char* at, const void* origin, std::size_t count, std::size_t element_bytes,
                           DataType type, ReduceOp op) {
  const std::size_t bytes = count * element_bytes;
  auto aligned = [&](const void* p) { return reinterpret_cast<std::uintptr_t>(p) % element_bytes == 0; };
  const bool origin_readable =
      backend_->execution_site() == gpu::ExecutionSite::kHost || gpu::classify(origin).kind == gpu::MemoryKind::kDevice;
  DirectReduceArgs args{};
  args.ninputs = 2;
  args.noutputs = 1;
  args.count = count;
  args.type = type;
  args.op = op;
  if (origin_readable && aligned(at) && aligned(origin)) {
    args.inputs[0] = at;
    args.inputs[1] = origin;
    args.outputs[0] = at;
    return launch_direct_reduce(backend_, args, stream_);
  }
  // A host origin, or elements a GPU cannot load where they lie (MPI allows
  // any byte displacement): reduce aligned copies in the scratch.
  const std::size_t padded = (bytes + 15) / 16 * 16;
  FERRY_CHECK(reserve_scratch(2 * padded));
  char* operand = static_cast<char*>(scratch_);
  char* staged_target = operand + padded;
  FERRY_CHECK(backend_->copy_async(operand, origin, bytes, stream_));
  FERRY_CHECK(backend_->copy_async(staged_target, at, bytes, stream_));
  args.inputs[0] = staged_target;
  args.inputs[1] = operand;
  args.outputs[0] = staged_target;
  FERRY_CHECK(launch_direct_reduce(backend_, args, stream_));
  return backend_->copy_async(at, staged_target, bytes, stream_);
}

namespace {

// The target's accumulate lock, held for one read-modify-write.
class AccumulateLock {
 public:
  explicit AccumulateLock(std::atomic<std::int32_t>& word) : word_(word) {
    wait_until([&] {
      std::int32_t expected = 0;
      return word_.compare_exchange_weak(expected, 1, std::memory_order_acquire);
    });
  }
  ~AccumulateLock() { word_.store(0, std::memory_order_release); }

 private:
  std::atomic<std::int32_t>& word_;
};

}  // namespace

bool Window::device_aligned(const void* p, std::size_t element_bytes) {
  return reinterpret_cast<std::uintptr_t>(p) % element_bytes == 0 &&
         gpu::classify(p).kind == gpu::MemoryKind::kDevice;
}

bool Window::native_atomics(const char* at, const Segment* segments, std::size_t count, std::size_t element_bytes,
                            DataType type, AccumulateOp op) const {
  if (!backend_->device_atomics() || op.kind != AccumulateOp::kReduce ||
      !gpu_atomic_supported(type, op.reduce))
    return false;
  // A GPU atomic needs its element aligned where it lies (MPI allows any
  // byte displacement; such targets keep the lock).
  for (std::size_t i = 0; i < count; ++i)
    if ((reinterpret_cast<std::uintptr_t>(at) + segments[i].target) % element_bytes != 0) return false;
  return true;
}

Status Window::accumulate(const void* origin, void* result, int target, char* at, const Segment* segments,
                          std::size_t count, std::size_t element_bytes, DataType type, AccumulateOp op) {
  std::size_t largest = 0;
  for (std::size_t i = 0; i < count; ++i) largest = std::max(largest, segments[i].bytes);
  if (largest == 0) return Status::kOk;
  if (native_atomics(at, segments, count, element_bytes, type, op)) {
    // Each element one atomic instruction: concurrent origins need no lock.
    // Every accumulate of this (type, op) takes this path, wherever its
    // origin lies, so none races a locked read-modify-write of another.
    // (MPI's default accumulate_ops=same_op_no_op lets concurrent
    // accumulates on one place assume the same op or MPI_NO_OP.)
    const std::size_t padded = (largest + 15) / 16 * 16;
    FERRY_CHECK(reserve_scratch(2 * padded));
    char* operand_copy = static_cast<char*>(scratch_);
    char* result_copy = operand_copy + padded;
    FERRY_CHECK(flush());  // earlier puts to the same place land first
    for (std::size_t i = 0; i < count; ++i) {
      const Segment& s = segments[i];
      if (s.bytes == 0) continue;
      const char* operand = static_cast<const char*>(origin) + s.origin;
      if (!device_aligned(operand, element_bytes)) {
        FERRY_CHECK(backend_->copy_async(operand_copy, operand, s.bytes, stream_));
        operand = operand_copy;
      }
      char* before = result ? static_cast<char*>(result) + s.result : nullptr;
      char* before_here = before && !device_aligned(before, element_bytes) ? result_copy : before;
#ifdef FERRY_HAVE_GPU_KERNELS
      FERRY_CHECK(gpu_atomic_accumulate(at + s.target, operand, before_here, s.bytes / element_bytes, type,
                                         op.reduce, stream_));
#endif
      if (before_here != before) FERRY_CHECK(backend_->copy_async(before, result_copy, s.bytes, stream_));
      // The scratch is reused by the next segment: stream order keeps it safe.
    }
    return flush();
  }
  // Reserved for the largest segment up front: the scratch must not move
  // while earlier segments still use it on the stream.
  if (op.kind == AccumulateOp::kReduce) FERRY_CHECK(reserve_scratch(2 * ((largest + 15) / 16 * 16)));
  // One lock for every segment: the whole operation is one atomic update.
  AccumulateLock lock(control(target).accumulate_lock);
  // Earlier puts to the same place must land first (MPI orders them).
  FERRY_CHECK(flush());
  for (std::size_t i = 0; i < count; ++i) {
    const Segment& s = segments[i];
    if (s.bytes == 0) continue;
    char* here = at + s.target;
    const char* from = static_cast<const char*>(origin) + s.origin;
    if (result) FERRY_CHECK(backend_->copy_async(static_cast<char*>(result) + s.result, here, s.bytes, stream_));
    switch (op.kind) {
      case AccumulateOp::kNoOp:
        break;
      case AccumulateOp::kReplace:
        FERRY_CHECK(backend_->copy_async(here, from, s.bytes, stream_));
        break;
      case AccumulateOp::kReduce:
        FERRY_CHECK(reduce_into(here, from, s.bytes / element_bytes, element_bytes, type, op.reduce));
        break;
    }
  }
  return flush();
}

Status Window::accumulate_on_host(const void* origin, void* result, int target, char* at, const Segment* segments,
                                  std::size_t count, const HostCombine& combine) {
  std::size_t total = 0;
  for (std::size_t i = 0; i < count; ++i) total += segments[i].bytes;
  if (total == 0) return Status::kOk;
  std::vector<char> operand(origin ? total : 0), elements(total);
  AccumulateLock lock(control(target).accumulate_lock);
  FERRY_CHECK(flush());  // earlier puts to the same place land first
  std::size_t packed = 0;
  for (std::size_t i = 0; i < count; ++i) {
    const Segment& s = segments[i];
    FERRY_CHECK(backend_->copy_async(elements.data() + packed, at + s.target, s.bytes, stream_));
    if (origin)
      FERRY_CHECK(backend_->copy_async(operand.data() + packed, static_cast<const char*>(origin) + s.origin, s.bytes,
                                       stream_));
    packed += s.bytes;
  }
  FERRY_CHECK(flush());
  if (result) {
    packed = 0;
    for (std::size_t i = 0; i < count; ++i) {
      FERRY_CHECK(backend_->copy_async(static_cast<char*>(result) + segments[i].result, elements.data() + packed,
                                       segments[i].bytes, stream_));
      packed += segments[i].bytes;
    }
    // The host copies are rewritten below: the copies out of them finish first.
    FERRY_CHECK(flush());
  }
  if (!origin) return Status::kOk;  // NO_OP
  FERRY_CHECK(combine(operand.data(), elements.data(), total));
  packed = 0;
  for (std::size_t i = 0; i < count; ++i) {
    FERRY_CHECK(backend_->copy_async(at + segments[i].target, elements.data() + packed, segments[i].bytes, stream_));
    packed += segments[i].bytes;
  }
  return flush();
}

Status Window::compare_and_swap(const void* origin, const void* compare, void* result, int target, char* at,
                                std::size_t element_bytes) {
  unsigned char old_value[16], compare_value[16], new_value[16];
  if (element_bytes > sizeof(old_value)) return Status::kInvalidArgument;
  AccumulateLock lock(control(target).accumulate_lock);
  FERRY_CHECK(flush());
  FERRY_CHECK(backend_->copy(old_value, at, element_bytes));
  FERRY_CHECK(backend_->copy(compare_value, compare, element_bytes));
  if (std::memcmp(old_value, compare_value, element_bytes) == 0) {
    FERRY_CHECK(backend_->copy(new_value, origin, element_bytes));
    FERRY_CHECK(backend_->copy(at, new_value, element_bytes));
  }
  return backend_->copy(result, old_value, element_bytes);
}

Status Window::fence(bool opens_epoch) {
  FERRY_CHECK(flush());
  FERRY_CHECK(group_.bootstrap().barrier());
  fence_epoch_ = opens_epoch;
  return Status::kOk;
}

Status Window::post(const std::vector<int>& origins) {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  for (int o : origins) control(o).posts()[rank()].fetch_add(1, std::memory_order_release);
  exposure_group_ = origins;
  return Status::kOk;
}

Status Window::start(const std::vector<int>& targets) {
  std::atomic<std::uint64_t>* posts = control(rank()).posts();
  for (int t : targets) {
    wait_until([&] { return posts[t].load(std::memory_order_acquire) > posts_seen_[t]; }, &progress_);
    ++posts_seen_[t];
  }
  access_group_ = targets;
  return Status::kOk;
}

Status Window::complete() {
  FERRY_CHECK(flush());
  for (int t : access_group_) control(t).completes(size())[rank()].fetch_add(1, std::memory_order_release);
  access_group_.clear();
  return Status::kOk;
}

Status Window::test(bool* done) {
  std::atomic<std::uint64_t>* completes = control(rank()).completes(size());
  *done = std::all_of(exposure_group_.begin(), exposure_group_.end(), [&](int o) {
    return completes[o].load(std::memory_order_acquire) > completes_seen_[o];
  });
  if (!*done) return Status::kOk;
  for (int o : exposure_group_) ++completes_seen_[o];
  exposure_group_.clear();
  return Status::kOk;
}

Status Window::wait() {
  bool done = false;
  wait_until([&] { return ok(test(&done)) && done; }, &progress_);
  return Status::kOk;
}

Status Window::lock(int target, bool exclusive) {
  std::atomic<std::int64_t>& word = control(target).lock;
  wait_until([&] {
    std::int64_t seen = word.load(std::memory_order_relaxed);
    if (exclusive) return seen == 0 && word.compare_exchange_weak(seen, kExclusive, std::memory_order_acquire);
    return seen >= 0 && word.compare_exchange_weak(seen, seen + 1, std::memory_order_acquire);
  }, &progress_);
  held_[target] = exclusive ? Held::kExclusive : Held::kShared;
  return Status::kOk;
}

Status Window::unlock(int target) {
  FERRY_CHECK(flush());
  std::atomic<std::int64_t>& word = control(target).lock;
  if (held_[target] == Held::kExclusive)
    word.store(0, std::memory_order_release);
  else
    word.fetch_sub(1, std::memory_order_release);
  held_[target] = Held::kNone;
  return Status::kOk;
}

Status Window::lock_all() {
  for (int t = 0; t < size(); ++t) FERRY_CHECK(lock(t, false));
  std::fill(held_.begin(), held_.end(), Held::kNone);
  lock_all_ = true;
  return Status::kOk;
}

Status Window::unlock_all() {
  FERRY_CHECK(flush());
  for (int t = 0; t < size(); ++t) control(t).lock.fetch_sub(1, std::memory_order_release);
  lock_all_ = false;
  return Status::kOk;
}

}  // namespace ferry

#include "mpi_shim/staging.h"

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <map>
#include <mutex>
#include <set>
#include <vector>

#include "engine/common/log.h"
#include "engine/common/params.h"
#include "mpi_shim/wrapper_support.h"

namespace ferry::shim {

// Host blocks by power-of-two size class, reused across calls so the staged
// route never allocates on the steady path. Pinned blocks, in use and
// cached, stay within FERRY_STAGING_POOL_MAX_BYTES: cached blocks of other
// sizes are freed to make room for a new one (a job's sizes change; the
// blocks of sizes it left must not push its current calls off pinned
// memory), and only past what is in use is a block pageable memory, mapped for the call and unmapped after: pinning memory
// costs more than a slower copy through it once, and most staged receives
// of device buffers are never written (their data comes through peer
// memory), so their pages are never touched.
class PinnedPool {
 public:
  explicit PinnedPool(gpu::Backend* backend) : backend_(backend) {}

  Status acquire(std::size_t bytes, void** block, std::size_t* capacity) {
    const std::size_t size = size_class(bytes);
    *capacity = size;
    bool pin = false;
    std::vector<std::pair<void*, std::size_t>> evicted;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = free_.find(size);
      if (it != free_.end() && !it->second.empty()) {
        *block = it->second.back();
        it->second.pop_back();
        cached_bytes_ -= size;
        pinned_in_use_ += size;
        pinned_peak_ = std::max(pinned_peak_, pinned_in_use_ + cached_bytes_);
        return Status::kOk;
      }
      const auto limit = static_cast<std::size_t>(params().staging_pool_max_bytes);
      if (pinned_in_use_ + size <= limit) {
        for (auto& [cached_size, blocks] : free_) {
          while (pinned_in_use_ + cached_bytes_ + size > limit && !blocks.empty()) {
            evicted.push_back({blocks.back(), cached_size});
            blocks.pop_back();
            cached_bytes_ -= cached_size;
          }
        }
      }
      pin = pinned_in_use_ + cached_bytes_ + size <= limit;
      if (pin) {
        pinned_in_use_ += size;
        pinned_peak_ = std::max(pinned_peak_, pinned_in_use_ + cached_bytes_);
        ++pinned_allocations_;
      }
    }
    for (const auto& [cached, cached_size] : evicted) {
      FERRY_TRACE(Stage, "pinned staging block of %zu bytes freed to make room", cached_size);
      FERRY_LOG_IF_FAILED(backend_->pinned_free(cached));
    }
    if (pin && ok(backend_->pinned_alloc(size, block))) {
      FERRY_TRACE(Stage, "pinned staging block of %zu bytes", size);
      return Status::kOk;
    }
    std::lock_guard<std::mutex> lock(mutex_);
    if (pin) {
      pinned_in_use_ -= size;
      --pinned_allocations_;
    }
    void* mapped = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mapped == MAP_FAILED) return Status::kOutOfMemory;
    FERRY_TRACE(Stage, "pageable staging block of %zu bytes (pinned staging at FERRY_STAGING_POOL_MAX_BYTES)", size);
    pageable_.insert(mapped);
    ++pageable_blocks_;
    *block = mapped;
    return Status::kOk;
  }

  void release(void* block, std::size_t capacity) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (pageable_.erase(block)) {
      munmap(block, capacity);
      return;
    }
    pinned_in_use_ -= capacity;
    free_[capacity].push_back(block);
    cached_bytes_ += capacity;
  }

  void drain() {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& [size, blocks] : free_)
      for (void* b : blocks) FERRY_LOG_IF_FAILED(backend_->pinned_free(b));
    free_.clear();
    cached_bytes_ = 0;
  }

  void add_to(StagingMemory* total) {
    std::lock_guard<std::mutex> lock(mutex_);
    total->pinned_peak_bytes += pinned_peak_;
    total->pinned_allocations += pinned_allocations_;
    total->pageable_blocks += pageable_blocks_;
  }

 private:
  static std::size_t size_class(std::size_t bytes) {
    std::size_t size = 64 * 1024;
    while (size < bytes) size <<= 1;
    return size;
  }

  gpu::Backend* backend_;
  std::mutex mutex_;
  std::map<std::size_t, std::vector<void*>> free_;
  std::set<void*> pageable_;
  std::size_t cached_bytes_ = 0;
  std::size_t pinned_in_use_ = 0;
  std::uint64_t pinned_peak_ = 0, pinned_allocations_ = 0, pageable_blocks_ = 0;
};

namespace {

// Pinned memory comes from the backend that owns the device buffer (the
// emulated device's "pinned" memory is plain host memory): one pool per
// backend, made when a buffer of that backend is first staged.
std::mutex pools_mutex;
std::map<gpu::Backend*, PinnedPool*>& pools() {
  static auto* by_backend = new std::map<gpu::Backend*, PinnedPool*>;
  return *by_backend;
}

PinnedPool* pool_for(gpu::Backend* owner) {
  if (!owner) return nullptr;
  std::lock_guard<std::mutex> lock(pools_mutex);
  PinnedPool*& pool = pools()[owner];
  if (!pool) pool = new PinnedPool(owner);
  return pool;
}

// Every pool made so far.
std::vector<PinnedPool*> all_pools() {
  std::lock_guard<std::mutex> lock(pools_mutex);
  std::vector<PinnedPool*> all;
  for (auto& [backend, pool] : pools()) all.push_back(pool);
  return all;
}

bool type_bounds(MPI_Datatype type, MPI_Aint* true_lb, MPI_Aint* true_extent, MPI_Aint* extent, int* size) {
  if (type == MPI_DATATYPE_NULL) return false;
  MPI_Aint lb = 0;
  return PMPI_Type_get_true_extent(type, true_lb, true_extent) == MPI_SUCCESS &&
         PMPI_Type_get_extent(type, &lb, extent) == MPI_SUCCESS && PMPI_Type_size(type, size) == MPI_SUCCESS;
}

// Accumulates byte ranges [first, last) into one covering extent.
struct RangeUnion {
  MPI_Aint first = LLONG_MAX;
  MPI_Aint last = LLONG_MIN;
  MPI_Aint data_bytes = 0;

  void add(MPI_Aint begin, MPI_Aint end, MPI_Aint data) {
    if (end <= begin) return;
    first = std::min(first, begin);
    last = std::max(last, end);
    data_bytes += data;
  }
  Extent extent() const {
    Extent e;
    if (last <= first) return e;
    e.lb = first;
    e.bytes = static_cast<std::size_t>(last - first);
    e.dense = data_bytes == last - first;
    return e;
  }
};

// Bytes touched by count elements of a type whose first element starts at offset.
void add_elements(RangeUnion* range, MPI_Aint offset, std::int64_t count, MPI_Aint true_lb, MPI_Aint true_extent,
                  MPI_Aint extent, int size) {
  if (count <= 0) return;
  const MPI_Aint a = offset + true_lb;
  const MPI_Aint b = offset + true_lb + static_cast<MPI_Aint>(count - 1) * extent;
  range->add(std::min(a, b), std::max(a, b) + true_extent, static_cast<MPI_Aint>(count) * size);
}

// Whether bytes at first lie in the memory info classified: inside its
// device allocation, or (for MPI_BOTTOM, whose types may name any address)
// host memory at both ends.
bool within_one_kind(const gpu::PointerInfo& info, const char* first, std::size_t bytes, bool absolute) {
  if (info.kind == gpu::MemoryKind::kDevice)
    return info.size == 0 || (reinterpret_cast<std::uintptr_t>(first) >= info.base &&
                              reinterpret_cast<std::uintptr_t>(first) + bytes <= info.base + info.size);
  return !absolute || gpu::classify(first + bytes - 1).kind != gpu::MemoryKind::kDevice;
}

}  // namespace

bool extent_of(std::int64_t count, MPI_Datatype type, Extent* out) {
  MPI_Aint true_lb, true_extent, extent;
  int size;
  if (count < 0 || !type_bounds(type, &true_lb, &true_extent, &extent, &size)) return false;
  RangeUnion range;
  add_elements(&range, 0, count, true_lb, true_extent, extent, size);
  *out = range.extent();
  return true;
}

bool extent_of_blocks(int blocks, const int counts[], const int displs[], MPI_Datatype type, Extent* out) {
  MPI_Aint true_lb, true_extent, extent;
  int size;
  if (blocks < 0 || (blocks > 0 && !counts) || !type_bounds(type, &true_lb, &true_extent, &extent, &size))
    return false;
  RangeUnion range;
  for (int i = 0; i < blocks; ++i) {
    if (counts[i] < 0) return false;
    const MPI_Aint offset = displs ? static_cast<MPI_Aint>(displs[i]) * extent : 0;
    add_elements(&range, offset, counts[i], true_lb, true_extent, extent, size);
  }
  *out = range.extent();
  // Overlapping blocks would be counted twice; treat them as not dense.
  if (range.data_bytes > static_cast<MPI_Aint>(out->bytes)) out->dense = false;
  return true;
}

namespace {

template <typename Displacement>
bool typed_blocks_extent(int blocks, const int counts[], const Displacement byte_displs[],
                         const MPI_Datatype types[], Extent* out) {
  if (blocks < 0 || (blocks > 0 && (!counts || !byte_displs || !types))) return false;
  RangeUnion range;
  for (int i = 0; i < blocks; ++i) {
    if (counts[i] < 0) return false;
    if (counts[i] == 0) continue;
    MPI_Aint true_lb, true_extent, extent;
    int size;
    if (!type_bounds(types[i], &true_lb, &true_extent, &extent, &size)) return false;
    add_elements(&range, byte_displs[i], counts[i], true_lb, true_extent, extent, size);
  }
  *out = range.extent();
  if (range.data_bytes > static_cast<MPI_Aint>(out->bytes)) out->dense = false;
  return true;
}

}  // namespace

bool extent_of_typed_blocks(int blocks, const int counts[], const int byte_displs[], const MPI_Datatype types[],
                            Extent* out) {
  return typed_blocks_extent(blocks, counts, byte_displs, types, out);
}

bool extent_of_typed_blocks(int blocks, const int counts[], const MPI_Aint byte_displs[], const MPI_Datatype types[],
                            Extent* out) {
  return typed_blocks_extent(blocks, counts, byte_displs, types, out);
}

Staging::~Staging() {
  for (const Staged& s : staged_) s.pool->release(s.host, s.capacity);
}

void* Staging::stage(const void* buffer, const Extent& extent, bool copy_in, bool copy_out) {
  if (failed()) return nullptr;
  if (buffer == MPI_IN_PLACE || extent.bytes == 0) return const_cast<void*>(buffer);
  // MPI_BOTTOM (a null pointer in Open MPI and MPICH) plus the type's
  // absolute displacements; any other null buffer the real MPI rejects.
  char* first = reinterpret_cast<char*>(reinterpret_cast<std::uintptr_t>(buffer) + extent.lb);
  if (buffer == MPI_BOTTOM && !first) return const_cast<void*>(buffer);
  const gpu::PointerInfo info = gpu::classify(first);
  if (!within_one_kind(info, first, extent.bytes, buffer == MPI_BOTTOM)) {
    FERRY_WARN(Stage, "%s: %zu bytes at %p span host and device memory or several device allocations",
                    function_name(id_), extent.bytes, static_cast<void*>(first));
    error_class_ = MPI_ERR_BUFFER;
    return nullptr;
  }
  if (info.kind != gpu::MemoryKind::kDevice) return const_cast<void*>(buffer);

  PinnedPool* pool = pool_for(gpu::owner_backend(info));
  void* host = nullptr;
  std::size_t capacity = 0;
  if (!pool || !ok(pool->acquire(extent.bytes, &host, &capacity))) {
    FERRY_WARN(Stage, "%s: no pinned host memory for %zu staging bytes", function_name(id_), extent.bytes);
    error_class_ = MPI_ERR_NO_MEM;
    return nullptr;
  }
  staged_.push_back(
      {first, host, capacity, extent.bytes, copy_out ? extent.bytes : 0, pool, copy_in, copy_out, false});
  if (copy_in && !copy_from_device(staged_.back())) return nullptr;
  FERRY_TRACE(Stage, "%s: staged %zu bytes at %p (in=%d out=%d)", function_name(id_), extent.bytes, buffer,
              copy_in, copy_out);
  return static_cast<char*>(host) - extent.lb;
}

bool Staging::copy_from_device(const Staged& s) {
  if (ok(gpu::copy(s.host, s.device, s.bytes))) return true;
  FERRY_WARN(Stage, "%s: copying %zu bytes from the device failed", function_name(id_), s.bytes);
  error_class_ = MPI_ERR_OTHER;
  return false;
}

const void* Staging::in(const void* buffer, const Extent& extent) {
  return stage(buffer, extent, /*copy_in=*/true, /*copy_out=*/false);
}

void* Staging::out(void* buffer, const Extent& extent) {
  // Holes in the layout keep the device's bytes: copy them in first.
  return stage(buffer, extent, /*copy_in=*/!extent.dense, /*copy_out=*/true);
}

void* Staging::inout(void* buffer, const Extent& extent) {
  return stage(buffer, extent, /*copy_in=*/true, /*copy_out=*/true);
}

namespace {

// Whether count elements of type occupy memory in address order with no
// holes, so that the first k bytes of a message land in the first k bytes
// of the buffer: predefined types, and contiguous runs of such types.
bool fills_in_address_order(MPI_Datatype type) {
  int integers = 0, addresses = 0, types = 0, combiner = 0;
  if (PMPI_Type_get_envelope(type, &integers, &addresses, &types, &combiner) != MPI_SUCCESS) return false;
  if (combiner == MPI_COMBINER_NAMED) return true;
  if ((combiner != MPI_COMBINER_CONTIGUOUS && combiner != MPI_COMBINER_DUP) || types != 1 || integers > 1 ||
      addresses != 0)
    return false;
  int count = 0;
  MPI_Datatype inner = MPI_DATATYPE_NULL;
  if (PMPI_Type_get_contents(type, integers, 0, 1, &count, nullptr, &inner) != MPI_SUCCESS) return false;
  const bool in_order = fills_in_address_order(inner);
  int inner_integers = 0, inner_addresses = 0, inner_types = 0, inner_combiner = 0;
  PMPI_Type_get_envelope(inner, &inner_integers, &inner_addresses, &inner_types, &inner_combiner);
  if (inner_combiner != MPI_COMBINER_NAMED) PMPI_Type_free(&inner);
  return in_order;
}

}  // namespace

void* Staging::receive(void* buffer, const Extent& extent, MPI_Datatype type) {
  const bool prefix = extent.dense && fills_in_address_order(type);
  const std::size_t before = staged_.size();
  void* staged = prefix ? out(buffer, extent) : inout(buffer, extent);
  if (staged_.size() > before) staged_.back().prefix_receive = prefix;
  return staged;
}

void Staging::received(const MPI_Status& status) {
  if (staged_.empty() || !staged_.back().prefix_receive) return;
  int bytes = 0;
  PMPI_Get_count(&status, MPI_BYTE, &bytes);
  const std::size_t arrived = bytes == MPI_UNDEFINED ? 0 : static_cast<std::size_t>(bytes);
  staged_.back().copy_back = std::min(staged_.back().copy_back, arrived);
}

int Staging::raise() {
  if (on_file_) return raise_file_error(file_, error_class_);
  return win_ != MPI_WIN_NULL ? raise_win_error(win_, error_class_) : raise_error(comm_, error_class_);
}

int Staging::finish(int mpi_result) {
  if (mpi_result != MPI_SUCCESS) return mpi_result;  // outputs stay as they were
  for (const Staged& s : staged_) {
    if (s.copy_back == 0) continue;
    if (!ok(gpu::copy(s.device, s.host, s.copy_back))) {
      FERRY_WARN(Stage, "%s: copying %zu bytes back to the device failed", function_name(id_), s.copy_back);
      error_class_ = MPI_ERR_OTHER;
      return raise();
    }
  }
  return MPI_SUCCESS;
}

int Staging::restart() {
  for (Staged& s : staged_) {
    s.copy_back = s.copy_out ? s.bytes : 0;
    if (s.copy_in && !copy_from_device(s)) return raise();
  }
  return MPI_SUCCESS;
}

StagingMemory staging_memory() {
  StagingMemory total;
  for (PinnedPool* pool : all_pools()) pool->add_to(&total);
  return total;
}

void release_staging_pools() {
  for (PinnedPool* pool : all_pools()) pool->drain();
}

}  // namespace ferry::shim

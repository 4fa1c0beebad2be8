#include "engine/pgas/symmetric_heap.h"

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <string>

#include "engine/core/locality.h"

namespace ferry {
namespace {

constexpr std::size_t kDefaultChunkBytes = std::size_t{2} << 20;
constexpr std::uint64_t kNoFit = ~std::uint64_t{0};

std::size_t round_up(std::size_t bytes, std::size_t unit) { return (bytes + unit - 1) / unit * unit; }

// The first failure in rank order, on every rank; kOk when there is none.
Status agree(Bootstrap& bootstrap, Status mine, Status* agreed) {
  const std::int32_t code = static_cast<std::int32_t>(mine);
  std::vector<std::int32_t> codes(bootstrap.size());
  FERRY_CHECK(bootstrap.allgather(&code, codes.data(), sizeof(code)));
  *agreed = Status::kOk;
  for (std::int32_t c : codes) {
    if (c != 0) {
      *agreed = static_cast<Status>(c);
      break;
    }
  }
  return Status::kOk;
}

// What each rank brings to create.
struct HeapSetup {
  std::uint64_t machine;
  std::uint64_t max_bytes_per_rank;
  std::uint64_t chunk_bytes;  // this rank's choice, a multiple of its granularity
  std::int32_t backend;
  std::int32_t status;
};
static_assert(sizeof(HeapSetup) == 32, "HeapSetup travels between processes; keep its layout fixed");

// What each rank means to do in allocate or free.
struct Intent {
  std::uint64_t bytes;   // allocate: the size asked for
  std::uint64_t offset;  // the object's offset (kNoFit: allocate found no room)
  std::int32_t valid;    // free: the pointer is a live object of this rank's slot
  std::int32_t reserved;
};
static_assert(sizeof(Intent) == 24, "Intent travels between processes; keep its layout fixed");

}  // namespace

Status SymmetricHeap::create(Bootstrap& bootstrap, gpu::Backend* backend, std::size_t max_bytes_per_rank,
                             std::unique_ptr<SymmetricHeap>* out, const Options& options) {
  if (!backend) return Status::kInvalidArgument;
  std::unique_ptr<SymmetricHeap> heap(new SymmetricHeap(bootstrap, backend));
  heap->rank_ = bootstrap.rank();
  heap->size_ = bootstrap.size();
  heap->fd_passing_ = options.fd_passing;

  HeapSetup mine{};
  mine.machine = machine_identity();
  mine.max_bytes_per_rank = max_bytes_per_rank;
  mine.backend = gpu::backend_id(backend);
  std::size_t granularity = 0;
  Status status = backend->vm_granularity(&granularity);
  if (ok(status) && granularity == 0) status = Status::kUnsupported;
  if (ok(status)) mine.chunk_bytes = round_up(options.chunk_bytes ? options.chunk_bytes : kDefaultChunkBytes, granularity);
  mine.status = static_cast<std::int32_t>(status);
  std::vector<HeapSetup> all(heap->size_);
  FERRY_CHECK(bootstrap.allgather(&mine, all.data(), sizeof(mine)));

  // Every rank sees the same table, so every rank reaches the same verdict.
  std::size_t chunk = 0;
  for (int r = 0; r < heap->size_; ++r) {
    if (all[r].status != 0) {
      FERRY_WARN(Pgas, "symmetric heap: rank %d has no virtual memory support (%s)", r,
                 status_name(static_cast<Status>(all[r].status)));
      return static_cast<Status>(all[r].status);
    }
    if (all[r].machine != all[0].machine || all[r].backend != all[0].backend) {
      FERRY_WARN(Pgas, "symmetric heap: rank %d is on another machine or device backend than rank 0", r);
      return Status::kUnsupported;
    }
    if (all[r].max_bytes_per_rank != all[0].max_bytes_per_rank) {
      FERRY_WARN(Pgas, "symmetric heap: rank %d asks for %llu bytes, rank 0 for %llu", r,
                 static_cast<unsigned long long>(all[r].max_bytes_per_rank),
                 static_cast<unsigned long long>(all[0].max_bytes_per_rank));
      return Status::kInvalidArgument;
    }
    // Granularities are powers of two: the largest choice suits every rank.
    chunk = std::max(chunk, static_cast<std::size_t>(all[r].chunk_bytes));
  }
  heap->chunk_bytes_ = chunk;
  heap->stride_ = round_up(std::max<std::size_t>(max_bytes_per_rank, 1), chunk);
  if (heap->stride_ > SIZE_MAX / heap->size_) return Status::kInvalidArgument;

  status = backend->vm_reserve(heap->stride_ * heap->size_, &heap->base_);
  if (!ok(status)) heap->base_ = nullptr;
  Status agreed = Status::kOk;
  FERRY_CHECK(agree(bootstrap, status, &agreed));
  if (!ok(agreed)) {
    FERRY_WARN(Pgas, "symmetric heap: cannot reserve %d x %zu bytes of address space on every rank", heap->size_,
               heap->stride_);
    return agreed;  // the destructor gives back this rank's reservation
  }
  heap->free_[0] = heap->stride_;
  FERRY_INFO(Pgas, "symmetric heap: %d ranks x %zu bytes at %p, chunks of %zu bytes", heap->size_, heap->stride_,
             heap->base_, heap->chunk_bytes_);
  *out = std::move(heap);
  return Status::kOk;
}

SymmetricHeap::~SymmetricHeap() {
  drop_chunks(0, mapped_chunks_);
  if (base_) FERRY_LOG_IF_FAILED(backend_->vm_unreserve(base_, stride_ * size_));
}

void SymmetricHeap::drop_chunks(std::size_t first, std::size_t count) {
  for (std::size_t c = first; c < first + count; ++c) {
    for (int r = 0; r < size_; ++r) {
      FERRY_LOG_IF_FAILED(backend_->vm_unmap(slot(r) + c * chunk_bytes_, chunk_bytes_));
      FERRY_LOG_IF_FAILED(backend_->vm_release(chunks_[c * size_ + r]));
    }
  }
  chunks_.resize(first * size_);
}

Status SymmetricHeap::grow(std::size_t chunks) {
  const std::size_t count = chunks - mapped_chunks_;
  // This rank's new chunks, and a descriptor of each for the peers.
  std::vector<gpu::VmChunk> own(count);
  std::vector<int> fds(count, -1);
  std::size_t created = 0;
  Status status = Status::kOk;
  for (; created < count && ok(status); ++created) {
    status = backend_->vm_create(chunk_bytes_, &own[created]);
    if (!ok(status)) break;
    status = backend_->vm_export(own[created], &fds[created]);
  }
  auto release_own = [&] {
    for (std::size_t i = 0; i < created; ++i) FERRY_LOG_IF_FAILED(backend_->vm_release(own[i]));
  };
  auto close_fds = [](std::vector<int>& list) {
    for (int& fd : list) {
      if (fd >= 0) close(fd);
      fd = -1;
    }
  };
  Status agreed = Status::kOk;
  FERRY_CHECK(agree(bootstrap_, status, &agreed));
  if (!ok(agreed)) {
    close_fds(fds);
    release_own();
    FERRY_INFO(Pgas, "symmetric heap: growing to %zu chunks failed on some rank: %s", chunks, status_name(agreed));
    return agreed;
  }

  std::vector<int> received(count * size_, -1);
  status = allgather_fds(bootstrap_, fds.data(), count, received.data(), fd_passing_, &fd_passing_used_);
  close_fds(fds);
  if (!ok(status)) {  // agreed by allgather_fds
    release_own();
    FERRY_CHECK(status);
  }

  // New chunks in chunks_'s layout: chunk c of rank r at [(c - first) * size_ + r].
  std::vector<gpu::VmChunk> mapped(count * size_);
  std::vector<bool> held(count * size_, false), in_place(count * size_, false);
  for (std::size_t i = 0; i < count; ++i) {
    mapped[i * size_ + rank_] = own[i];
    held[i * size_ + rank_] = true;
  }
  for (std::size_t i = 0; i < count && ok(status); ++i) {
    for (int r = 0; r < size_ && ok(status); ++r) {
      const std::size_t k = i * size_ + r;
      if (r != rank_) {
        status = backend_->vm_import(received[r * count + i], chunk_bytes_, &mapped[k]);
        if (!ok(status)) break;
        held[k] = true;
      }
      status = backend_->vm_map(slot(r) + (mapped_chunks_ + i) * chunk_bytes_, mapped[k]);
      in_place[k] = ok(status);
    }
  }
  close_fds(received);
  FERRY_CHECK(agree(bootstrap_, status, &agreed));
  if (!ok(agreed)) {
    for (std::size_t i = 0; i < count; ++i) {
      for (int r = 0; r < size_; ++r) {
        const std::size_t k = i * size_ + r;
        if (in_place[k])
          FERRY_LOG_IF_FAILED(backend_->vm_unmap(slot(r) + (mapped_chunks_ + i) * chunk_bytes_, chunk_bytes_));
        if (held[k]) FERRY_LOG_IF_FAILED(backend_->vm_release(mapped[k]));
      }
    }
    FERRY_INFO(Pgas, "symmetric heap: mapping chunks failed on some rank: %s", status_name(agreed));
    return agreed;
  }
  chunks_.insert(chunks_.end(), mapped.begin(), mapped.end());
  FERRY_TRACE(Pgas, "symmetric heap: %zu chunks of %zu bytes per rank mapped (descriptors by %s)", chunks,
              chunk_bytes_, fd_passing_name(fd_passing_used_));
  mapped_chunks_ = chunks;
  return Status::kOk;
}

Status SymmetricHeap::allocate(std::size_t bytes, void** ptr) {
  *ptr = nullptr;
  // First fit: identical call sequences leave identical free lists.
  Intent mine{bytes, kNoFit, 1, 0};
  const std::size_t need = bytes <= stride_ ? round_up(bytes, kAlignment) : 0;
  if (bytes > 0 && need > 0) {
    for (const auto& [offset, length] : free_) {
      if (length >= need) {
        mine.offset = offset;
        break;
      }
    }
  }
  std::vector<Intent> all(size_);
  FERRY_CHECK(bootstrap_.allgather(&mine, all.data(), sizeof(mine)));
  for (int r = 0; r < size_; ++r) {
    if (all[r].bytes != all[0].bytes) {
      FERRY_WARN(Pgas, "symmetric heap: allocate of %llu bytes on rank %d, %llu on rank 0",
                 static_cast<unsigned long long>(all[r].bytes), r, static_cast<unsigned long long>(all[0].bytes));
      return Status::kInvalidArgument;
    }
    if (all[r].offset != all[0].offset) {
      FERRY_WARN(Pgas, "symmetric heap: rank %d would place %zu bytes at offset %llu, rank 0 at %llu", r, bytes,
                 static_cast<unsigned long long>(all[r].offset), static_cast<unsigned long long>(all[0].offset));
      return Status::kInternal;
    }
  }
  if (bytes == 0) return Status::kOk;
  if (mine.offset == kNoFit) {
    FERRY_INFO(Pgas, "symmetric heap: no room for %zu bytes (%zu per rank)", bytes, stride_);
    return Status::kOutOfMemory;
  }
  const std::size_t offset = mine.offset;
  const std::size_t chunks = (offset + need + chunk_bytes_ - 1) / chunk_bytes_;
  if (chunks > mapped_chunks_) FERRY_CHECK(grow(chunks));

  auto hole = free_.find(offset);
  const std::size_t left = hole->second - need;
  free_.erase(hole);
  if (left > 0) free_[offset + need] = left;
  used_[offset] = need;
  *ptr = slot(rank_) + offset;
  FERRY_TRACE(Pgas, "symmetric heap: %zu bytes at offset %zu", bytes, offset);
  return Status::kOk;
}

Status SymmetricHeap::free(void* ptr) {
  Intent mine{0, kNoFit, 1, 0};
  if (ptr) {
    const auto p = reinterpret_cast<std::uintptr_t>(ptr);
    const auto own = reinterpret_cast<std::uintptr_t>(slot(rank_));
    mine.offset = p - own;
    mine.valid = p >= own && p < own + stride_ && used_.count(mine.offset);
  }
  std::vector<Intent> all(size_);
  FERRY_CHECK(bootstrap_.allgather(&mine, all.data(), sizeof(mine)));
  for (int r = 0; r < size_; ++r) {
    if (!all[r].valid || all[r].offset != all[0].offset) {
      FERRY_WARN(Pgas, "symmetric heap: rank %d frees %s (offset %llu; rank 0: %llu)", r,
                 all[r].valid ? "another object" : "no object of its heap",
                 static_cast<unsigned long long>(all[r].offset), static_cast<unsigned long long>(all[0].offset));
      return Status::kInvalidArgument;
    }
  }
  if (!ptr) return Status::kOk;
  std::size_t offset = mine.offset;
  auto used = used_.find(offset);
  std::size_t length = used->second;
  used_.erase(used);
  // Coalesce with the holes on either side.
  auto next = free_.lower_bound(offset);
  if (next != free_.end() && next->first == offset + length) {
    length += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    auto previous = std::prev(next);
    if (previous->first + previous->second == offset) {
      offset = previous->first;
      length += previous->second;
      free_.erase(previous);
    }
  }
  free_[offset] = length;
  return Status::kOk;
}

bool SymmetricHeap::contains(const void* ptr) const {
  const auto p = reinterpret_cast<std::uintptr_t>(ptr);
  const auto b = reinterpret_cast<std::uintptr_t>(base_);
  return base_ && p >= b && p - b < stride_ * size_;
}

std::size_t SymmetricHeap::offset_of(const void* ptr) const {
  return (reinterpret_cast<std::uintptr_t>(ptr) - reinterpret_cast<std::uintptr_t>(base_)) % stride_;
}

void* SymmetricHeap::peer_address(const void* ptr, int r) const {
  if (!contains(ptr) || r < 0 || r >= size_) return nullptr;
  return slot(r) + offset_of(ptr);
}

}  // namespace ferry

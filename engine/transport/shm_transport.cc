#include "engine/transport/shm_transport.h"

#include <atomic>

#include "engine/bootstrap/bootstrap.h"

namespace ferry {
namespace {

// Where registered memory lies in its rank's segment.
struct SegmentRange {
  std::int32_t rank;
  std::int32_t reserved;
  std::uint64_t offset;
  std::uint64_t bytes;
};

SegmentRange range_of(const MemoryKey& key) { return unpack_memory_key<SegmentRange>(key); }

}  // namespace

bool ShmTransport::can_connect(const PeerView& view) const {
  return view.one_machine_one_backend() && view.path != TransportKind::kNet;
}

Status ShmTransport::connect(Bootstrap& bootstrap) {
  rank_ = bootstrap.rank();
  return SharedSegments::create(bootstrap, backend_, segment_bytes_, &segments_);
}

Status ShmTransport::register_memory(const void* ptr, std::size_t bytes, MemoryKey* key) {
  if (!segments_) return Status::kUnavailable;
  const char* own = segments_->segment(rank_);
  const char* at = static_cast<const char*>(ptr);
  if (at < own || !within_lent(segments_->bytes(), static_cast<std::size_t>(at - own), bytes))
    return Status::kInvalidArgument;
  *key = pack_memory_key(SegmentRange{rank_, 0, static_cast<std::uint64_t>(at - own), bytes});
  return Status::kOk;
}

Status ShmTransport::map(int peer, const MemoryKey& key, void** mapped) {
  const SegmentRange range = range_of(key);
  if (!segments_ || range.rank != peer || !within_lent(segments_->bytes(), range.offset, range.bytes))
    return Status::kInvalidArgument;
  *mapped = segments_->segment(peer) + range.offset;
  return Status::kOk;
}

Status ShmTransport::post_write(int peer, const void* local, const MemoryKey& key, std::size_t offset,
                                std::size_t bytes, Completion* completion) {
  void* mapped = nullptr;
  FERRY_CHECK(map(peer, key, &mapped));
  if (!within_lent(range_of(key).bytes, offset, bytes)) return Status::kInvalidArgument;
  const Status copied = gpu::copy(static_cast<char*>(mapped) + offset, local, bytes);
  completion->done = ok(copied);
  return copied;
}

Status ShmTransport::post_signal(int peer, const MemoryKey& key, std::size_t offset, std::uint64_t value,
                                 Completion* completion) {
  void* mapped = nullptr;
  FERRY_CHECK(map(peer, key, &mapped));
  if (offset % sizeof(value) != 0 || !within_lent(range_of(key).bytes, offset, sizeof(value)))
    return Status::kInvalidArgument;
  // Release: a peer that sees the value sees every write before it.
  reinterpret_cast<std::atomic<std::uint64_t>*>(static_cast<char*>(mapped) + offset)
      ->store(value, std::memory_order_release);
  completion->done = true;
  return Status::kOk;
}

}  // namespace ferry

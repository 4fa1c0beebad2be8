#include "mpi_shim/host_bounce.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>

#include "engine/common/log.h"
#include "engine/common/process_memory.h"

namespace ferry::shim::peer {
namespace {

// Mappings of other processes' segments kept before the least recently
// used is unmapped.
constexpr std::size_t kMaxPeerMappings = 64;

}  // namespace

std::size_t bounce_bytes(std::size_t bytes) {
  constexpr std::size_t kStep = std::size_t{64} << 20;
  std::size_t rounded = std::size_t{2} << 20;
  while (rounded < bytes && rounded < kStep) rounded *= 2;
  if (rounded < bytes) rounded = (bytes + kStep - 1) / kStep * kStep;
  return rounded;
}

std::string host_bounce_name(std::uint64_t nonce, std::uint64_t index) {
  return "ferry-bounce-" + std::to_string(nonce) + "-" + std::to_string(index);
}

HostBounces::~HostBounces() {
  for (auto& segment : segments_) destroy(*segment);
}

void HostBounces::destroy(HostBounce& bounce) {
  munmap(bounce.data, bounce.bytes);
  close(bounce.fd);
}

HostBounce* HostBounces::take(std::size_t bytes, std::uint64_t limit) {
  HostBounce* best = nullptr;
  for (const auto& b : segments_)
    if (!b->busy && b->bytes >= bytes && (!best || b->bytes < best->bytes)) best = b.get();
  if (best) {
    best->busy = true;
    return best;
  }
  const std::size_t rounded = bounce_bytes(bytes);
  std::uint64_t held = 0, idle = 0;
  for (const auto& b : segments_) {
    held += b->bytes;
    if (!b->busy) idle += b->bytes;
  }
  if (held - idle + rounded > limit) return nullptr;
  for (auto it = segments_.begin(); it != segments_.end() && held + rounded > limit;) {
    if ((*it)->busy) {
      ++it;
      continue;
    }
    held -= (*it)->bytes;
    destroy(**it);
    it = segments_.erase(it);
  }
  const std::uint64_t index = next_index_++;
  const int fd = create_process_memory(host_bounce_name(nonce_, index), rounded, true);
  void* data = fd < 0 ? MAP_FAILED : mmap(nullptr, rounded, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (data == MAP_FAILED) {
    if (fd >= 0) close(fd);
    FERRY_TRACE(Shim, "no host bounce buffer of %zu bytes: the machine's memory is full", rounded);
    return nullptr;
  }
  FERRY_TRACE(Shim, "host bounce buffer of %zu bytes made (%llu held before)", rounded,
              static_cast<unsigned long long>(held));
  segments_.push_back(std::make_unique<HostBounce>(HostBounce{index, fd, data, rounded}));
  segments_.back()->busy = true;
  return segments_.back().get();
}

PeerHostBounces::~PeerHostBounces() {
  for (auto& [key, mapping] : mappings_) munmap(mapping.data, mapping.bytes);
}

const void* PeerHostBounces::map(int pid, int fd, std::uint64_t nonce, std::uint64_t index, std::size_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  const Key key{pid, nonce, index};
  auto it = mappings_.find(key);
  if (it != mappings_.end()) {
    it->second.used = ++uses_;
    return it->second.bytes >= bytes ? it->second.data : nullptr;
  }
  if (mappings_.size() >= kMaxPeerMappings) {
    auto oldest = std::min_element(mappings_.begin(), mappings_.end(),
                                   [](const auto& a, const auto& b) { return a.second.used < b.second.used; });
    munmap(oldest->second.data, oldest->second.bytes);
    mappings_.erase(oldest);
  }
  const int opened = open_process_memory(pid, fd, host_bounce_name(nonce, index), O_RDONLY);
  if (opened < 0) return nullptr;
  const std::size_t size = process_memory_bytes(opened);
  void* data = size >= bytes && size > 0 ? mmap(nullptr, size, PROT_READ, MAP_SHARED, opened, 0) : MAP_FAILED;
  close(opened);
  if (data == MAP_FAILED) return nullptr;
  mappings_.emplace(key, Mapping{data, size, ++uses_});
  return data;
}

}  // namespace ferry::shim::peer

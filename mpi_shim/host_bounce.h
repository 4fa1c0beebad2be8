// Host bounce buffers: segments of host shared memory a device send's data
// is copied to when its offer is withdrawn and no device bounce buffer is
// free (FERRY_PT2PT_BOUNCE_BYTES in use). Like a device bounce buffer, and
// unlike a message of the real MPI, the receive copies from it whenever it
// completes and asks nothing more of the sender: a real MPI message from
// host memory needs the sender's own MPI progress to be delivered, which a
// sender inside an engine collective never makes (a deadlock).
//
// A segment is a memfd (engine/common/process_memory.h: nothing is left in
// /dev/shm however the job ends), made once, called by a nonce of its
// owner's and an index that is never reused, and kept for reuse until the
// owner's MPI_Finalize; the receiver opens it by the owner's pid and
// descriptor at first use.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

namespace ferry::shim::peer {

// The size a bounce buffer (device or host) of bytes is made with: whole
// 2 MiB pages, a power of two up to 64 MiB, whole 64 MiB above, so buffers
// are reused by messages of nearby sizes (and the receivers' mappings with
// them).
std::size_t bounce_bytes(std::size_t bytes);

struct HostBounce {
  std::uint64_t index;
  int fd;  // the memfd, open while the segment lives
  void* data;
  std::size_t bytes;
  bool busy = false;
  std::int32_t reply = 0;  // the acknowledgement lands here
};

// This process's segments. Not thread-safe: the caller holds its lock.
class HostBounces {
 public:
  explicit HostBounces(std::uint64_t nonce) : nonce_(nonce) {}
  ~HostBounces();
  HostBounces(const HostBounces&) = delete;
  HostBounces& operator=(const HostBounces&) = delete;

  // A free segment of at least bytes, or a new one while all segments stay
  // within limit bytes (idle ones are freed to make room); nullptr when none
  // can be had, also when the machine's shared memory is full.
  HostBounce* take(std::size_t bytes, std::uint64_t limit);

  std::uint64_t nonce() const { return nonce_; }

 private:
  void destroy(HostBounce& bounce);

  std::uint64_t nonce_;
  std::uint64_t next_index_ = 0;
  std::vector<std::unique_ptr<HostBounce>> segments_;
};

std::string host_bounce_name(std::uint64_t nonce, std::uint64_t index);

// Another process's segments, mapped at first use and kept (the most
// recently used ones, up to a bound).
class PeerHostBounces {
 public:
  PeerHostBounces() = default;
  ~PeerHostBounces();
  PeerHostBounces(const PeerHostBounces&) = delete;
  PeerHostBounces& operator=(const PeerHostBounces&) = delete;

  // The data of segment index (memfd fd) of process pid, at least bytes
  // long; nullptr if it cannot be mapped.
  const void* map(int pid, int fd, std::uint64_t nonce, std::uint64_t index, std::size_t bytes);

 private:
  using Key = std::tuple<int, std::uint64_t, std::uint64_t>;
  struct Mapping {
    void* data;
    std::size_t bytes;
    std::uint64_t used;
  };
  std::mutex mutex_;
  std::map<Key, Mapping> mappings_;
  std::uint64_t uses_ = 0;
};

}  // namespace ferry::shim::peer

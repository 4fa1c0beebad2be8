// The engine transports through their interface (transport.h), between
// real processes: memory registered under a key, mapped by a peer, written
// and signalled into; out-of-range writes refused with nothing written.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "engine/transport/p2p_transport.h"
#include "engine/transport/shm_transport.h"
#include "process_ranks.h"

namespace ferry {
namespace {

constexpr std::size_t kLent = 1024;  // bytes each rank lends its peers
constexpr std::size_t kData = 8;     // offset of the data; the signal word is at 0

void expect_all_ok(const std::vector<std::string>& results) {
  for (std::size_t r = 0; r < results.size(); ++r) EXPECT_EQ(results[r], "") << "rank " << r;
}

// Every rank lends lent (host or device memory it registered), writes an odd
// number of bytes of its own pattern into each peer's, signals the peer, and
// checks what its peers wrote into its own.
std::string exchange(Transport& transport, Bootstrap& bootstrap, void* lent) {
  const int rank = bootstrap.rank(), n = bootstrap.size();
  MemoryKey mine{};
  if (!ok(transport.register_memory(lent, kLent, &mine))) return "register_memory failed";
  std::vector<MemoryKey> keys(n);
  if (!ok(bootstrap.allgather(&mine, keys.data(), sizeof(mine)))) return "allgather failed";
  const std::size_t bytes = 333;
  std::vector<unsigned char> pattern(bytes);
  for (std::size_t i = 0; i < bytes; ++i) pattern[i] = static_cast<unsigned char>(rank * 37 + i * 11 + 1);
  for (int peer = 0; peer < n; ++peer) {
    if (peer == rank) continue;
    Completion wrote, signalled;
    if (!ok(transport.post_write(peer, pattern.data(), keys[peer], kData + rank * bytes, bytes, &wrote)))
      return "post_write failed";
    if (!ok(transport.post_signal(peer, keys[peer], 0, 100 + rank, &signalled))) return "post_signal failed";
    bool done = false;
    if (!ok(transport.test(&signalled, &done)) || !done) return "signal not complete";
    // Beyond what the peer lent, or a signal word not 8-byte aligned: refused.
    Completion refused;
    if (transport.post_write(peer, pattern.data(), keys[peer], kLent - 10, 11, &refused) != Status::kInvalidArgument)
      return "a write past the lent bytes was not refused";
    if (transport.post_signal(peer, keys[peer], 4, 1, &refused) != Status::kInvalidArgument)
      return "an unaligned signal was not refused";
  }
  if (!ok(bootstrap.barrier())) return "barrier failed";
  std::vector<unsigned char> got(kLent);
  if (!ok(gpu::copy(got.data(), lent, kLent))) return "copy back failed";
  for (int peer = 0; peer < n; ++peer) {
    if (peer == rank) continue;
    for (std::size_t i = 0; i < bytes; ++i)
      if (got[kData + peer * bytes + i] != static_cast<unsigned char>(peer * 37 + i * 11 + 1))
        return "byte " + std::to_string(i) + " from rank " + std::to_string(peer) + " is wrong";
  }
  std::uint64_t signal = 0;
  std::memcpy(&signal, got.data(), sizeof(signal));
  if (n == 2 && signal != static_cast<std::uint64_t>(100 + (1 - rank))) return "wrong signal " + std::to_string(signal);
  if (got[kLent - 1] != 0xee) return "the refused write landed";
  // The peer's memory through a mapping, where the transport has one.
  for (int peer = 0; peer < n; ++peer) {
    if (peer == rank) continue;
    void* mapped = nullptr;
    if (!ok(transport.map(peer, keys[peer], &mapped))) return "map failed";
    unsigned char first = 0;
    if (!ok(gpu::copy(&first, static_cast<char*>(mapped) + kData + rank * bytes, 1))) return "read failed";
    transport.unmap(peer, keys[peer]);
    if (first != pattern[0]) return "the mapping does not show what was written";
  }
  return ok(bootstrap.barrier()) ? "" : "final barrier failed";
}

TEST(Transport, P2pWritesAndSignalsIntoPeersDeviceMemory) {
  expect_all_ok(testing::run_rank_processes(2, [](int, Bootstrap& bootstrap) -> std::string {
    gpu::Backend* device = gpu::emulated_backend();
    P2pTransport p2p;
    if (!ok(p2p.connect(bootstrap))) return "connect failed";
    void* buffer = nullptr;
    if (!ok(device->device_alloc(4096, &buffer))) return "device_alloc failed";
    std::vector<unsigned char> fill(kLent, 0xee);
    void* lent = static_cast<char*>(buffer) + 128;  // not the allocation's start
    if (!ok(gpu::copy(lent, fill.data(), kLent))) return "fill failed";
    std::string result = exchange(p2p, bootstrap, lent);
    if (!ok(device->device_free(buffer))) result += " (device_free failed)";
    return result;
  }));
}

TEST(Transport, ShmWritesAndSignalsIntoPeersSegments) {
  expect_all_ok(testing::run_rank_processes(3, [](int rank, Bootstrap& bootstrap) -> std::string {
    ShmTransport shm(nullptr, 8192);
    if (!ok(shm.connect(bootstrap))) return "connect failed";
    char* lent = shm.segments()->segment(rank) + 256;
    std::memset(lent, 0xee, kLent);
    MemoryKey key{};
    if (shm.register_memory(lent, 8192, &key) != Status::kInvalidArgument) return "a range past the segment was taken";
    int outside = 0;
    if (shm.register_memory(&outside, 4, &key) != Status::kInvalidArgument) return "memory outside the segment was taken";
    return exchange(shm, bootstrap, lent);
  }));
}

TEST(Transport, ShmMapsOnlyTheRankThatRegistered) {
  expect_all_ok(testing::run_rank_processes(2, [](int rank, Bootstrap& bootstrap) -> std::string {
    ShmTransport shm(nullptr, 4096);
    if (!ok(shm.connect(bootstrap))) return "connect failed";
    MemoryKey mine{};
    if (!ok(shm.register_memory(shm.segments()->segment(rank), 64, &mine))) return "register failed";
    void* mapped = nullptr;
    // This rank's key names this rank's segment, not the peer's.
    if (shm.map(1 - rank, mine, &mapped) != Status::kInvalidArgument) return "a key was mapped for the wrong rank";
    return ok(bootstrap.barrier()) ? "" : "barrier failed";
  }));
}

}  // namespace
}  // namespace ferry

#include "engine/pgas/symmetric_heap.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "engine/common/params.h"
#include "tests/unit/process_ranks.h"
#include "tests/unit/thread_bootstrap.h"

namespace ferry {
namespace {

constexpr std::size_t kChunk = 64 << 10;
constexpr std::size_t kPerRank = 1 << 20;

std::size_t round_up(std::size_t bytes, std::size_t unit) { return (bytes + unit - 1) / unit * unit; }

// The byte `writer` puts at j of object's copy on rank target.
unsigned char pattern(int object, int writer, int target, std::size_t j) {
  return static_cast<unsigned char>(object * 131 + writer * 31 + target * 7 + j * 13);
}

// Who writes byte j of an object of bytes among n ranks: rank w writes
// [bytes * w / n, bytes * (w + 1) / n).
int writer_of(std::size_t j, std::size_t bytes, int n) {
  int w = static_cast<int>(j * n / bytes);
  while (bytes * (w + 1) / n <= j) ++w;
  while (bytes * w / n > j) --w;
  return w;
}

// One rank's part of the whole heap scenario. Local checks record the first
// failure and go on, so every rank still makes every collective call; the
// collective calls' statuses are agreed, so leaving on one leaves on all.
std::string heap_scenario(int rank, Bootstrap& bootstrap, FdPassing method) {
  gpu::Backend* device = gpu::emulated_backend();
  const int n = bootstrap.size();
  std::string failure;
  auto check = [&](bool condition, const std::string& what) {
    if (!condition && failure.empty()) failure = "rank " + std::to_string(rank) + ": " + what;
  };
#define COLLECTIVE(call, expected)                                                                        \
  do {                                                                                                    \
    const Status status_ = (call);                                                                        \
    if (status_ != (expected)) return "rank " + std::to_string(rank) + ": " #call " gave " + status_name(status_); \
  } while (0)

  SymmetricHeap::Options options;
  options.chunk_bytes = kChunk;
  options.fd_passing = method;
  std::unique_ptr<SymmetricHeap> heap;
  COLLECTIVE(SymmetricHeap::create(bootstrap, device, kPerRank, &heap, options), Status::kOk);
  check(heap->stride() == kPerRank && heap->chunk_bytes() == kChunk && heap->mapped_bytes() == 0, "geometry");
  char* const base = static_cast<char*>(heap->base());

  // Objects of odd sizes, first fit from offset 0; the third and the fifth
  // cross chunk boundaries, and each that reaches a new chunk maps it.
  const std::vector<std::size_t> sizes = {1, 4097, 70001, 3, 200003};
  const std::vector<std::size_t> expected_offsets = {0, 256, 4608, 74752, 75008};
  std::vector<char*> objects;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    void* p = nullptr;
    COLLECTIVE(heap->allocate(sizes[i], &p), Status::kOk);
    objects.push_back(static_cast<char*>(p));
    const std::size_t offset = heap->offset_of(p);
    check(p == base + rank * heap->stride() + offset, "object " + std::to_string(i) + " is not in this rank's slot");
    check(offset == expected_offsets[i], "object " + std::to_string(i) + " at offset " + std::to_string(offset));
    check(heap->mapped_bytes() == round_up(offset + round_up(sizes[i], 256), kChunk),
          "mapped " + std::to_string(heap->mapped_bytes()) + " bytes after object " + std::to_string(i));
  }
  if (heap->fd_passing_used() == FdPassing::kAuto) check(false, "no descriptors passed");
  if (method != FdPassing::kAuto) check(heap->fd_passing_used() == method, "descriptors went another way");

  // The offsets, as every rank has them.
  std::vector<std::uint64_t> offsets, everyone(n * sizes.size());
  for (char* p : objects) offsets.push_back(heap->offset_of(p));
  COLLECTIVE(bootstrap.allgather(offsets.data(), everyone.data(), offsets.size() * sizeof(std::uint64_t)),
             Status::kOk);
  for (int r = 0; r < n; ++r)
    for (std::size_t i = 0; i < sizes.size(); ++i)
      check(everyone[r * sizes.size() + i] == offsets[i], "rank " + std::to_string(r) + " has object " +
                                                              std::to_string(i) + " elsewhere");

  // Every rank's copy of every object is device memory here; past the
  // mapped chunks is nothing.
  for (std::size_t i = 0; i < objects.size(); ++i) {
    for (int r = 0; r < n; ++r) {
      const gpu::PointerInfo info = gpu::classify(heap->peer_address(objects[i] + sizes[i] - 1, r));
      check(info.kind == gpu::MemoryKind::kDevice && info.owner == gpu::BackendKind::kEmulated && info.size == kChunk &&
                info.base % kChunk == reinterpret_cast<std::uintptr_t>(base) % kChunk && info.allocation_id != 0,
            "rank " + std::to_string(r) + "'s copy of object " + std::to_string(i) + " is not a device chunk here");
    }
  }
  check(gpu::classify(base + rank * heap->stride() + heap->mapped_bytes()).kind == gpu::MemoryKind::kHost,
        "unmapped heap reads as device memory");

  // Each rank writes its stripe of every object into every rank's copy...
  for (std::size_t i = 0; i < objects.size(); ++i) {
    const std::size_t lo = sizes[i] * rank / n, hi = sizes[i] * (rank + 1) / n;
    for (int t = 0; t < n; ++t) {
      std::vector<unsigned char> stripe(hi - lo);
      for (std::size_t j = lo; j < hi; ++j) stripe[j - lo] = pattern(static_cast<int>(i), rank, t, j);
      check(device->copy(static_cast<char*>(heap->peer_address(objects[i], t)) + lo, stripe.data(), stripe.size()) ==
                Status::kOk,
            "copy into rank " + std::to_string(t));
    }
  }
  COLLECTIVE(bootstrap.barrier(), Status::kOk);
  // ...and reads back its own copy and the next rank's, whole (one copy
  // across chunk boundaries).
  for (std::size_t i = 0; i < objects.size(); ++i) {
    for (int t : {rank, (rank + 1) % n}) {
      std::vector<unsigned char> seen(sizes[i]);
      check(device->copy(seen.data(), heap->peer_address(objects[i], t), sizes[i]) == Status::kOk, "copy out");
      for (std::size_t j = 0; j < sizes[i]; ++j) {
        if (seen[j] != pattern(static_cast<int>(i), writer_of(j, sizes[i], n), t, j)) {
          check(false, "object " + std::to_string(i) + " on rank " + std::to_string(t) + ": wrong byte at " +
                           std::to_string(j));
          break;
        }
      }
    }
  }
  COLLECTIVE(bootstrap.barrier(), Status::kOk);

  // Freed space is reused, and a hole merges with the one before it.
  void* p = nullptr;
  COLLECTIVE(heap->free(objects[1]), Status::kOk);
  COLLECTIVE(heap->allocate(4000, &p), Status::kOk);
  check(heap->offset_of(p) == 256, "the freed hole is not reused");
  COLLECTIVE(heap->free(objects[0]), Status::kOk);
  COLLECTIVE(heap->free(p), Status::kOk);
  COLLECTIVE(heap->allocate(4500, &p), Status::kOk);
  check(heap->offset_of(p) == 0, "a hole did not merge with the one before it");

  // Out of room: every rank says so, and nothing changes.
  const std::size_t mapped = heap->mapped_bytes();
  void* none = &failure;
  COLLECTIVE(heap->allocate(kPerRank + 1, &none), Status::kOutOfMemory);
  check(none == nullptr, "a failed allocate returned a pointer");
  COLLECTIVE(heap->allocate(900 << 10, &none), Status::kOutOfMemory);
  check(heap->mapped_bytes() == mapped, "a failed allocate mapped memory");
  // What is left is usable, to the end of the slot.
  COLLECTIVE(heap->allocate(700 << 10, &p), Status::kOk);
  check(heap->offset_of(p) == 275200 && heap->mapped_bytes() == kPerRank, "the tail of the heap");
  std::vector<unsigned char> last(700 << 10, static_cast<unsigned char>(rank + 1)), back(last.size());
  check(device->copy(p, last.data(), last.size()) == Status::kOk &&
            device->copy(back.data(), p, back.size()) == Status::kOk && back == last,
        "the last chunk");

  // Ranks that disagree are all told, and nothing changes.
  if (n > 1) {
    COLLECTIVE(heap->allocate(rank == 0 ? 100 : 200, &none), Status::kInvalidArgument);
    COLLECTIVE(heap->free(rank == 0 ? objects[2] : objects[3]), Status::kInvalidArgument);
    // The next rank's copy is not this rank's to free.
    COLLECTIVE(heap->free(heap->peer_address(objects[2], (rank + 1) % n)), Status::kInvalidArgument);
  }
  COLLECTIVE(heap->free(objects[2] + 1), Status::kInvalidArgument);
  COLLECTIVE(heap->free(nullptr), Status::kOk);
  std::vector<unsigned char> seen(sizes[2]);
  check(device->copy(seen.data(), objects[2], sizes[2]) == Status::kOk && seen[0] == pattern(2, 0, rank, 0),
        "object 2 changed");

  check(heap->peer_address(&failure, 0) == nullptr, "a host address has a peer address");
  check(heap->peer_address(objects[2], n) == nullptr && heap->peer_address(objects[2], -1) == nullptr,
        "a rank that is not there");
  check(heap->peer_address(heap->peer_address(objects[4] + 17, (rank + 1) % n), rank) == objects[4] + 17,
        "peer_address from another rank's copy");

  // A hole merges with the one after it.
  COLLECTIVE(heap->free(objects[3]), Status::kOk);
  COLLECTIVE(heap->free(objects[2]), Status::kOk);
  COLLECTIVE(heap->allocate(70400, &p), Status::kOk);
  check(heap->offset_of(p) == 4608, "a hole did not merge with the one after it");

  heap.reset();
  check(gpu::classify(objects[2]).kind == gpu::MemoryKind::kHost, "destroyed heap still reads as device memory");
  COLLECTIVE(bootstrap.barrier(), Status::kOk);
#undef COLLECTIVE
  return failure;
}

void expect_all_ok(const std::vector<std::string>& results) {
  for (std::size_t r = 0; r < results.size(); ++r) EXPECT_EQ(results[r], "") << "rank " << r;
}

std::vector<std::string> heap_on_threads(int n, FdPassing method) {
  std::vector<std::string> results(n);
  testing::run_ranks(n, [&](int rank, std::unique_ptr<Bootstrap> bootstrap) {
    results[rank] = heap_scenario(rank, *bootstrap, method);
  });
  return results;
}

TEST(SymmetricHeap, RanksAsThreads) { expect_all_ok(heap_on_threads(3, FdPassing::kAuto)); }

TEST(SymmetricHeap, OneRank) { expect_all_ok(heap_on_threads(1, FdPassing::kSocket)); }

TEST(SymmetricHeap, RanksAsProcesses) {
  expect_all_ok(testing::run_rank_processes(3, [](int rank, Bootstrap& bootstrap) {
    return heap_scenario(rank, bootstrap, FdPassing::kAuto);
  }));
}

TEST(SymmetricHeap, RanksAsProcessesOverSockets) {
  expect_all_ok(testing::run_rank_processes(2, [](int rank, Bootstrap& bootstrap) {
    return heap_scenario(rank, bootstrap, FdPassing::kSocket);
  }));
}

// Device memory handed to host code faults, as a GPU pointer would.
TEST(SymmetricHeapDeathTest, HostCodeTouchingHeapMemoryFaults) {
  testing::ThreadGroup group(1);
  testing::ThreadBootstrap bootstrap(&group, 0);
  std::unique_ptr<SymmetricHeap> heap;
  ASSERT_EQ(SymmetricHeap::create(bootstrap, gpu::emulated_backend(), kPerRank, &heap), Status::kOk);
  void* p = nullptr;
  ASSERT_EQ(heap->allocate(64, &p), Status::kOk);
  ASSERT_NE(p, nullptr);
  EXPECT_NE(gpu::emulated_backend()->host_view(p), p);
  EXPECT_DEATH(*static_cast<volatile char*>(p) = 1, "");
  EXPECT_EQ(heap->free(p), Status::kOk);
}

// Run by ctest with FERRY_EMULATED_MAX_BYTES=196608 (three chunks per
// process): growth that one rank cannot back fails on every rank, and the
// rank that could gives back what it created.
TEST(SymmetricHeapDeviceLimit, FailedGrowthChangesNoRank) {
  if (params().emulated_max_bytes != static_cast<std::int64_t>(3 * kChunk))
    GTEST_SKIP() << "needs FERRY_EMULATED_MAX_BYTES=" << 3 * kChunk << " (ctest symmetric_heap.device_memory_limit)";
  expect_all_ok(testing::run_rank_processes(2, [](int rank, Bootstrap& bootstrap) -> std::string {
    gpu::Backend* device = gpu::emulated_backend();
    std::string failure;
    auto check = [&](bool condition, const std::string& what) {
      if (!condition && failure.empty()) failure = what;
    };
    SymmetricHeap::Options options;
    options.chunk_bytes = kChunk;
    std::unique_ptr<SymmetricHeap> heap;
    if (SymmetricHeap::create(bootstrap, device, kPerRank, &heap, options) != Status::kOk) return "create";
    void* p = nullptr;
    check(heap->allocate(32 << 10, &p) == Status::kOk, "the first chunk");  // one of three on each rank
    // Rank 1 takes one more for itself: two more chunks fit on rank 0, not on rank 1.
    void* own = nullptr;
    if (rank == 1) check(device->device_alloc(kChunk, &own) == Status::kOk, "rank 1's own buffer");
    check(heap->allocate(160 << 10, &p) == Status::kOutOfMemory, "growth that rank 1 cannot back");
    check(heap->mapped_bytes() == kChunk, "failed growth left chunks mapped");
    // Rank 0 gave back the two it created: they fit again.
    void* buffer = nullptr;
    if (rank == 0) {
      check(device->device_alloc(2 * kChunk, &buffer) == Status::kOk, "rolled-back chunks were not given back");
      EXPECT_TRUE(ferry::ok(device->device_free(buffer)));
    }
    check(heap->allocate(16 << 10, &p) == Status::kOk && heap->offset_of(p) == (32 << 10), "room in the chunk");
    if (rank == 1) EXPECT_TRUE(ferry::ok(device->device_free(own)));
    check(heap->allocate(140 << 10, &p) == Status::kOk && heap->mapped_bytes() == 3 * kChunk, "growth that fits");
    heap.reset();
    check(device->device_alloc(3 * kChunk, &buffer) == Status::kOk, "a destroyed heap's chunks were not given back");
    EXPECT_TRUE(ferry::ok(device->device_free(buffer)));
    check(bootstrap.barrier() == Status::kOk, "barrier");
    return failure;
  }));
}

}  // namespace
}  // namespace ferry

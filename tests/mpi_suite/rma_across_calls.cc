// The one-sided calls on a device window across machines (virtual nodes),
// under either carrier (FERRY_RMA_ACROSS: the real MPI's window over host
// copies, or the GDA queue), against host references: fetch-and-op from
// every rank (old values all distinct), compare-and-swap (one winner),
// get-accumulate with MPI_MAX, accumulate with MPI_MINLOC on MPI_2INT,
// accumulate with MPI_BXOR through a strided
// target type, Rput and Rget completed by MPI_Wait, and a put outside any
// epoch (MPI_ERR_RMA_SYNC). With the queue, a window also mixes the two
// kinds of traffic: what a kernel's queue put into another rank's memory,
// MPI_Get sees under a lock without the target synchronizing.
#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "ferry/device_handle.h"
#include "ferry/gda_ring.h"
#include "suite.h"

namespace {

using namespace suite;
namespace gda = ferry::gda;

int g_rank = 0, g_size = 0;

// Window layout, in int64 slots.
constexpr int kCounter = 0;    // fetch-and-op target at rank 0
constexpr int kLock = 1;       // compare-and-swap target at rank 0
constexpr int kMax = 8;        // get-accumulate (MPI_MAX, doubles) at rank 0
constexpr int kMaxCount = 37;
constexpr int kBits = 64;      // accumulate (MPI_BXOR, uint16 strided) at every rank
constexpr int kPairs = 200;    // accumulate (MPI_MINLOC, MPI_2INT) at rank 0
constexpr int kPairCount = 9;
constexpr int kBitsBlocks = 41;
constexpr int kPuts = 256;     // Rput/Rget area
constexpr int kPutCount = 333;
constexpr int kMixed = 640;    // the queue put of the mixed case
constexpr int kSlots = 1024;

bool queue_carrier() {
  const char* carrier = std::getenv("FERRY_RMA_ACROSS");
  return carrier && std::strcmp(carrier, "queue") == 0;
}

MPI_Win allocate(void** base) {
  MPI_Info info;
  MPI_Info_create(&info);
  MPI_Info_set(info, "mpi_memory_alloc_kinds", "cuda:device");
  MPI_Win win;
  check_mpi(MPI_Win_allocate(kSlots * sizeof(int64_t), sizeof(int64_t), info, MPI_COMM_WORLD, base, &win),
            Case{"MPI_Win_allocate", "MPI_INT64_T"});
  MPI_Info_free(&info);
  const std::vector<char> zeros(kSlots * sizeof(int64_t), 0);
  suite_memcpy(*base, zeros.data(), zeros.size());
  MPI_Barrier(MPI_COMM_WORLD);
  return win;
}

void atomics(MPI_Win win, void* base) {
  const uint64_t id = next_case_id();
  const Case what{"lock_all: Fetch_and_op, Compare_and_swap, Get_accumulate (MPI_MAX), Accumulate (MPI_MINLOC)",
                  "MPI_INT64_T"};
  constexpr int kFetches = 25;
  check_mpi(MPI_Win_lock_all(0, win), what);
  Buffer one = make_buffer(std::vector<int64_t>{1}, Memory::device);
  std::vector<int64_t> olds;
  for (int i = 0; i < kFetches; ++i) {
    Buffer old = make_buffer(std::vector<int64_t>{-1}, Memory::device);
    check_mpi(MPI_Fetch_and_op(one.data(), old.data(), MPI_INT64_T, 0, kCounter, MPI_SUM, win), what);
    check_mpi(MPI_Win_flush(0, win), what);
    olds.push_back(read_back<int64_t>(old, 1)[0]);
  }
  Buffer mine = make_buffer(std::vector<int64_t>{g_rank + 100}, Memory::device);
  Buffer zero = make_buffer(std::vector<int64_t>{0}, Memory::host);
  Buffer swapped = make_buffer(std::vector<int64_t>{-1}, Memory::device);
  check_mpi(MPI_Compare_and_swap(mine.data(), zero.data(), swapped.data(), MPI_INT64_T, 0, kLock, win), what);
  const std::vector<double> values = random_values<double>(kMaxCount, id, g_rank);
  Buffer maxes = make_buffer(values, Memory::device);
  Buffer before = make_buffer(poisoned<double>(kMaxCount), Memory::device);
  check_mpi(MPI_Get_accumulate(maxes.data(), kMaxCount, MPI_DOUBLE, before.data(), kMaxCount, MPI_DOUBLE, 0, kMax,
                               kMaxCount, MPI_DOUBLE, MPI_MAX, win),
            what);
  // A pair type: the real MPI's reduction where the engine has none.
  std::vector<int32_t> pairs(2 * kPairCount);
  const std::vector<int32_t> keys = random_values<int32_t>(kPairCount, id + 1, g_rank, Values::small);
  for (int i = 0; i < kPairCount; ++i) {
    pairs[2 * i] = keys[i];
    pairs[2 * i + 1] = g_rank;
  }
  Buffer located = make_buffer(pairs, Memory::device);
  check_mpi(MPI_Accumulate(located.data(), kPairCount, MPI_2INT, 0, kPairs, kPairCount, MPI_2INT, MPI_MINLOC, win),
            what);
  check_mpi(MPI_Win_unlock_all(win), what);

  std::vector<int64_t> all(static_cast<size_t>(kFetches) * g_size);
  MPI_Allgather(olds.data(), kFetches, MPI_INT64_T, all.data(), kFetches, MPI_INT64_T, MPI_COMM_WORLD);
  std::sort(all.begin(), all.end());
  for (size_t i = 0; i < all.size(); ++i)
    if (all[i] != static_cast<int64_t>(i)) {
      expect(false, what, "fetch-and-op old values are not 0 .. n-1 once each: " + std::to_string(all[i]) +
                              " at " + std::to_string(i));
      break;
    }
  const int64_t won = read_back<int64_t>(swapped, 1)[0] == 0 ? 1 : 0;
  int64_t winners = 0;
  MPI_Allreduce(&won, &winners, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
  expect(winners == 1, what, std::to_string(winners) + " compare-and-swaps won, expected one");
  // What a get-accumulate replaced: the zero the window began with, or
  // the maximum of some ranks' values, so one of them.
  const std::vector<double> replaced = read_back<double>(before, kMaxCount);
  for (int i = 0; i < kMaxCount; ++i) {
    bool known = replaced[i] == 0.0;
    for (int r = 0; r < g_size && !known; ++r) known = replaced[i] == random_values<double>(kMaxCount, id, r)[i];
    expect(known, what, "get-accumulate returned " + std::to_string(replaced[i]) + " at " + std::to_string(i));
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (g_rank == 0) {
    std::vector<int64_t> words(kSlots);
    suite_memcpy(words.data(), base, words.size() * sizeof(int64_t));
    expect(words[kCounter] == static_cast<int64_t>(kFetches) * g_size, what,
           "counter " + std::to_string(words[kCounter]));
    expect(words[kLock] >= 100 && words[kLock] < 100 + g_size, what, "lock word " + std::to_string(words[kLock]));
    std::vector<double> expected(kMaxCount, 0.0);
    for (int r = 0; r < g_size; ++r) {
      const std::vector<double> theirs = random_values<double>(kMaxCount, id, r);
      for (int i = 0; i < kMaxCount; ++i) expected[i] = std::max(expected[i], theirs[i]);
    }
    std::vector<double> got(kMaxCount);
    std::memcpy(got.data(), &words[kMax], kMaxCount * sizeof(double));
    expect_values(what, expected, got);
    // MPI_MINLOC over the zeros the window began with and every rank's pairs.
    std::vector<int32_t> least(2 * kPairCount, 0), located_here(2 * kPairCount);
    for (int r = 0; r < g_size; ++r) {
      const std::vector<int32_t> theirs = random_values<int32_t>(kPairCount, id + 1, r, Values::small);
      for (int i = 0; i < kPairCount; ++i)
        if (theirs[i] < least[2 * i] || (theirs[i] == least[2 * i] && r < least[2 * i + 1])) {
          least[2 * i] = theirs[i];
          least[2 * i + 1] = r;
        }
    }
    std::memcpy(located_here.data(), &words[kPairs], located_here.size() * sizeof(int32_t));
    expect_values(what, least, located_here);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

// Every rank XORs its bits into every rank's strided uint16 elements.
void strided_accumulate(MPI_Win win, void* base) {
  const uint64_t id = next_case_id();
  const Case what{"fence: Accumulate (MPI_BXOR) through a vector target type", "MPI_UINT16_T"};
  MPI_Datatype strided;
  MPI_Type_vector(kBitsBlocks, 3, 5, MPI_UINT16_T, &strided);
  MPI_Type_commit(&strided);
  const std::vector<uint16_t> bits = random_values<uint16_t>(3 * kBitsBlocks, id, g_rank, Values::bits);
  Buffer mine = make_buffer(bits, Memory::device);
  check_mpi(MPI_Win_fence(0, win), what);
  for (int target = 0; target < g_size; ++target)
    check_mpi(MPI_Accumulate(mine.data(), 3 * kBitsBlocks, MPI_UINT16_T, target, kBits, 1, strided, MPI_BXOR, win),
              what);
  check_mpi(MPI_Win_fence(0, win), what);
  std::vector<uint16_t> expected(5 * kBitsBlocks, 0), got(5 * kBitsBlocks);
  for (int r = 0; r < g_size; ++r) {
    const std::vector<uint16_t> theirs = random_values<uint16_t>(3 * kBitsBlocks, id, r, Values::bits);
    for (int b = 0; b < kBitsBlocks; ++b)
      for (int k = 0; k < 3; ++k) expected[5 * b + k] ^= theirs[3 * b + k];
  }
  suite_memcpy(got.data(), static_cast<char*>(base) + kBits * sizeof(int64_t), got.size() * sizeof(uint16_t));
  expect_values(what, expected, got);
  MPI_Type_free(&strided);
}

// Rput into the next rank, Rget back from it, each completed by MPI_Wait.
void request_calls(MPI_Win win) {
  const uint64_t id = next_case_id();
  const Case what{"lock: Rput, Rget, MPI_Wait", "MPI_INT32_T", "", kPutCount};
  const int next = (g_rank + 1) % g_size;
  const std::vector<int32_t> values = random_values<int32_t>(kPutCount, id, g_rank);
  Buffer mine = make_buffer(values, Memory::device, 4);
  Buffer got = make_buffer(poisoned<int32_t>(kPutCount), Memory::device, 12);
  MPI_Request request;
  check_mpi(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, next, 0, win), what);
  check_mpi(MPI_Rput(mine.data(), kPutCount, MPI_INT32_T, next, kPuts * 2 + 1, kPutCount, MPI_INT32_T, win,
                     &request),
            what);
  check_mpi(MPI_Wait(&request, MPI_STATUS_IGNORE), what);
  check_mpi(MPI_Win_flush(next, win), what);
  check_mpi(MPI_Rget(got.data(), kPutCount, MPI_INT32_T, next, kPuts * 2 + 1, kPutCount, MPI_INT32_T, win,
                     &request),
            what);
  check_mpi(MPI_Wait(&request, MPI_STATUS_IGNORE), what);
  check_mpi(MPI_Win_unlock(next, win), what);
  expect_values(what, values, read_back<int32_t>(got, kPutCount));
  MPI_Barrier(MPI_COMM_WORLD);
}

void outside_any_epoch(MPI_Win win) {
  const Case what{"MPI_Put outside any epoch", "MPI_INT64_T"};
  MPI_Win_set_errhandler(win, MPI_ERRORS_RETURN);
  Buffer mine = make_buffer(std::vector<int64_t>{7}, Memory::device);
  const int rc = MPI_Put(mine.data(), 1, MPI_INT64_T, (g_rank + 1) % g_size, kPuts, 1, MPI_INT64_T, win);
  int error_class = MPI_SUCCESS;
  MPI_Error_class(rc, &error_class);
  expect(error_class == MPI_ERR_RMA_SYNC, what, "returned class " + std::to_string(error_class));
  MPI_Win_set_errhandler(win, MPI_ERRORS_ARE_FATAL);
}

// Rank 0 puts into rank 1's memory through the device handle's queue (as a
// kernel would), then reads it back with MPI_Get under a shared lock; rank 1
// makes no call on the window meanwhile. On the emulated device only, where
// the queue's producers are host threads (a GPU's counts its tickets in
// device memory; tests/gpu posts from kernels).
void mixed_traffic(MPI_Win win) {
  using HandleFunction = int (*)(MPI_Win, ferry_window_device_t*);
  auto get_handle = reinterpret_cast<HandleFunction>(dlsym(RTLD_DEFAULT, "ferry_win_device_handle"));
  const uint64_t id = next_case_id();
  const Case what{"a kernel's queue put, then MPI_Get under a lock", "MPI_INT64_T", "", 100};
  if (!get_handle) return;
  ferry_window_device_t h{};
  check_mpi(get_handle(win, &h), what);
  int go = 0;
  if (g_rank == 0) {
    gda::GdaRing ring{};
    suite_memcpy(&ring, h.gda_ring, sizeof ring);
    const std::vector<int64_t> values = random_values<int64_t>(100, id, 0);
    Buffer source = make_buffer(values, Memory::device);
    gda::GdaDescriptor d{};
    d.op = static_cast<std::uint8_t>(gda::GdaOp::kPut);
    d.window = h.gda_window;
    d.target = 1;
    d.source = reinterpret_cast<std::uintptr_t>(source.data());
    d.offset = kMixed * sizeof(int64_t);
    d.bytes = values.size() * sizeof(int64_t);
    expect(gda::wait_completed(ring, gda::post(ring, d)), what, "the queue put did not complete");
    Buffer got = make_buffer(poisoned<int64_t>(100), Memory::device);
    check_mpi(MPI_Win_lock(MPI_LOCK_SHARED, 1, 0, win), what);
    check_mpi(MPI_Get(got.data(), 100, MPI_INT64_T, 1, kMixed, 100, MPI_INT64_T, win), what);
    check_mpi(MPI_Win_unlock(1, win), what);
    expect_values(what, values, read_back<int64_t>(got, 100));
    MPI_Send(&go, 1, MPI_INT, 1, 0, MPI_COMM_WORLD);
  } else if (g_rank == 1) {
    MPI_Recv(&go, 1, MPI_INT, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

}  // namespace

int main(int argc, char** argv) {
  init(&argc, &argv);
  g_rank = world_rank();
  g_size = world_size();
  void* base = nullptr;
  MPI_Win win = allocate(&base);
  atomics(win, base);
  strided_accumulate(win, base);
  request_calls(win);
  outside_any_epoch(win);
  const char* device = std::getenv("FERRY_DEVICE");
  if (queue_carrier() && device && std::strcmp(device, "emulated") == 0) mixed_traffic(win);
  MPI_Win_free(&win);
  return finish();
}

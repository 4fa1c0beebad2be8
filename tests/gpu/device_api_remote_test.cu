// The device API (ferry/device.h) on a window whose ranks are on different
// machines (virtual nodes, virtual_node.sh with one rank a node): kernels
// reach the other ranks through the proxy GDA. A ring of put_block + signal
// + wait_until, put_warp with signal adds, get_block from the left
// neighbour, p then quiet(w), 64-bit atomic adds from every thread of every
// rank to rank 0, and barrier_block rounds; then the calls that wait for
// an answer: g of what p wrote, fetch_add from every thread (old values all
// distinct), compare_swap (one rank wins), and ll::put/ll::wait with a
// warp's lanes; then puts whose sources the proxy cannot read (shared
// memory, a thread's locals); every result checked on the host. Prints
// "No Errors" on success.
#include <cuda_runtime.h>
#include <mpi.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "ferry/device.h"
#include "ferry/ferry.h"
#include "mpi_gpu_test.h"

namespace fd = ferry::device;

namespace {

using mpi_gpu_test::check;
using mpi_gpu_test::cuda;

// Window layout (bytes).
constexpr std::size_t kData = 1 << 18;                 // ring data (put_block at offset 1)
constexpr std::size_t kWarpData = kData;               // put_warp's (at offset kWarpData + 3)
constexpr std::size_t kSignal = 2 * kData + 64;        // ring signal word
constexpr std::size_t kWarpSignal = kSignal + 64;      // put_warp's signal adds
constexpr std::size_t kCounter = kWarpSignal + 64;     // atomic adds at rank 0
constexpr std::size_t kRounds = kCounter + 64;         // barrier rounds' words
constexpr std::size_t kScalars = kRounds + 64;         // p's
constexpr std::size_t kFetchCounter = kScalars + 64 * sizeof(int);  // fetch_adds at rank 0
constexpr std::size_t kLock = kFetchCounter + 64;                     // compare_swap at rank 0
constexpr std::size_t kMessage = kLock + 64;                          // ll messages from the left
constexpr std::size_t kMessageBytes = 1001;                           // odd
constexpr std::size_t kFromLocal = kMessage + (kMessageBytes + 3) / 4 * 8;  // put of a thread's locals
constexpr std::size_t kFromLocalBytes = 13;
constexpr std::size_t kLocalSignal = kFromLocal + 64;     // put_signal of locals: its word
constexpr std::size_t kLocalSignalData = kLocalSignal + 64;  // and its bytes
constexpr std::size_t kLocalSignalBytes = 5;
constexpr std::size_t kFromShared = kLocalSignalData + 64;   // put_block of shared memory
constexpr std::size_t kFromSharedBytes = 777;
constexpr std::size_t kLocalMessage = kFromShared + 1024;    // ll::put of a local 8-byte value
constexpr std::size_t kWindowBytes = kLocalMessage + 64;
constexpr std::size_t kBytes = 100003;                 // odd

__host__ __device__ unsigned char pattern(int rank, std::size_t i) {
  return static_cast<unsigned char>(rank * 29 + i * 5 + (i >> 8));
}

__global__ void fill(unsigned char* data, std::size_t bytes, int rank) {
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < bytes; i += gridDim.x * blockDim.x)
    data[i] = pattern(rank, i);
}

__global__ void ring_put_signal(ferry_window_device_t w, const unsigned char* src, unsigned long long round) {
  const int right = (w.rank + 1) % w.size;
  fd::put_block(w, right, 1, src, kBytes);
  if (threadIdx.x == 0) {
    fd::signal(w, right, kSignal, round, fd::SignalOp::kSet);
    fd::wait_until(w, kSignal, fd::Compare::kGe, round);
  }
}

__global__ void warp_put(ferry_window_device_t w, const unsigned char* src) {
  const int right = (w.rank + 1) % w.size;
  fd::put_warp(w, right, kWarpData + 3, src, kBytes);
  if (threadIdx.x == 0) fd::signal(w, right, kWarpSignal, 1, fd::SignalOp::kAdd);
}

// Reads back what this rank put into the right neighbour's window.
__global__ void get_back(ferry_window_device_t w, unsigned char* dst) {
  fd::get_block(w, (w.rank + 1) % w.size, 1, dst, kBytes);
}

__global__ void adds(ferry_window_device_t w, int per_thread) {
  for (int i = 0; i < per_thread; ++i) fd::atomic_add<unsigned long long>(w, 0, kCounter, 1ULL);
  fd::quiet(w);
}

__global__ void scalars(ferry_window_device_t w) {
  const int right = (w.rank + 1) % w.size;
  for (int k = threadIdx.x; k < 64; k += blockDim.x) fd::p<int>(w, right, kScalars + k * sizeof(int), w.rank * 100 + k);
  fd::quiet(w);
}

// p to the right neighbour, barrier, read what the left neighbour wrote.
__global__ void barrier_rounds(ferry_window_device_t w, int rounds, int* wrong) {
  const int right = (w.rank + 1) % w.size, left = (w.rank + w.size - 1) % w.size;
  const auto* mine = reinterpret_cast<const volatile unsigned long long*>(static_cast<char*>(w.peers[w.rank]) + kRounds);
  for (int r = 1; r <= rounds; ++r) {
    if (threadIdx.x == 0) fd::p<unsigned long long>(w, right, kRounds, r * 1000ULL + w.rank);
    fd::barrier_block(w);
    if (threadIdx.x == 0 && *mine != r * 1000ULL + left) ++*wrong;
    fd::barrier_block(w);
  }
}

// g reads back what scalars() put into the right neighbour's window.
__global__ void read_scalars(ferry_window_device_t w, int* out) {
  const int right = (w.rank + 1) % w.size;
  for (int k = threadIdx.x; k < 64; k += blockDim.x) out[k] = fd::g<int>(w, right, kScalars + k * sizeof(int));
}

__global__ void fetch_adds(ferry_window_device_t w, unsigned long long* olds) {
  const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  olds[i] = fd::fetch_add<unsigned long long>(w, 0, kFetchCounter, 1ULL);
}

__global__ void take_lock(ferry_window_device_t w, unsigned long long* old) {
  *old = fd::compare_swap<unsigned long long>(w, 0, kLock, 0ULL, w.rank + 1ULL);
}

// A warp sends kMessageBytes to the right neighbour and receives the left's.
__global__ void ll_exchange(ferry_window_device_t w, const unsigned char* src, unsigned char* dst, unsigned flag) {
  const int right = (w.rank + 1) % w.size;
  fd::ll::put(w, right, kMessage, src, kMessageBytes, flag, threadIdx.x, blockDim.x);
  fd::ll::wait(w, kMessage, dst, kMessageBytes, flag, threadIdx.x, blockDim.x);
}

// Sources the proxy cannot read (shared memory, a thread's locals), to the
// right neighbour on another machine.
__global__ void from_shared_and_local(ferry_window_device_t w, unsigned flag) {
  const int right = (w.rank + 1) % w.size;
  __shared__ unsigned char staged[kFromSharedBytes];
  for (std::size_t i = threadIdx.x; i < kFromSharedBytes; i += blockDim.x) staged[i] = pattern(w.rank, i + 11);
  fd::put_block(w, right, kFromShared, staged, kFromSharedBytes);
  if (threadIdx.x != 0) return;
  unsigned char mine[kFromLocalBytes], five[kLocalSignalBytes];
  for (std::size_t i = 0; i < kFromLocalBytes; ++i) mine[i] = pattern(w.rank, i + 3);
  for (std::size_t i = 0; i < kLocalSignalBytes; ++i) five[i] = pattern(w.rank, i + 5);
  fd::put(w, right, kFromLocal, mine, kFromLocalBytes);
  fd::put_signal(w, right, kLocalSignalData, five, kLocalSignalBytes, kLocalSignal, 1);
  const unsigned long long value = 0x0123456789abcdefULL ^ static_cast<unsigned long long>(w.rank);
  fd::ll::put(w, right, kLocalMessage, &value, sizeof value, flag);
  fd::quiet(w);
}

// Waits for the kernels queued so far on the legacy stream, at most 30 s;
// past that, reports the queue's counters (pinned host words, read before
// any CUDA call that might itself wait) and aborts the job: a hang becomes
// a failure that says where the queue stopped.
void finish(const ferry::gda::GdaRing& ring, const char* what) {
  cudaEvent_t done;
  cuda(cudaEventCreateWithFlags(&done, cudaEventDisableTiming), "cudaEventCreate");
  cuda(cudaEventRecord(done, cudaStreamLegacy), "cudaEventRecord");
  const double deadline = MPI_Wtime() + 30;
  cudaError_t state = cudaErrorNotReady;
  while ((state = cudaEventQuery(done)) == cudaErrorNotReady && MPI_Wtime() < deadline) {
  }
  if (state == cudaErrorNotReady) {
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    std::fprintf(stderr, "FAIL rank %d: %s still running after 30 s: queue consumed %llu, started %llu, completed %llu%s\n",
                 rank, what, static_cast<unsigned long long>(__atomic_load_n(&ring.words->consumed, __ATOMIC_ACQUIRE)),
                 static_cast<unsigned long long>(__atomic_load_n(&ring.words->started, __ATOMIC_ACQUIRE)),
                 static_cast<unsigned long long>(__atomic_load_n(&ring.words->completed, __ATOMIC_ACQUIRE)),
                 __atomic_load_n(&ring.words->failed, __ATOMIC_ACQUIRE) ? ", failed" : "");
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  cuda(state, what);
  cuda(cudaEventDestroy(done), "cudaEventDestroy");
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, ranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  MPI_Info info;
  MPI_Info_create(&info);
  MPI_Info_set(info, "mpi_memory_alloc_kinds", "cuda:device");
  unsigned char* base = nullptr;
  MPI_Win win;
  check(MPI_Win_allocate(kWindowBytes, 1, info, MPI_COMM_WORLD, &base, &win) == MPI_SUCCESS, "MPI_Win_allocate");
  MPI_Info_free(&info);
  cuda(cudaMemset(base, 0, kWindowBytes), "zero the window");
  cuda(cudaDeviceSynchronize(), "zero the window");
  MPI_Barrier(MPI_COMM_WORLD);
  ferry_window_device_t w{};
  check(ferry_win_device_handle(win, &w) == MPI_SUCCESS, "ferry_win_device_handle");
  check(w.gda_ring != nullptr, "the handle has no GDA queue (are the ranks on different virtual nodes?)");
  if (w.gda_ring == nullptr) MPI_Abort(MPI_COMM_WORLD, 1);
  ferry::gda::GdaRing ring{};
  cuda(cudaMemcpy(&ring, w.gda_ring, sizeof ring, cudaMemcpyDeviceToHost), "the queue's ring");

  unsigned char* src = nullptr;
  int* wrong = nullptr;
  cuda(cudaMalloc(&src, kBytes), "cudaMalloc");
  cuda(cudaMalloc(&wrong, sizeof(int)), "cudaMalloc");
  unsigned char* fetched = nullptr;
  cuda(cudaMalloc(&fetched, kBytes), "cudaMalloc");
  cuda(cudaMemset(wrong, 0, sizeof(int)), "cudaMemset");
  fill<<<64, 256>>>(src, kBytes, rank);
  cuda(cudaDeviceSynchronize(), "fill");
  const int left = (rank + ranks - 1) % ranks;

  for (unsigned long long round = 1; round <= 3; ++round) ring_put_signal<<<1, 256>>>(w, src, round);
  warp_put<<<1, 32>>>(w, src);
  constexpr int kAddBlocks = 2, kAddThreads = 64, kPerThread = 4;
  adds<<<kAddBlocks, kAddThreads>>>(w, kPerThread);
  scalars<<<1, 64>>>(w);
  finish(ring, "puts, signals, adds");
  barrier_rounds<<<1, 128>>>(w, 5, wrong);
  finish(ring, "barrier rounds");
  get_back<<<1, 64>>>(w, fetched);
  finish(ring, "get_block");
  std::vector<unsigned char> back(kBytes);
  cuda(cudaMemcpy(back.data(), fetched, kBytes, cudaMemcpyDeviceToHost), "read the get");
  bool back_ok = true;
  for (std::size_t i = 0; i < kBytes; ++i) back_ok = back_ok && back[i] == pattern(rank, i);
  check(back_ok, "get_block from the right neighbour returns what this rank put there");
  cudaFree(fetched);
  MPI_Barrier(MPI_COMM_WORLD);

  std::vector<unsigned char> window(kWindowBytes);
  cuda(cudaMemcpy(window.data(), base, kWindowBytes, cudaMemcpyDeviceToHost), "read the window");
  auto word = [&](std::size_t offset) { return *reinterpret_cast<const unsigned long long*>(&window[offset]); };
  bool ring_ok = true, warp_ok = true;
  for (std::size_t i = 0; i < kBytes && i + 1 < kWarpData + 3; ++i) ring_ok = ring_ok && window[1 + i] == pattern(left, i);
  for (std::size_t i = 0; i < kBytes; ++i) warp_ok = warp_ok && window[kWarpData + 3 + i] == pattern(left, i);
  check(ring_ok, "put_block's bytes from the left neighbour");
  check(word(kSignal) == 3, "ring signal " + std::to_string(word(kSignal)));
  check(warp_ok, "put_warp's bytes from the left neighbour");
  check(word(kWarpSignal) == 1, "put_warp's signal " + std::to_string(word(kWarpSignal)));
  if (rank == 0) {
    const unsigned long long expected = 1ULL * ranks * kAddBlocks * kAddThreads * kPerThread;
    check(word(kCounter) == expected, "atomic adds " + std::to_string(word(kCounter)) + ", expected " + std::to_string(expected));
  }
  bool scalars_ok = true;
  for (int k = 0; k < 64; ++k)
    scalars_ok = scalars_ok && reinterpret_cast<const int*>(&window[kScalars])[k] == left * 100 + k;
  check(scalars_ok, "p's scalars from the left neighbour");
  int wrong_rounds = 0;
  cuda(cudaMemcpy(&wrong_rounds, wrong, sizeof(int), cudaMemcpyDeviceToHost), "read wrong");
  check(wrong_rounds == 0, std::to_string(wrong_rounds) + " barrier rounds saw a stale value");

  // The calls that wait for an answer (their memory allocated before any
  // of them runs: see ferry/device.h on allocating while kernels wait).
  constexpr int kFetchBlocks = 2, kFetchThreads = 64, kFetches = kFetchBlocks * kFetchThreads;
  int* read = nullptr;
  unsigned long long* olds = nullptr;
  unsigned char* message = nullptr;
  cuda(cudaMalloc(&read, 64 * sizeof(int)), "cudaMalloc");
  cuda(cudaMalloc(&olds, (kFetches + 1) * sizeof(unsigned long long)), "cudaMalloc");
  cuda(cudaMalloc(&message, kMessageBytes), "cudaMalloc");
  MPI_Barrier(MPI_COMM_WORLD);
  read_scalars<<<1, 64>>>(w, read);
  fetch_adds<<<kFetchBlocks, kFetchThreads>>>(w, olds);
  take_lock<<<1, 1>>>(w, olds + kFetches);
  ll_exchange<<<1, 32>>>(w, src + 7, message, 0x5eed0001u);
  finish(ring, "g, fetch_add, compare_swap, ll");
  std::vector<int> read_back(64);
  cuda(cudaMemcpy(read_back.data(), read, 64 * sizeof(int), cudaMemcpyDeviceToHost), "read g's");
  bool g_ok = true;
  for (int k = 0; k < 64; ++k) g_ok = g_ok && read_back[k] == rank * 100 + k;
  check(g_ok, "g reads what this rank's p wrote at the right neighbour");
  std::vector<unsigned long long> mine(kFetches + 1), all(static_cast<std::size_t>(kFetches + 1) * ranks);
  cuda(cudaMemcpy(mine.data(), olds, mine.size() * sizeof(unsigned long long), cudaMemcpyDeviceToHost), "read olds");
  MPI_Allgather(mine.data(), kFetches + 1, MPI_UNSIGNED_LONG_LONG, all.data(), kFetches + 1, MPI_UNSIGNED_LONG_LONG,
                MPI_COMM_WORLD);
  std::vector<int> times(static_cast<std::size_t>(kFetches) * ranks, 0);
  int winners = 0;
  bool olds_ok = true;
  for (int r = 0; r < ranks; ++r) {
    for (int i = 0; i < kFetches; ++i) {
      const unsigned long long old = all[static_cast<std::size_t>(r) * (kFetches + 1) + i];
      olds_ok = olds_ok && old < times.size() && ++times[old] == 1;
    }
    winners += all[static_cast<std::size_t>(r) * (kFetches + 1) + kFetches] == 0;
  }
  check(olds_ok, "fetch_add's old values are 0 .. n-1, each once over every thread of every rank");
  check(winners == 1, std::to_string(winners) + " ranks won compare_swap, expected one");
  std::vector<unsigned char> received(kMessageBytes);
  cuda(cudaMemcpy(received.data(), message, kMessageBytes, cudaMemcpyDeviceToHost), "read the message");
  bool message_ok = true;
  for (std::size_t i = 0; i < kMessageBytes; ++i) message_ok = message_ok && received[i] == pattern(left, i + 7);
  check(message_ok, "ll::put's message from the left neighbour");

  constexpr unsigned kLocalFlag = 0x5eed0002u;
  from_shared_and_local<<<1, 128>>>(w, kLocalFlag);
  finish(ring, "puts from shared and local memory");
  MPI_Barrier(MPI_COMM_WORLD);
  std::vector<unsigned char> landed(kWindowBytes - kFromLocal);
  cuda(cudaMemcpy(landed.data(), base + kFromLocal, landed.size(), cudaMemcpyDeviceToHost), "read the window");
  auto at = [&](std::size_t offset) { return &landed[offset - kFromLocal]; };
  bool local_ok = true, signal_ok = true, shared_ok = true;
  for (std::size_t i = 0; i < kFromLocalBytes; ++i) local_ok = local_ok && at(kFromLocal)[i] == pattern(left, i + 3);
  for (std::size_t i = 0; i < kLocalSignalBytes; ++i)
    signal_ok = signal_ok && at(kLocalSignalData)[i] == pattern(left, i + 5);
  for (std::size_t i = 0; i < kFromSharedBytes; ++i)
    shared_ok = shared_ok && at(kFromShared)[i] == pattern(left, i + 11);
  unsigned long long signal_word = 0, flagged[2] = {0, 0};
  std::memcpy(&signal_word, at(kLocalSignal), sizeof signal_word);
  std::memcpy(flagged, at(kLocalMessage), sizeof flagged);
  const unsigned long long sent = 0x0123456789abcdefULL ^ static_cast<unsigned long long>(left);
  check(local_ok, "put of a thread's local bytes from the left neighbour");
  check(signal_ok && signal_word == 1, "put_signal of local bytes and its signal");
  check(shared_ok, "put_block of shared memory from the left neighbour");
  const unsigned long long flag_bits = static_cast<unsigned long long>(kLocalFlag) << 32;
  check(flagged[0] == (flag_bits | (sent & 0xffffffffu)) && flagged[1] == (flag_bits | (sent >> 32)),
        "ll::put of a local value: its flagged words");
  cudaFree(read);
  cudaFree(olds);
  cudaFree(message);

  MPI_Win_free(&win);
  cudaFree(src);
  cudaFree(wrong);
  const bool passed = mpi_gpu_test::verdict();
  MPI_Finalize();
  return passed ? 0 : 1;
}

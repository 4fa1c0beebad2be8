// The device API (ferry/device.h) on real GPUs: kernels put into, get from,
// signal and atomically update their peers' device windows, and meet at the
// window's barrier. Every result is checked on the host against what the
// ranks wrote; prints "No Errors" on success. Run under mpirun with one rank
// per GPU (or several ranks sharing GPUs).
#include <cuda_runtime.h>
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <numeric>
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
constexpr std::size_t kBlockBytes = 1 << 20;             // ring data
constexpr std::size_t kSignal = kBlockBytes;             // ring signal word
constexpr std::size_t kCounter = kSignal + 64;           // atomic counter
constexpr std::size_t kFloatSum = kCounter + 64;         // float atomic
constexpr std::size_t kElection = kFloatSum + 64;        // compare-and-swap slot
constexpr std::size_t kRounds = kElection + 64;          // barrier round words
constexpr std::size_t kScalars = kRounds + 64;           // p/g scalars
constexpr std::size_t kLLMessage = kScalars + 64 * sizeof(int);  // LL messages
constexpr std::size_t kLLBytes = 1001;
constexpr std::size_t kWindowBytes = kLLMessage + 2 * ferry::device::ll::footprint(kLLBytes);

__host__ __device__ unsigned char pattern(int rank, std::size_t i) {
  return static_cast<unsigned char>(rank * 31 + i * 7 + (i >> 9));
}

__global__ void fill(unsigned char* data, std::size_t bytes, int rank) {
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < bytes; i += gridDim.x * blockDim.x)
    data[i] = pattern(rank, i);
}

// Ring: the block puts its data at an odd offset into the right neighbour's
// window, signals it, and waits for the left neighbour's signal.
__global__ void ring_put_signal(ferry_window_device_t w, const unsigned char* src, std::size_t bytes,
                                unsigned long long round) {
  const int right = (w.rank + 1) % w.size;
  fd::put_block(w, right, 1, src, bytes);
  if (threadIdx.x == 0) {
    fd::signal(w, right, kSignal, round, fd::SignalOp::kSet);
    fd::wait_until(w, kSignal, fd::Compare::kGe, round);
  }
}

__global__ void warp_put(ferry_window_device_t w, const unsigned char* src, std::size_t bytes) {
  const int right = (w.rank + 1) % w.size;
  fd::put_warp(w, right, 3, src, bytes);
  if (threadIdx.x == 0) fd::signal(w, right, kSignal, 1, fd::SignalOp::kAdd);
}

__global__ void get_block(ferry_window_device_t w, unsigned char* dst, std::size_t bytes) {
  fd::get_block(w, (w.rank + w.size - 1) % w.size, 1, dst, bytes);
}

// Every thread of every rank adds to rank 0's counters; each ticket is kept.
__global__ void atomics(ferry_window_device_t w, unsigned long long* tickets, int per_thread) {
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  for (int i = 0; i < per_thread; ++i) {
    tickets[t * per_thread + i] = fd::fetch_add<unsigned long long>(w, 0, kCounter, 1ULL);
    fd::atomic_add<float>(w, 0, kFloatSum, 0.5f);
  }
}

__global__ void elect(ferry_window_device_t w, int* old) {
  *old = fd::compare_swap<int>(w, 0, kElection, -1, w.rank);
}

// p to the right neighbour, barrier, g of what the left neighbour wrote.
__global__ void barrier_rounds(ferry_window_device_t w, int rounds, int* wrong) {
  const int right = (w.rank + 1) % w.size, left = (w.rank + w.size - 1) % w.size;
  for (int r = 1; r <= rounds; ++r) {
    if (threadIdx.x == 0) fd::p<unsigned long long>(w, right, kRounds, r * 1000ULL + w.rank);
    fd::barrier_block(w);
    if (threadIdx.x == 0 && fd::g<unsigned long long>(w, w.rank, kRounds) != r * 1000ULL + left) ++*wrong;
    fd::barrier_block(w);
  }
}

__global__ void scalars(ferry_window_device_t w) {
  const int right = (w.rank + 1) % w.size;
  for (int k = threadIdx.x; k < 64; k += blockDim.x) fd::p<int>(w, right, kScalars + k * sizeof(int), w.rank * 100 + k);
  fd::quiet();
}

// LL messages around the ring: a warp sends, then receives its left
// neighbour's, twice with new flags and data; wrong bytes are counted.
__global__ void ll_ring(ferry_window_device_t w, const unsigned char* src, unsigned char* got, int* wrong) {
  const int right = (w.rank + 1) % w.size, left = (w.rank + w.size - 1) % w.size;
  for (unsigned round = 1; round <= 2; ++round) {
    const std::size_t at = kLLMessage + (round - 1) * fd::ll::footprint(kLLBytes);
    fd::ll::put(w, right, at, src + round, kLLBytes, 100 + round, threadIdx.x, blockDim.x);
    fd::ll::wait(w, at, got, kLLBytes, 100 + round, threadIdx.x, blockDim.x);
    __syncthreads();
    for (std::size_t i = threadIdx.x; i < kLLBytes; i += blockDim.x)
      if (got[i] != pattern(left, i + round)) atomicAdd(wrong, 1);
    __syncthreads();
  }
}

template <typename T>
std::vector<T> read_window(const void* base, std::size_t offset, std::size_t count) {
  std::vector<T> values(count);
  cuda(cudaMemcpy(values.data(), static_cast<const char*>(base) + offset, count * sizeof(T), cudaMemcpyDeviceToHost),
       "read window");
  return values;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const int left = (rank + size - 1) % size;

  MPI_Info info;
  MPI_Info_create(&info);
  MPI_Info_set(info, "mpi_memory_alloc_kinds", "cuda:device");
  void* base = nullptr;
  MPI_Win win;
  if (MPI_Win_allocate(kWindowBytes, 1, info, MPI_COMM_WORLD, &base, &win) != MPI_SUCCESS) {
    std::fprintf(stderr, "MPI_Win_allocate of a device window failed\n");
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Info_free(&info);
  cudaPointerAttributes attributes{};
  cuda(cudaPointerGetAttributes(&attributes, base), "cudaPointerGetAttributes");
  check(attributes.type == cudaMemoryTypeDevice, "MPI_Win_allocate did not return device memory");
  cuda(cudaMemset(base, 0, kWindowBytes), "memset window");
  cuda(cudaMemset(static_cast<char*>(base) + kElection, 0xff, sizeof(int)), "memset election");
  cuda(cudaDeviceSynchronize(), "sync");
  MPI_Barrier(MPI_COMM_WORLD);

  ferry_window_device_t w{};
  check(ferry_win_device_handle(win, &w) == MPI_SUCCESS, "ferry_win_device_handle");
  check(w.rank == rank && w.size == size && w.bytes == kWindowBytes, "handle describes the window");

  const std::size_t bytes = kBlockBytes - 1;
  unsigned char* src = nullptr;
  unsigned char* fetched = nullptr;
  cuda(cudaMalloc(&src, kBlockBytes), "malloc src");
  cuda(cudaMalloc(&fetched, kBlockBytes), "malloc fetched");
  fill<<<64, 256>>>(src, kBlockBytes, rank);
  cuda(cudaDeviceSynchronize(), "fill");

  // Ring put + signal, twice (signal values must keep increasing).
  for (unsigned long long round = 1; round <= 2; ++round) {
    ring_put_signal<<<1, 512>>>(w, src, bytes, round);
    cuda(cudaDeviceSynchronize(), "ring_put_signal");
  }
  MPI_Barrier(MPI_COMM_WORLD);
  {
    const std::vector<unsigned char> got = read_window<unsigned char>(base, 1, bytes);
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < bytes; ++i) wrong += got[i] != pattern(left, i);
    check(wrong == 0, "put_block + signal: " + std::to_string(wrong) + " bytes wrong");
  }
  // get_block of the left neighbour's window (which holds left-1's data).
  MPI_Barrier(MPI_COMM_WORLD);
  get_block<<<1, 256>>>(w, fetched, bytes);
  cuda(cudaDeviceSynchronize(), "get_block");
  {
    std::vector<unsigned char> got(bytes);
    cuda(cudaMemcpy(got.data(), fetched, bytes, cudaMemcpyDeviceToHost), "read fetched");
    std::size_t wrong = 0;
    const int source = (rank + 2 * size - 2) % size;
    for (std::size_t i = 0; i < bytes; ++i) wrong += got[i] != pattern(source, i);
    check(wrong == 0, "get_block: " + std::to_string(wrong) + " bytes wrong");
  }
  MPI_Barrier(MPI_COMM_WORLD);
  // put_warp at an unaligned offset, counted by an added signal.
  warp_put<<<1, 32>>>(w, src, 4097);
  cuda(cudaDeviceSynchronize(), "warp_put");
  MPI_Barrier(MPI_COMM_WORLD);
  {
    const std::vector<unsigned char> got = read_window<unsigned char>(base, 3, 4097);
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < got.size(); ++i) wrong += got[i] != pattern(left, i);
    check(wrong == 0, "put_warp: " + std::to_string(wrong) + " bytes wrong");
    check(read_window<unsigned long long>(base, kSignal, 1)[0] == 3, "signal add after set");
  }

  // Atomics under contention from every thread of every rank.
  const int blocks = 32, threads = 128, per_thread = 8;
  const std::size_t tickets_per_rank = std::size_t(blocks) * threads * per_thread;
  unsigned long long* tickets = nullptr;
  int* old = nullptr;
  cuda(cudaMalloc(&tickets, tickets_per_rank * sizeof(unsigned long long)), "malloc tickets");
  cuda(cudaMalloc(&old, sizeof(int)), "malloc old");
  MPI_Barrier(MPI_COMM_WORLD);
  atomics<<<blocks, threads>>>(w, tickets, per_thread);
  elect<<<1, 1>>>(w, old);
  cuda(cudaDeviceSynchronize(), "atomics");
  MPI_Barrier(MPI_COMM_WORLD);
  {
    std::vector<unsigned long long> mine(tickets_per_rank), all(tickets_per_rank * size);
    cuda(cudaMemcpy(mine.data(), tickets, mine.size() * sizeof(mine[0]), cudaMemcpyDeviceToHost), "tickets");
    MPI_Allgather(mine.data(), int(mine.size()), MPI_UNSIGNED_LONG_LONG, all.data(), int(mine.size()),
                  MPI_UNSIGNED_LONG_LONG, MPI_COMM_WORLD);
    std::sort(all.begin(), all.end());
    bool unique = true;
    for (std::size_t i = 0; i < all.size(); ++i) unique = unique && all[i] == i;
    check(unique, "fetch_add tickets are not exactly 0..N-1");
    int seen = 0;
    cuda(cudaMemcpy(&seen, old, sizeof(int), cudaMemcpyDeviceToHost), "old");
    std::vector<int> everyone(size);
    MPI_Allgather(&seen, 1, MPI_INT, everyone.data(), 1, MPI_INT, MPI_COMM_WORLD);
    check(std::count(everyone.begin(), everyone.end(), -1) == 1, "compare_swap elected other than one rank");
    if (rank == 0) {
      check(read_window<unsigned long long>(base, kCounter, 1)[0] == all.size(), "counter total");
      check(read_window<float>(base, kFloatSum, 1)[0] == 0.5f * all.size(), "float atomic_add total");
      const int winner = read_window<int>(base, kElection, 1)[0];
      for (int r = 0; r < size; ++r)
        check(everyone[r] == (r == winner ? -1 : winner), "compare_swap old values");
    }
  }

  // Barrier rounds and single elements.
  int* wrong = nullptr;
  cuda(cudaMalloc(&wrong, sizeof(int)), "malloc wrong");
  cuda(cudaMemset(wrong, 0, sizeof(int)), "memset wrong");
  barrier_rounds<<<1, 64>>>(w, 200, wrong);
  scalars<<<1, 64>>>(w);
  cuda(cudaDeviceSynchronize(), "barrier_rounds");
  MPI_Barrier(MPI_COMM_WORLD);
  {
    int rounds_wrong = 0;
    cuda(cudaMemcpy(&rounds_wrong, wrong, sizeof(int), cudaMemcpyDeviceToHost), "wrong");
    check(rounds_wrong == 0, "barrier_block: " + std::to_string(rounds_wrong) + " rounds saw stale data");
    const std::vector<int> got = read_window<int>(base, kScalars, 64);
    for (int k = 0; k < 64; ++k) check(got[k] == left * 100 + k, "p<int> scalar " + std::to_string(k));
  }

  // LL messages.
  {
    cuda(cudaMemset(wrong, 0, sizeof(int)), "memset wrong");
    ll_ring<<<1, 64>>>(w, src, fetched, wrong);
    cuda(cudaDeviceSynchronize(), "ll_ring");
    int ll_wrong = 0;
    cuda(cudaMemcpy(&ll_wrong, wrong, sizeof(int), cudaMemcpyDeviceToHost), "wrong");
    check(ll_wrong == 0, "ll::put/ll::wait: " + std::to_string(ll_wrong) + " bytes wrong");
  }
  MPI_Barrier(MPI_COMM_WORLD);

  // A host window has no device handle.
  {
    int host_memory[4];
    MPI_Win host_win;
    MPI_Win_create(host_memory, sizeof(host_memory), 1, MPI_INFO_NULL, MPI_COMM_WORLD, &host_win);
    MPI_Win_set_errhandler(host_win, MPI_ERRORS_RETURN);
    ferry_window_device_t none{};
    int rc = ferry_win_device_handle(host_win, &none), error_class = MPI_SUCCESS;
    MPI_Error_class(rc, &error_class);
    check(error_class == MPI_ERR_WIN, "a host window gave a device handle");
    MPI_Win_free(&host_win);
  }

  cudaFree(src);
  cudaFree(fetched);
  cudaFree(tickets);
  cudaFree(old);
  cudaFree(wrong);
  MPI_Win_free(&win);
  const bool passed = mpi_gpu_test::verdict();
  MPI_Finalize();
  return passed ? 0 : 1;
}

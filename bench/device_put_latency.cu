// device-put-latency: GPU-initiated put + signal between two ranks' device
// windows (ferry/device.h), one way, measured as a ping-pong: rank 0's
// kernel puts 8 bytes and signals rank 1 (p and signal, or one put_signal
// of device memory), whose kernel waits, puts back and signals; one way =
// total / (2 * iterations), timed with CUDA events around one kernel of
// many iterations (the launch is amortised away). Also the
// raw flag ping-pong (a bare store to the peer's word, no data, no fence) as
// the floor NVLink sets, and the LL form (ll::put/ll::wait: data words
// carrying their own flags). Then bandwidth: put_block of 64 MiB and
// quiet(w), beside MPI_Put of the same bytes and MPI_Win_flush.
//
// With the ranks on two machines (or virtual nodes: FERRY_HOSTNAME) the
// calls go through the GDA queue; the floor is then an 8-byte ping-pong
// over a TCP connection of the benchmark's own (raw_tcp.h), and MPI_Put(8 B)
// + MPI_Win_flush is timed beside it (FERRY_RMA_ACROSS chooses its carrier).
//
//   mpirun -np 2 -x LD_PRELOAD=libferry.so device-put-latency
#include <cuda_runtime.h>
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "ferry/device.h"
#include "raw_tcp.h"

namespace fd = ferry::device;

namespace {

constexpr std::size_t kData = 0, kSignal = 64, kFlag = 128, kLL = 256;

__global__ void put_signal_pingpong(ferry_window_device_t w, int iterations) {
  const int peer = 1 - w.rank;
  for (unsigned long long i = 1; i <= static_cast<unsigned long long>(iterations); ++i) {
    if (w.rank == 0) {
      fd::p<unsigned long long>(w, peer, kData, i);
      fd::signal(w, peer, kSignal, i);
      fd::wait_until(w, kSignal, fd::Compare::kGe, i);
    } else {
      fd::wait_until(w, kSignal, fd::Compare::kGe, i);
      fd::p<unsigned long long>(w, peer, kData, i);
      fd::signal(w, peer, kSignal, i);
    }
  }
}

// The same exchange as one put_signal call whose source is in device memory.
__device__ unsigned long long put_signal_source;

__global__ void put_signal_call_pingpong(ferry_window_device_t w, int iterations) {
  const int peer = 1 - w.rank;
  for (unsigned long long i = 1; i <= static_cast<unsigned long long>(iterations); ++i) {
    if (w.rank == 1) fd::wait_until(w, kSignal, fd::Compare::kGe, i);
    put_signal_source = i;
    fd::put_signal(w, peer, kData, &put_signal_source, sizeof(unsigned long long), kSignal, i);
    if (w.rank == 0) fd::wait_until(w, kSignal, fd::Compare::kGe, i);
  }
}

// The same exchange as LL messages: 8 data bytes with their flags, one store
// pair, no fence.
__global__ void ll_pingpong(ferry_window_device_t w, int iterations) {
  const int peer = 1 - w.rank;
  unsigned long long value = 0;
  for (unsigned i = 1; i <= static_cast<unsigned>(iterations); ++i) {
    if (w.rank == 0) {
      value = i;
      fd::ll::put(w, peer, kLL, &value, sizeof(value), i);
      fd::ll::wait(w, kLL, &value, sizeof(value), i);
    } else {
      fd::ll::wait(w, kLL, &value, sizeof(value), i);
      fd::ll::put(w, peer, kLL, &value, sizeof(value), i);
    }
  }
}

__global__ void raw_flag_pingpong(ferry_window_device_t w, int iterations) {
  const int peer = 1 - w.rank;
  auto* mine = reinterpret_cast<volatile unsigned long long*>(static_cast<char*>(w.peers[w.rank]) + kFlag);
  auto* theirs = reinterpret_cast<volatile unsigned long long*>(static_cast<char*>(w.peers[peer]) + kFlag);
  for (unsigned long long i = 1; i <= static_cast<unsigned long long>(iterations); ++i) {
    if (w.rank == 0) {
      *theirs = i;
      while (*mine < i) {
      }
    } else {
      while (*mine < i) {
      }
      *theirs = i;
    }
  }
}

// Each block puts its slice; each block's thread 0 ends with quiet(w), so
// the kernel ends once the bytes are at the target.
__global__ void put_bulk(ferry_window_device_t w, std::size_t offset, const char* src, std::size_t bytes) {
  const std::size_t slice = bytes / gridDim.x, at = slice * blockIdx.x;
  fd::put_block(w, 1 - w.rank, offset + at, src + at, blockIdx.x + 1 == gridDim.x ? bytes - at : slice);
  if (threadIdx.x == 0) fd::quiet(w);
}

constexpr std::size_t kBulk = std::size_t{64} << 20;
constexpr std::size_t kBulkAt = 1 << 20;  // past the ping-pong words

// Median GB/s of `rounds` timed calls of step (rank 0 times, rank 1 waits).
template <typename Step>
double bulk_gb_per_s(Step step, int rounds) {
  std::vector<double> rates;
  for (int r = 0; r < rounds + 1; ++r) {
    MPI_Barrier(MPI_COMM_WORLD);
    const double start = MPI_Wtime();
    step();
    const double seconds = MPI_Wtime() - start;
    if (r > 0) rates.push_back(kBulk / seconds / 1e9);  // the first round warms up
  }
  for (std::size_t i = 0; i < rates.size(); ++i)
    for (std::size_t j = i + 1; j < rates.size(); ++j)
      if (rates[j] < rates[i]) std::swap(rates[i], rates[j]);
  return rates[rates.size() / 2];
}

template <typename Kernel>
double one_way_us(Kernel kernel, ferry_window_device_t w, void* base, int iterations) {
  cudaMemset(base, 0, 4096);
  cudaDeviceSynchronize();
  MPI_Barrier(MPI_COMM_WORLD);
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  cudaEventRecord(start);
  kernel<<<1, 1>>>(w, iterations);
  cudaEventRecord(stop);
  cudaEventSynchronize(stop);
  float ms = 0;
  cudaEventElapsedTime(&ms, start, stop);
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return ms * 1e3 / (2.0 * iterations);
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size != 2) {
    if (rank == 0) std::fprintf(stderr, "device-put-latency: run with 2 ranks\n");
    MPI_Finalize();
    return 2;
  }
  MPI_Info info;
  MPI_Info_create(&info);
  MPI_Info_set(info, "mpi_memory_alloc_kinds", "cuda:device");
  void* base = nullptr;
  MPI_Win win;
  MPI_Win_allocate(kBulkAt + kBulk, 1, info, MPI_COMM_WORLD, &base, &win);
  MPI_Info_free(&info);
  ferry_window_device_t w{};
  if (ferry_win_device_handle(win, &w) != MPI_SUCCESS) MPI_Abort(MPI_COMM_WORLD, 1);
  // The peer on another machine: its memory is not mapped here.
  const bool across = w.gda_ring != nullptr;
  char* bulk = nullptr;
  cudaMalloc(&bulk, kBulk);
  cudaMemset(bulk, 7, kBulk);
  cudaDeviceSynchronize();

  const int iterations = across ? 2000 : 200000;
  one_way_us(put_signal_pingpong, w, base, across ? 100 : 1000);  // warm-up
  double put_signal[5], put_signal_call[5], ll[5], raw[5], host_put[5];
  MPI_Win_lock_all(0, win);
  for (int trial = 0; trial < 5; ++trial) {
    put_signal[trial] = one_way_us(put_signal_pingpong, w, base, iterations);
    put_signal_call[trial] = one_way_us(put_signal_call_pingpong, w, base, iterations);
    ll[trial] = one_way_us(ll_pingpong, w, base, iterations);
    raw[trial] = across ? bench::raw_tcp_one_way_us(MPI_COMM_WORLD, iterations)
                        : one_way_us(raw_flag_pingpong, w, base, iterations);
    // MPI_Put(8 B) + flush from the host, a round trip to the target.
    const double start = MPI_Wtime();
    for (int i = 0; i < iterations / 10 && rank == 0; ++i) {
      MPI_Put(bulk, 8, MPI_BYTE, 1, kData, 8, MPI_BYTE, win);
      MPI_Win_flush(1, win);
    }
    host_put[trial] = (MPI_Wtime() - start) * 1e6 / (iterations / 10);
    MPI_Barrier(MPI_COMM_WORLD);
  }
  // Bandwidth, rank 0 to rank 1.
  const double device_bulk = bulk_gb_per_s([&] {
    if (rank == 0) {
      put_bulk<<<32, 512>>>(w, kBulkAt, bulk, kBulk);
      cudaDeviceSynchronize();
    }
  }, 5);
  const double host_bulk = bulk_gb_per_s([&] {
    if (rank == 0) {
      MPI_Put(bulk, int(kBulk), MPI_BYTE, 1, kBulkAt, int(kBulk), MPI_BYTE, win);
      MPI_Win_flush(1, win);
    }
  }, 5);
  MPI_Win_unlock_all(win);
  auto median5 = [](double* v) {
    for (int i = 0; i < 5; ++i)
      for (int j = i + 1; j < 5; ++j)
        if (v[j] < v[i]) {
          double t = v[i];
          v[i] = v[j];
          v[j] = t;
        }
    return v[2];
  };
  if (rank == 0) {
    const char* carrier = std::getenv("FERRY_RMA_ACROSS");
    std::printf("# device-put-latency: one way, median of 5 runs of %d ping-pongs; %s\n", iterations,
                across ? "the peer on another machine (GDA queue)" : "the peer's memory mapped");
    std::printf("ferry put(8 B) + signal: %.3f us\n", median5(put_signal));
    std::printf("ferry put_signal(8 B):   %.3f us\n", median5(put_signal_call));
    std::printf("ferry ll::put(8 B):      %.3f us\n", median5(ll));
    if (across)
      std::printf("raw TCP 8 B, half RTT:    %.3f us\n", median5(raw));
    else
      std::printf("raw NVLink flag store:    %.3f us\n", median5(raw));
    std::printf("MPI_Put(8 B) + flush:    %.3f us (a round trip; FERRY_RMA_ACROSS=%s)\n", median5(host_put),
                carrier ? carrier : "mpi");
    std::printf("put_block(64 MiB) + quiet(w): %.2f GB/s; MPI_Put(64 MiB) + flush: %.2f GB/s (ratio %.2f)\n",
                device_bulk, host_bulk, device_bulk / host_bulk);
  }
  cudaFree(bulk);
  MPI_Win_free(&win);
  MPI_Finalize();
  return 0;
}

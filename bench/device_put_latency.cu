// device-put-latency: GPU-initiated put + signal between two ranks' device
// windows (ferry/device.h), one way, measured as a ping-pong: rank 0's
// kernel puts 8 bytes and signals rank 1, whose kernel waits, puts back and
// signals; one way = total / (2 * iterations), timed with CUDA events around
// one kernel of many iterations (the launch is amortised away). Also the
// raw flag ping-pong (a bare store to the peer's word, no data, no fence) as
// the floor NVLink sets, and the LL form (ll::put/ll::wait: data words
// carrying their own flags).
//
//   mpirun -np 2 -x LD_PRELOAD=libferry.so device-put-latency
#include <cuda_runtime.h>
#include <mpi.h>

#include <cstdio>

#include "ferry/device.h"

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
  MPI_Win_allocate(1 << 20, 1, info, MPI_COMM_WORLD, &base, &win);
  MPI_Info_free(&info);
  ferry_window_device_t w{};
  if (ferry_win_device_handle(win, &w) != MPI_SUCCESS) MPI_Abort(MPI_COMM_WORLD, 1);

  const int iterations = 200000;
  one_way_us(put_signal_pingpong, w, base, 1000);  // warm-up
  double put_signal[5], ll[5], raw[5];
  for (int trial = 0; trial < 5; ++trial) {
    put_signal[trial] = one_way_us(put_signal_pingpong, w, base, iterations);
    ll[trial] = one_way_us(ll_pingpong, w, base, iterations);
    raw[trial] = one_way_us(raw_flag_pingpong, w, base, iterations);
  }
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
    std::printf("# device-put-latency: one way, median of 5 runs of %d ping-pongs\n", iterations);
    std::printf("ferry put(8 B) + signal: %.3f us\n", median5(put_signal));
    std::printf("ferry ll::put(8 B):      %.3f us\n", median5(ll));
    std::printf("raw NVLink flag store:    %.3f us\n", median5(raw));
  }
  MPI_Win_free(&win);
  MPI_Finalize();
  return 0;
}

// rma-bench: MPI_Put + MPI_Win_flush from device memory into a peer's device
// window (Ferry), against the host-staged way an application without Ferry
// must take (device -> host copy, MPI_Put on a host window, MPI_Win_flush,
// host -> device copy standing in for the target's copy back), on the same
// device buffers in one run. Run with two ranks under the preload:
//
//   mpirun -np 2 -x LD_PRELOAD=libferry.so rma-bench [--max-size 128M]
//
// Times are the host clock around one Put + flush as the MPI caller feels
// it, median over many iterations after warm-up, on rank 0 (the origin);
// rank 1 is a passive target. Device memory comes from ferry_device_malloc,
// so the program needs no GPU toolkit and runs on the emulated device too.
#include <dlfcn.h>
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "ferry/ferry.h"

#ifdef RMA_BENCH_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace {

struct Ferry {
  decltype(&ferry_device_malloc) malloc = nullptr;
  decltype(&ferry_device_free) free = nullptr;
  decltype(&ferry_memcpy) memcpy = nullptr;
  decltype(&ferry_device_backend) backend = nullptr;
};

Ferry load_ferry() {
  Ferry f;
  f.malloc = reinterpret_cast<decltype(f.malloc)>(dlsym(RTLD_DEFAULT, "ferry_device_malloc"));
  f.free = reinterpret_cast<decltype(f.free)>(dlsym(RTLD_DEFAULT, "ferry_device_free"));
  f.memcpy = reinterpret_cast<decltype(f.memcpy)>(dlsym(RTLD_DEFAULT, "ferry_memcpy"));
  f.backend = reinterpret_cast<decltype(f.backend)>(dlsym(RTLD_DEFAULT, "ferry_device_backend"));
  if (!f.malloc || !f.free || !f.memcpy || !f.backend) {
    std::fprintf(stderr, "rma-bench: libferry.so is not loaded (run with LD_PRELOAD=libferry.so)\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  return f;
}

std::size_t parse_size(const char* text) {
  char* end = nullptr;
  double value = std::strtod(text, &end);
  switch (end && *end ? *end : ' ') {
    case 'K': case 'k': value *= 1024; break;
    case 'M': case 'm': value *= 1024 * 1024; break;
    case 'G': case 'g': value *= 1024.0 * 1024 * 1024; break;
    default: break;
  }
  return static_cast<std::size_t>(value);
}

double median(std::vector<double> samples) {
  std::sort(samples.begin(), samples.end());
  return samples[samples.size() / 2];
}

int iterations_for(std::size_t bytes) {
  if (bytes <= (64u << 10)) return 2000;
  if (bytes <= (8u << 20)) return 200;
  return 30;
}

// Median microseconds of one step(), rank 0 only; the others return 0.
template <typename Step>
double time_steps(std::size_t bytes, Step step) {
  const int warmup = 10, iterations = iterations_for(bytes);
  std::vector<double> us;
  us.reserve(iterations);
  for (int i = 0; i < warmup + iterations; ++i) {
    const double start = MPI_Wtime();
    step();
    const double elapsed = (MPI_Wtime() - start) * 1e6;
    if (i >= warmup) us.push_back(elapsed);
  }
  return median(us);
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, ranks = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  std::size_t max_size = 128u << 20;
  for (int i = 1; i < argc; ++i)
    if (!std::strcmp(argv[i], "--max-size") && i + 1 < argc) max_size = parse_size(argv[++i]);
  if (ranks != 2) {
    if (rank == 0) std::fprintf(stderr, "rma-bench: run with 2 ranks\n");
    MPI_Finalize();
    return 2;
  }
  const Ferry ferry = load_ferry();
  const int target = 1;

  // Device window (Ferry) and host window (the real MPI's) of max_size bytes.
  MPI_Info device_kind;
  MPI_Info_create(&device_kind);
  MPI_Info_set(device_kind, "mpi_memory_alloc_kinds", "cuda:device");
  void* device_window_memory = nullptr;
  void* host_window_memory = nullptr;
  MPI_Win device_win, host_win;
  MPI_Win_allocate(MPI_Aint(max_size), 1, device_kind, MPI_COMM_WORLD, &device_window_memory, &device_win);
  MPI_Win_allocate(MPI_Aint(max_size), 1, MPI_INFO_NULL, MPI_COMM_WORLD, &host_window_memory, &host_win);
  MPI_Info_free(&device_kind);

  char* origin = static_cast<char*>(ferry.malloc(max_size));
  std::vector<char> pattern(max_size);
  for (std::size_t i = 0; i < max_size; ++i) pattern[i] = char(i * 7 + 1);
  ferry.memcpy(origin, pattern.data(), max_size);
  // Pinned host staging for the staged way, as a careful application would
  // have it: pageable copies would only make it slower.
  std::vector<char> staging(max_size), staging_back(max_size);
#ifdef RMA_BENCH_HAVE_CUDA
  cudaHostRegister(staging.data(), max_size, cudaHostRegisterDefault);
  cudaHostRegister(staging_back.data(), max_size, cudaHostRegisterDefault);
#endif

  if (rank == 0) {
    std::printf("# rma-bench: MPI_Put + MPI_Win_flush, %s device, 2 ranks; us = median host time per Put+flush\n",
                ferry.backend());
    std::printf("%12s %12s %12s %12s %12s %10s\n", "bytes", "ferry_us", "ferry_GB/s", "staged_us", "staged_GB/s",
                "speedup");
  }
  MPI_Win_lock_all(0, device_win);
  MPI_Win_lock_all(0, host_win);
  for (std::size_t bytes = 8; bytes <= max_size; bytes *= 4) {
    double ferry_us = 0, staged_us = 0;
    if (rank == 0) {
      ferry_us = time_steps(bytes, [&] {
        MPI_Put(origin, int(bytes), MPI_BYTE, target, 0, int(bytes), MPI_BYTE, device_win);
        MPI_Win_flush(target, device_win);
      });
      staged_us = time_steps(bytes, [&] {
        ferry.memcpy(staging.data(), origin, bytes);
        MPI_Put(staging.data(), int(bytes), MPI_BYTE, target, 0, int(bytes), MPI_BYTE, host_win);
        MPI_Win_flush(target, host_win);
        ferry.memcpy(device_window_memory, staging_back.data(), bytes);
      });
      std::printf("%12zu %12.2f %12.2f %12.2f %12.2f %10.2f\n", bytes, ferry_us, bytes / ferry_us / 1e3, staged_us,
                  bytes / staged_us / 1e3, staged_us / ferry_us);
      std::fflush(stdout);
    }
    if (bytes == max_size) break;
    if (bytes * 4 > max_size) bytes = max_size / 4;
  }
  MPI_Win_unlock_all(host_win);
  MPI_Win_unlock_all(device_win);

  // The data arrived: rank 1's window holds the origin's bytes.
  MPI_Barrier(MPI_COMM_WORLD);
  int bad = 0;
  if (rank == target) {
    std::vector<char> got(max_size);
    ferry.memcpy(got.data(), device_window_memory, max_size);
    bad = got != pattern;
  }
  int any_bad = 0;
  MPI_Allreduce(&bad, &any_bad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (rank == 0) std::printf("# check: %s\n", any_bad ? "WRONG DATA in the device window" : "data verified");
#ifdef RMA_BENCH_HAVE_CUDA
  cudaHostUnregister(staging.data());
  cudaHostUnregister(staging_back.data());
#endif
  ferry.free(origin);
  MPI_Win_free(&host_win);
  MPI_Win_free(&device_win);
  MPI_Finalize();
  return any_bad;
}

// rma-bench: MPI_Put + MPI_Win_flush (or, with --get, MPI_Get + flush)
// between device memory and a peer's device window (Ferry), in the three
// ways a window gets device memory: MPI_Win_allocate with the memory-kinds
// info, MPI_Win_create on device memory, and MPI_Win_create_dynamic without
// info and MPI_Win_attach of device memory; against the host-staged way an
// application without Ferry must take (device -> host copy, MPI_Put on a
// host window, MPI_Win_flush, host -> device copy standing in for the
// target's copy back), on the same device buffers in one run. Run with two
// ranks under the preload:
//
//   mpirun -np 2 -x LD_PRELOAD=libferry.so rma-bench [--max-size 128M] [--get]
//
// Times are the host clock around one Put + flush as the MPI caller feels
// it, median over many iterations after warm-up, on rank 0 (the origin);
// rank 1 is a passive target. Device memory comes from ferry_device_malloc,
// so the program needs no GPU toolkit and runs on the emulated device too.
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench_common.h"

#ifdef RMA_BENCH_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace {

using bench::Ferry;
using bench::median;

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
  bool get = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--max-size") && i + 1 < argc) max_size = bench::parse_size(argv[++i]);
    if (!std::strcmp(argv[i], "--get")) get = true;
  }
  if (ranks != 2) {
    if (rank == 0) std::fprintf(stderr, "rma-bench: run with 2 ranks\n");
    MPI_Finalize();
    return 2;
  }
  const Ferry ferry = bench::load_ferry("rma-bench");
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
  // The same on device memory of the program's own: created, and attached
  // to a dynamic window made without info.
  char* created_memory = static_cast<char*>(ferry.malloc(max_size));
  char* attached_memory = static_cast<char*>(ferry.malloc(max_size));
  MPI_Win created_win, dynamic_win;
  MPI_Win_create(created_memory, MPI_Aint(max_size), 1, MPI_INFO_NULL, MPI_COMM_WORLD, &created_win);
  MPI_Win_create_dynamic(MPI_INFO_NULL, MPI_COMM_WORLD, &dynamic_win);
  // Across machines a dynamic window is the real MPI's alone, which takes
  // no device memory: that column is then left out.
  MPI_Win_set_errhandler(dynamic_win, MPI_ERRORS_RETURN);
  const int attached_here = MPI_Win_attach(dynamic_win, attached_memory, MPI_Aint(max_size)) == MPI_SUCCESS;
  int attached = 0;
  MPI_Allreduce(&attached_here, &attached, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  MPI_Aint attached_at = 0;
  MPI_Get_address(attached_memory, &attached_at);
  MPI_Bcast(&attached_at, 1, MPI_AINT, target, MPI_COMM_WORLD);

  char* origin = static_cast<char*>(ferry.malloc(max_size));
  std::vector<char> pattern(max_size);
  for (std::size_t i = 0; i < max_size; ++i) pattern[i] = char(i * 7 + 1);
  // A put carries the pattern into zeroed windows; a get brings it from
  // the windows into a zeroed origin.
  const std::vector<char> zeros(max_size, 0);
  ferry.memcpy(origin, get ? zeros.data() : pattern.data(), max_size);
  for (void* memory : {device_window_memory, host_window_memory, static_cast<void*>(created_memory),
                       static_cast<void*>(attached_memory)})
    ferry.memcpy(memory, get ? pattern.data() : zeros.data(), max_size);
  MPI_Barrier(MPI_COMM_WORLD);
  // Pinned host staging for the staged way, as a careful application would
  // have it: pageable copies would only make it slower.
  std::vector<char> staging(max_size), staging_back(max_size);
#ifdef RMA_BENCH_HAVE_CUDA
  cudaHostRegister(staging.data(), max_size, cudaHostRegisterDefault);
  cudaHostRegister(staging_back.data(), max_size, cudaHostRegisterDefault);
#endif

  if (rank == 0) {
    const char* carrier = std::getenv("FERRY_RMA_ACROSS");
    std::printf("# rma-bench: MPI_%s + MPI_Win_flush, %s device, 2 ranks; us = median host time per call+flush%s%s\n",
                get ? "Get" : "Put", ferry.backend(), carrier ? "; FERRY_RMA_ACROSS=" : "", carrier ? carrier : "");
    std::printf("%12s %12s %12s %12s %12s %12s %12s %12s %10s\n", "bytes", "alloc_us", "alloc_GB/s", "create_us",
                "create_GB/s", "dynamic_us", "dynamic_GB/s", "staged_us", "speedup");
  }
  MPI_Win wins[] = {device_win, created_win, dynamic_win};
  for (MPI_Win w : wins) MPI_Win_lock_all(0, w);
  MPI_Win_lock_all(0, host_win);
  for (std::size_t bytes = 8; bytes <= max_size; bytes *= 4) {
    if (rank == 0) {
      double us[3] = {0, 0, 0};
      for (int k = 0; k < (attached ? 3 : 2); ++k) {
        const MPI_Aint disp = k == 2 ? attached_at : 0;
        us[k] = time_steps(bytes, [&] {
          if (get)
            MPI_Get(origin, int(bytes), MPI_BYTE, target, disp, int(bytes), MPI_BYTE, wins[k]);
          else
            MPI_Put(origin, int(bytes), MPI_BYTE, target, disp, int(bytes), MPI_BYTE, wins[k]);
          MPI_Win_flush(target, wins[k]);
        });
      }
      const double staged_us = time_steps(bytes, [&] {
        if (get) {
          MPI_Get(staging.data(), int(bytes), MPI_BYTE, target, 0, int(bytes), MPI_BYTE, host_win);
          MPI_Win_flush(target, host_win);
          ferry.memcpy(origin, staging.data(), bytes);
        } else {
          ferry.memcpy(staging.data(), origin, bytes);
          MPI_Put(staging.data(), int(bytes), MPI_BYTE, target, 0, int(bytes), MPI_BYTE, host_win);
          MPI_Win_flush(target, host_win);
          ferry.memcpy(device_window_memory, staging_back.data(), bytes);
        }
      });
      char dynamic[2][32] = {"-", "-"};
      if (attached) {
        std::snprintf(dynamic[0], sizeof dynamic[0], "%.2f", us[2]);
        std::snprintf(dynamic[1], sizeof dynamic[1], "%.2f", bytes / us[2] / 1e3);
      }
      std::printf("%12zu %12.2f %12.2f %12.2f %12.2f %12s %12s %12.2f %10.2f\n", bytes, us[0], bytes / us[0] / 1e3,
                  us[1], bytes / us[1] / 1e3, dynamic[0], dynamic[1], staged_us, staged_us / us[0]);
      std::fflush(stdout);
    }
    if (bytes == max_size) break;
    if (bytes * 4 > max_size) bytes = max_size / 4;
  }
  MPI_Win_unlock_all(host_win);
  for (MPI_Win w : wins) MPI_Win_unlock_all(w);

  // The data arrived: rank 1's windows hold the origin's bytes (a get:
  // the origin holds rank 1's, which the windows started with).
  MPI_Barrier(MPI_COMM_WORLD);
  int bad = 0;
  if (rank == (get ? 0 : target)) {
    std::vector<char> got(max_size);
    ferry.memcpy(got.data(), get ? origin : device_window_memory, max_size);
    bad = got != pattern;
    for (char* memory : {created_memory, attached_memory}) {
      if (memory == attached_memory && !attached) continue;
      ferry.memcpy(got.data(), get ? origin : memory, max_size);
      bad = bad || got != pattern;
    }
  }
  int any_bad = 0;
  MPI_Allreduce(&bad, &any_bad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (rank == 0) std::printf("# check: %s\n", any_bad ? "WRONG DATA in the device window" : "data verified");
#ifdef RMA_BENCH_HAVE_CUDA
  cudaHostUnregister(staging.data());
  cudaHostUnregister(staging_back.data());
#endif
  MPI_Win_free(&host_win);
  MPI_Win_free(&device_win);
  MPI_Win_free(&created_win);
  if (attached_here) MPI_Win_detach(dynamic_win, attached_memory);
  MPI_Win_free(&dynamic_win);
  ferry.free(origin);
  ferry.free(created_memory);
  ferry.free(attached_memory);
  MPI_Finalize();
  return any_bad;
}

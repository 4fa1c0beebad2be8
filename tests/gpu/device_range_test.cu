// The device API's debug check (built here without NDEBUG, as a debug build
// of an application is): a put that reaches past the target rank's window
// traps, printing the call, rank, offset and size, instead of writing past
// the window. Each rank puts 100 bytes at the last 50 of the next rank's
// window, the kernel fails, and the rank reports what CUDA said; the
// context is unusable after a trap, so the window is not freed. ctest
// matches the printed message.
#undef NDEBUG
#include <cuda_runtime.h>
#include <mpi.h>

#include <cstdio>

#include "ferry/device.h"

namespace fd = ferry::device;

namespace {

constexpr std::size_t kWindowBytes = 4096;

__global__ void put_past_the_end(ferry_window_device_t w, const char* src) {
  fd::put(w, (w.rank + 1) % w.size, kWindowBytes - 50, src, 100);
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Info info;
  MPI_Info_create(&info);
  MPI_Info_set(info, "mpi_memory_alloc_kinds", "cuda:device");
  void* base = nullptr;
  MPI_Win win;
  MPI_Win_allocate(kWindowBytes, 1, info, MPI_COMM_WORLD, &base, &win);
  MPI_Info_free(&info);
  ferry_window_device_t w{};
  if (ferry_win_device_handle(win, &w) != MPI_SUCCESS) MPI_Abort(MPI_COMM_WORLD, 1);
  char* src = nullptr;
  cudaMalloc(&src, 100);
  MPI_Barrier(MPI_COMM_WORLD);
  put_past_the_end<<<1, 1>>>(w, src);
  const cudaError_t error = cudaDeviceSynchronize();
  std::printf("rank %d: the kernel ended with %s\n", w.rank, cudaGetErrorName(error));
  int trapped = error != cudaSuccess, everywhere = 0;
  MPI_Allreduce(&trapped, &everywhere, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (w.rank == 0) std::printf(everywhere ? "No Errors\n" : "FAIL: a put past the window did not trap\n");
  std::fflush(stdout);
  MPI_Finalize();  // the window is left: its device memory went with the context
  return everywhere ? 0 : 1;
}

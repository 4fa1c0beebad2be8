// copy-engine-pages: how fast one process's copy engine writes into another
// process's allocation over CUDA IPC, both directions at once, by the
// allocation's layout: a 4 KiB head before two 64 MiB slots (not a whole
// number of 2 MiB pages), the two slots alone, a 2 MiB head before them.
// Eight 64 MiB copies alternate between the slots, as cepush's do. Run with
// two ranks, one GPU each:
//   mpirun -np 2 build/bench/copy-engine-pages
#include <cuda_runtime.h>
#include <mpi.h>

#include <cstdio>
#include <vector>

namespace {

bool check(cudaError_t error, const char* what) {
  if (error == cudaSuccess) return true;
  std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(error));
  return false;
}

#define CHECK(call) \
  if (!check((call), #call)) MPI_Abort(MPI_COMM_WORLD, 1)

constexpr std::size_t kSlot = std::size_t{64} << 20;
constexpr int kCopies = 8;
constexpr int kRepeats = 6;

struct Layout {
  const char* name;
  std::size_t head;
};
constexpr Layout kLayouts[] = {
    {"4 KiB head + 2 x 64 MiB", 4096},
    {"2 x 64 MiB", 0},
    {"2 MiB head + 2 x 64 MiB", std::size_t{2} << 20},
};

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, nranks = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  int devices = 0;
  CHECK(cudaGetDeviceCount(&devices));
  if (nranks != 2 || devices < 2) {
    if (rank == 0) std::fprintf(stderr, "copy-engine-pages: needs 2 ranks and 2 GPUs\n");
    MPI_Finalize();
    return 2;
  }
  const int peer = 1 - rank;
  CHECK(cudaSetDevice(rank));
  void* source = nullptr;
  CHECK(cudaMalloc(&source, kCopies * kSlot));
  CHECK(cudaMemset(source, rank + 1, kCopies * kSlot));
  cudaStream_t stream = nullptr;
  CHECK(cudaStreamCreate(&stream));
  if (rank == 0) std::printf("%-26s %10s %12s\n", "landing allocation", "ms", "GB/s a way");

  for (const Layout& layout : kLayouts) {
    void* landing = nullptr;
    CHECK(cudaMalloc(&landing, layout.head + 2 * kSlot));
    cudaIpcMemHandle_t mine{}, theirs{};
    CHECK(cudaIpcGetMemHandle(&mine, landing));
    MPI_Sendrecv(&mine, sizeof mine, MPI_BYTE, peer, 0, &theirs, sizeof theirs, MPI_BYTE, peer, 0, MPI_COMM_WORLD,
                 MPI_STATUS_IGNORE);
    void* remote = nullptr;
    CHECK(cudaIpcOpenMemHandle(&remote, theirs, cudaIpcMemLazyEnablePeerAccess));
    double best = 1e30;
    for (int repeat = 0; repeat < kRepeats; ++repeat) {
      CHECK(cudaDeviceSynchronize());
      MPI_Barrier(MPI_COMM_WORLD);
      const double start = MPI_Wtime();
      for (int c = 0; c < kCopies; ++c) {
        char* to = static_cast<char*>(remote) + layout.head + (c % 2) * kSlot;
        CHECK(cudaMemcpyAsync(to, static_cast<char*>(source) + c * kSlot, kSlot, cudaMemcpyDefault, stream));
      }
      CHECK(cudaStreamSynchronize(stream));
      double seconds = MPI_Wtime() - start;
      MPI_Allreduce(MPI_IN_PLACE, &seconds, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      if (seconds < best) best = seconds;
    }
    if (rank == 0)
      std::printf("%-26s %10.3f %12.1f\n", layout.name, best * 1e3, kCopies * kSlot / best / 1e9);
    MPI_Barrier(MPI_COMM_WORLD);
    CHECK(cudaIpcCloseMemHandle(remote));
    MPI_Barrier(MPI_COMM_WORLD);
    CHECK(cudaFree(landing));
  }
  CHECK(cudaStreamDestroy(stream));
  CHECK(cudaFree(source));
  MPI_Finalize();
  return 0;
}

// What the device API's MPI test programs share: failed checks counted
// and reported by rank, CUDA errors fatal to the job.
#pragma once

#include <cuda_runtime.h>
#include <mpi.h>

#include <cstdio>
#include <string>

namespace mpi_gpu_test {

inline int& errors() {
  static int count = 0;
  return count;
}

inline void check(bool ok, const std::string& what) {
  if (ok) return;
  ++errors();
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  std::fprintf(stderr, "FAIL rank %d: %s\n", rank, what.c_str());
}

inline void cuda(cudaError_t error, const char* what) {
  if (error == cudaSuccess) return;
  std::fprintf(stderr, "CUDA error in %s: %s\n", what, cudaGetErrorString(error));
  MPI_Abort(MPI_COMM_WORLD, 1);
}

// Every rank's failed checks summed; rank 0 prints the verdict. True when none failed.
inline bool verdict() {
  int total = 0;
  MPI_Allreduce(&errors(), &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank == 0) std::printf(total ? "Found %d errors\n" : "No Errors\n", total);
  return total == 0;
}

}  // namespace mpi_gpu_test

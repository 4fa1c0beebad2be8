/* Uses Ferry's API directly: an allreduce of device memory that Ferry
 * allocated, checked against the sum computed here. Prints "No Errors" on
 * rank 0 when every rank's result is right. */
#include <ferry/ferry.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const int n = 1001;
  double* host = malloc(n * sizeof(double));
  double* device = ferry_device_malloc(n * sizeof(double));
  if (!host || !device || !ferry_is_device_memory(device)) {
    fprintf(stderr, "rank %d: no device memory from Ferry (%s)\n", rank, ferry_device_backend());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  for (int i = 0; i < n; ++i) host[i] = rank * 0.5 + i;
  ferry_memcpy(device, host, n * sizeof(double));
  MPI_Allreduce(MPI_IN_PLACE, device, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  ferry_memcpy(host, device, n * sizeof(double));
  int wrong = 0;
  for (int i = 0; i < n; ++i) wrong += host[i] != 0.25 * size * (size - 1) + (double)size * i;
  int all_wrong = 0;
  MPI_Reduce(&wrong, &all_wrong, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
  if (rank == 0) printf(all_wrong ? "%d wrong elements\n" : "No Errors\n", all_wrong);
  ferry_device_free(device);
  free(host);
  MPI_Finalize();
  return all_wrong != 0;
}

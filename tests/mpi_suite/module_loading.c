/* CUDA_MODULE_LOADING and CUDA_DEVICE_MAX_CONNECTIONS as the program finds
 * them after libferry.so's constructor: argv[1] and argv[2] are the values
 * expected ("unset" for none). Built twice:
 * once naming ferry_win_device_handle (linked against libferry.so, as device
 * API programs are), once not. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef SUITE_NAMES_DEVICE_API
#include "ferry/device.h"
#endif

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const char* names[2] = {"CUDA_MODULE_LOADING", "CUDA_DEVICE_MAX_CONNECTIONS"};
  int errors = 0;
  for (int i = 0; i < 2; ++i) {
    const char* expected = argc > 1 + i ? argv[1 + i] : "unset";
    const char* seen = getenv(names[i]);
    if (!seen) seen = "unset";
    if (strcmp(seen, expected) == 0) continue;
    ++errors;
    fprintf(stderr, "rank %d: %s is %s, expected %s\n", rank, names[i], seen, expected);
  }
#ifdef SUITE_NAMES_DEVICE_API
  if (argc > 3) { /* never taken: the call only makes the program name the function */
    ferry_window_device_t handle;
    errors += ferry_win_device_handle(MPI_WIN_NULL, &handle) == MPI_SUCCESS;
  }
#endif
  int total = 0;
  MPI_Reduce(&errors, &total, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
  if (rank == 0 && total == 0) printf("No Errors\n");
  MPI_Finalize();
  return total == 0 ? 0 : 1;
}

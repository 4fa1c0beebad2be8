/* CUDA_MODULE_LOADING as the program finds it after libferry.so's
 * constructor: argv[1] is the value expected ("unset" for none). Built twice:
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
  const char* expected = argc > 1 ? argv[1] : "unset";
  const char* seen = getenv("CUDA_MODULE_LOADING");
  if (!seen) seen = "unset";
  int errors = strcmp(seen, expected) != 0;
  if (errors) fprintf(stderr, "rank %d: CUDA_MODULE_LOADING is %s, expected %s\n", rank, seen, expected);
#ifdef SUITE_NAMES_DEVICE_API
  if (argc > 2) { /* never taken: the call only makes the program name the function */
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

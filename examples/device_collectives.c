/* A plain MPI program whose buffers are device memory. It knows nothing of
 * Ferry beyond allocating with ferry_device_malloc (found at run time, so the
 * binary links only MPI): run it with
 *   mpirun -np 2 -x LD_PRELOAD=/path/libferry.so ./ferry-demo
 * On a GPU the buffers are cudaMalloc memory; without one, emulated device
 * memory that host code cannot touch, so every byte must go through Ferry. */
#include <dlfcn.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef void* (*malloc_fn)(size_t);
typedef void (*free_fn)(void*);
typedef int (*memcpy_fn)(void*, const void*, size_t);
typedef const char* (*backend_fn)(void);

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);

  malloc_fn device_malloc = (malloc_fn)dlsym(RTLD_DEFAULT, "ferry_device_malloc");
  free_fn device_free = (free_fn)dlsym(RTLD_DEFAULT, "ferry_device_free");
  memcpy_fn device_copy = (memcpy_fn)dlsym(RTLD_DEFAULT, "ferry_memcpy");
  backend_fn backend = (backend_fn)dlsym(RTLD_DEFAULT, "ferry_device_backend");
  if (!device_malloc || !device_free || !device_copy || !backend) {
    if (rank == 0) fprintf(stderr, "ferry-demo: run with -x LD_PRELOAD=/path/to/libferry.so\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }

  const int n = 1 << 20;
  double* host = malloc(n * sizeof(double));
  double* device = device_malloc(n * sizeof(double));
  for (int i = 0; i < n; ++i) host[i] = rank + i % 7;
  device_copy(device, host, n * sizeof(double));

  /* Allreduce: sum over ranks of (rank + i % 7). */
  MPI_Allreduce(MPI_IN_PLACE, device, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  device_copy(host, device, n * sizeof(double));
  int errors = 0;
  for (int i = 0; i < n; ++i)
    if (host[i] != size * (size - 1) / 2.0 + size * (double)(i % 7)) ++errors;

  /* Bcast from the last rank. */
  for (int i = 0; i < n; ++i) host[i] = rank == size - 1 ? i * 0.5 : -1;
  device_copy(device, host, n * sizeof(double));
  MPI_Bcast(device, n, MPI_DOUBLE, size - 1, MPI_COMM_WORLD);
  device_copy(host, device, n * sizeof(double));
  for (int i = 0; i < n; ++i)
    if (host[i] != i * 0.5) ++errors;

  /* Alltoallv: rank r sends (p + 1) ints to rank p, each value 1000 * r + p. */
  int* counts = malloc(size * sizeof(int));
  int* displs = malloc(size * sizeof(int));
  int* rcounts = malloc(size * sizeof(int));
  int* rdispls = malloc(size * sizeof(int));
  int total_send = 0, total_recv = 0;
  for (int p = 0; p < size; ++p) {
    counts[p] = p + 1;
    displs[p] = total_send;
    total_send += counts[p];
    rcounts[p] = rank + 1;
    rdispls[p] = total_recv;
    total_recv += rcounts[p];
  }
  int* send_host = malloc(total_send * sizeof(int));
  int* recv_host = malloc(total_recv * sizeof(int));
  for (int p = 0; p < size; ++p)
    for (int k = 0; k < counts[p]; ++k) send_host[displs[p] + k] = 1000 * rank + p;
  int* send_dev = device_malloc(total_send * sizeof(int));
  int* recv_dev = device_malloc(total_recv * sizeof(int));
  device_copy(send_dev, send_host, total_send * sizeof(int));
  MPI_Alltoallv(send_dev, counts, displs, MPI_INT, recv_dev, rcounts, rdispls, MPI_INT, MPI_COMM_WORLD);
  device_copy(recv_host, recv_dev, total_recv * sizeof(int));
  for (int p = 0; p < size; ++p)
    for (int k = 0; k < rcounts[p]; ++k)
      if (recv_host[rdispls[p] + k] != 1000 * p + rank) ++errors;

  int all_errors = 0;
  MPI_Reduce(&errors, &all_errors, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
  if (rank == 0)
    printf("ferry-demo: %d ranks, %s device memory: Allreduce, Bcast, Alltoallv on device buffers: %s\n", size,
           backend(), all_errors == 0 ? "correct" : "WRONG");

  device_free(device);
  device_free(send_dev);
  device_free(recv_dev);
  free(host);
  free(counts);
  free(displs);
  free(rcounts);
  free(rdispls);
  free(send_host);
  free(recv_host);
  MPI_Finalize();
  return all_errors == 0 ? 0 : 1;
}

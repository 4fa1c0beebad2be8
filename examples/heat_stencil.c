/* A 2-D heat equation solved by Jacobi iteration, as a plain MPI program
 * whose grids live in device memory. The domain is split into horizontal
 * strips, one per rank; every step exchanges halo rows with MPI_Isend and
 * MPI_Irecv on device buffers, and every few steps checks convergence with
 * an MPI_Iallreduce on a device scalar. It knows nothing of Ferry beyond
 * allocating and copying with ferry_device_malloc and ferry_memcpy (found at
 * run time), so run it with
 *   mpirun -np 4 -x LD_PRELOAD=/path/libferry.so ./ferry-heat-stencil
 * The update itself runs on the host over copies (no kernels here), and the
 * answer is checked bit for bit against the same computation done on one
 * rank in host memory. Exits nonzero on a mismatch. */
#include <dlfcn.h>
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef void* (*malloc_fn)(size_t);
typedef void (*free_fn)(void*);
typedef int (*memcpy_fn)(void*, const void*, size_t);

static malloc_fn device_malloc;
static free_fn device_free;
static memcpy_fn device_copy;

enum { kWidth = 48, kHeight = 37, kMaxSteps = 5000, kCheckEvery = 10 };
static const double kTolerance = 1e-3;

/* Fixed temperatures on the border: hot top edge, a warm left edge. */
static double boundary(int row, int col) {
  if (row == 0) return 100.0;
  if (col == 0) return 25.0 + row % 7;
  return 0.0;
}

/* One Jacobi step on rows [1, rows] of a (rows + 2) x kWidth block whose
 * first and last rows are halos; returns the largest change. The global row
 * of local row 1 is first_row. */
static double jacobi_step(const double* old, double* next, int rows, int first_row) {
  double change = 0.0;
  for (int r = 1; r <= rows; ++r) {
    const int global = first_row + r - 1;
    for (int c = 0; c < kWidth; ++c) {
      double value;
      if (global == 0 || global == kHeight - 1 || c == 0 || c == kWidth - 1) {
        value = boundary(global, c);
      } else {
        value = 0.25 * (old[(r - 1) * kWidth + c] + old[(r + 1) * kWidth + c] + old[r * kWidth + c - 1] +
                        old[r * kWidth + c + 1]);
      }
      next[r * kWidth + c] = value;
      change = fmax(change, fabs(value - old[r * kWidth + c]));
    }
  }
  return change;
}

/* The reference: the whole grid on one rank in host memory, the same steps
 * and the same convergence rule. Returns the number of steps taken. */
static int solve_on_host(double* grid) {
  double* next = calloc((size_t)(kHeight + 2) * kWidth, sizeof(double));
  double* cur = calloc((size_t)(kHeight + 2) * kWidth, sizeof(double));
  int step = 0;
  for (step = 1; step <= kMaxSteps; ++step) {
    const double change = jacobi_step(cur, next, kHeight, 0);
    double* t = cur;
    cur = next;
    next = t;
    if (step % kCheckEvery == 0 && change < kTolerance) break;
  }
  memcpy(grid, cur + kWidth, (size_t)kHeight * kWidth * sizeof(double));
  free(cur);
  free(next);
  return step > kMaxSteps ? kMaxSteps : step;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  device_malloc = (malloc_fn)dlsym(RTLD_DEFAULT, "ferry_device_malloc");
  device_free = (free_fn)dlsym(RTLD_DEFAULT, "ferry_device_free");
  device_copy = (memcpy_fn)dlsym(RTLD_DEFAULT, "ferry_memcpy");
  if (!device_malloc || !device_free || !device_copy) {
    if (rank == 0) fprintf(stderr, "heat_stencil: run with -x LD_PRELOAD=/path/to/libferry.so\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }

  /* Strips of kHeight / size rows, the first ranks taking one more. */
  const int rows = kHeight / size + (rank < kHeight % size ? 1 : 0);
  const int first_row = rank * (kHeight / size) + (rank < kHeight % size ? rank : kHeight % size);
  const int up = rank > 0 ? rank - 1 : MPI_PROC_NULL;
  const int down = rank < size - 1 ? rank + 1 : MPI_PROC_NULL;
  const size_t block_bytes = (size_t)(rows + 2) * kWidth * sizeof(double);
  const size_t row_bytes = kWidth * sizeof(double);

  double* host_old = calloc((size_t)(rows + 2) * kWidth, sizeof(double));
  double* host_new = calloc((size_t)(rows + 2) * kWidth, sizeof(double));
  double* d_old = device_malloc(block_bytes);
  double* d_new = device_malloc(block_bytes);
  double* d_change = device_malloc(sizeof(double));
  double* d_max_change = device_malloc(sizeof(double));
  device_copy(d_old, host_old, block_bytes);
  device_copy(d_new, host_new, block_bytes);

  int step = 0;
  for (step = 1; step <= kMaxSteps; ++step) {
    /* Halos: my first row goes up, my last row down; theirs arrive in my halo rows. */
    MPI_Request halo[4];
    MPI_Irecv(d_old, kWidth, MPI_DOUBLE, up, 1, MPI_COMM_WORLD, &halo[0]);
    MPI_Irecv(d_old + (size_t)(rows + 1) * kWidth, kWidth, MPI_DOUBLE, down, 0, MPI_COMM_WORLD, &halo[1]);
    MPI_Isend(d_old + kWidth, kWidth, MPI_DOUBLE, up, 0, MPI_COMM_WORLD, &halo[2]);
    MPI_Isend(d_old + (size_t)rows * kWidth, kWidth, MPI_DOUBLE, down, 1, MPI_COMM_WORLD, &halo[3]);
    MPI_Waitall(4, halo, MPI_STATUSES_IGNORE);

    /* The update, on the host over copies of the device blocks. */
    device_copy(host_old, d_old, block_bytes);
    const double change = jacobi_step(host_old, host_new, rows, first_row);
    device_copy(d_new + kWidth, host_new + kWidth, (size_t)rows * row_bytes);
    double* t = d_old;
    d_old = d_new;
    d_new = t;

    if (step % kCheckEvery == 0) {
      MPI_Request reduce;
      device_copy(d_change, (const void*)&change, sizeof(double));
      MPI_Iallreduce(d_change, d_max_change, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD, &reduce);
      MPI_Wait(&reduce, MPI_STATUS_IGNORE);
      double max_change = 0.0;
      device_copy(&max_change, d_max_change, sizeof(double));
      if (max_change < kTolerance) break;
    }
  }
  if (step > kMaxSteps) step = kMaxSteps;

  /* Gather the strips on rank 0 (host buffers) and compare bit for bit. */
  double* strip = malloc((size_t)rows * row_bytes);
  device_copy(strip, d_old + kWidth, (size_t)rows * row_bytes);
  int* counts = malloc(size * sizeof(int));
  int* displs = malloc(size * sizeof(int));
  for (int r = 0, offset = 0; r < size; ++r) {
    counts[r] = (kHeight / size + (r < kHeight % size ? 1 : 0)) * kWidth;
    displs[r] = offset;
    offset += counts[r];
  }
  double* grid = rank == 0 ? malloc((size_t)kHeight * row_bytes) : NULL;
  MPI_Gatherv(strip, rows * kWidth, MPI_DOUBLE, grid, counts, displs, MPI_DOUBLE, 0, MPI_COMM_WORLD);

  int wrong = 0;
  if (rank == 0) {
    double* reference = malloc((size_t)kHeight * row_bytes);
    const int reference_steps = solve_on_host(reference);
    for (int i = 0; i < kHeight * kWidth; ++i) wrong += memcmp(&grid[i], &reference[i], sizeof(double)) != 0;
    if (reference_steps != step) wrong += 1;
    printf("heat_stencil: %d ranks, %dx%d grid, %d steps (host reference %d): %s\n", size, kHeight, kWidth,
           step, reference_steps, wrong == 0 ? "matches the host reference bit for bit" : "WRONG");
    /* The line the MPI test harness looks for. */
    if (wrong == 0) printf("No Errors\n");
    free(reference);
    free(grid);
  }
  MPI_Bcast(&wrong, 1, MPI_INT, 0, MPI_COMM_WORLD);

  device_free(d_old);
  device_free(d_new);
  device_free(d_change);
  device_free(d_max_change);
  free(host_old);
  free(host_new);
  free(strip);
  free(counts);
  free(displs);
  MPI_Finalize();
  return wrong == 0 ? 0 : 1;
}

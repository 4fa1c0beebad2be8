// nvshmem-compare: NVSHMEM's numbers for what rma-bench and
// device-put-latency measure in Ferry, on the same machine in the same run:
// a host-initiated put of 8 B and 128 MiB (nvshmemx_putmem_on_stream +
// nvshmemx_quiet_on_stream + stream sync, host clock, median), and
// GPU-initiated put + signal and signal alone, one way, as a ping-pong
// between the two GPUs' kernels. Not part of the build (NVSHMEM is not a
// dependency); on a machine with NVSHMEM (NV = its folder):
//
//   nvcc -O2 -arch=sm_90 -rdc=true -I$NV/include $(mpicxx --showme:compile) \
//        bench/nvshmem_compare.cu -o nvshmem-compare \
//        -L$NV/lib -l:libnvshmem_host.so.3 -lnvshmem_device $(mpicxx --showme:link) -lcuda
//   mpirun -np 2 -x NVSHMEM_DISABLE_NVLS=1 ./nvshmem-compare
#include <cuda_runtime.h>
#include <mpi.h>
#include <nvshmem.h>
#include <nvshmemx.h>

#include <algorithm>
#include <cstdio>
#include <vector>

namespace {

__global__ void signal_pingpong(uint64_t* signal, int iterations, int rank) {
  const int peer = 1 - rank;
  for (uint64_t i = 1; i <= static_cast<uint64_t>(iterations); ++i) {
    if (rank == 0) {
      nvshmemx_signal_op(signal, i, NVSHMEM_SIGNAL_SET, peer);
      nvshmem_signal_wait_until(signal, NVSHMEM_CMP_GE, i);
    } else {
      nvshmem_signal_wait_until(signal, NVSHMEM_CMP_GE, i);
      nvshmemx_signal_op(signal, i, NVSHMEM_SIGNAL_SET, peer);
    }
  }
}

__global__ void put_signal_pingpong(uint64_t* data, uint64_t* signal, int iterations, int rank) {
  const int peer = 1 - rank;
  uint64_t value = 0;
  for (uint64_t i = 1; i <= static_cast<uint64_t>(iterations); ++i) {
    if (rank == 0) {
      value = i;
      nvshmem_putmem_signal(data, &value, sizeof(value), signal, i, NVSHMEM_SIGNAL_SET, peer);
      nvshmem_signal_wait_until(signal, NVSHMEM_CMP_GE, i);
    } else {
      nvshmem_signal_wait_until(signal, NVSHMEM_CMP_GE, i);
      nvshmem_putmem_signal(data, &value, sizeof(value), signal, i, NVSHMEM_SIGNAL_SET, peer);
    }
  }
}

template <typename Launch>
double one_way_us(Launch launch, uint64_t* signal, int iterations) {
  cudaMemset(signal, 0, sizeof(uint64_t));
  cudaDeviceSynchronize();
  nvshmem_barrier_all();
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  cudaEventRecord(start);
  launch();
  cudaEventRecord(stop);
  cudaEventSynchronize(stop);
  float ms = 0;
  cudaEventElapsedTime(&ms, start, stop);
  return ms * 1e3 / (2.0 * iterations);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int devices = 0;
  cudaGetDeviceCount(&devices);
  cudaSetDevice(rank % devices);
  nvshmemx_uniqueid_t id = NVSHMEMX_UNIQUEID_INITIALIZER;
  if (rank == 0) nvshmemx_get_uniqueid(&id);
  MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
  nvshmemx_init_attr_t attr = NVSHMEMX_INIT_ATTR_INITIALIZER;
  nvshmemx_set_attr_uniqueid_args(rank, size, &id, &attr);
  nvshmemx_init_attr(NVSHMEMX_INIT_WITH_UNIQUEID, &attr);

  const size_t max_bytes = 128u << 20;
  char* target = static_cast<char*>(nvshmem_malloc(max_bytes));
  uint64_t* data = static_cast<uint64_t*>(nvshmem_malloc(64));
  uint64_t* signal = static_cast<uint64_t*>(nvshmem_malloc(64));
  char* source = nullptr;
  cudaMalloc(&source, max_bytes);
  cudaMemset(source, 7, max_bytes);
  cudaStream_t stream;
  cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);

  if (rank == 0) std::printf("# nvshmem-compare: host put + quiet (median host us), GPU ping-pong one way\n");
  for (size_t bytes : {size_t(8), size_t(2) << 20, max_bytes}) {
    const int iterations = bytes <= 8 ? 2000 : 30;
    std::vector<double> us;
    for (int i = 0; i < 10 + iterations; ++i) {
      const double start = MPI_Wtime();
      if (rank == 0) {
        nvshmemx_putmem_on_stream(target, source, bytes, 1, stream);
        nvshmemx_quiet_on_stream(stream);
        cudaStreamSynchronize(stream);
      }
      if (i >= 10) us.push_back((MPI_Wtime() - start) * 1e6);
    }
    if (rank == 0)
      std::printf("nvshmem host put %10zu B: %9.2f us %8.2f GB/s\n", bytes, median(us), bytes / median(us) / 1e3);
  }
  nvshmem_barrier_all();

  const int pingpongs = 200000;
  std::vector<double> signal_only, put_signal;
  for (int trial = 0; trial < 5; ++trial) {
    signal_only.push_back(one_way_us([&] { signal_pingpong<<<1, 1>>>(signal, pingpongs, rank); }, signal, pingpongs));
    put_signal.push_back(
        one_way_us([&] { put_signal_pingpong<<<1, 1>>>(data, signal, pingpongs, rank); }, signal, pingpongs));
  }
  if (rank == 0) {
    std::printf("nvshmem signal ping-pong:        %.3f us one way\n", median(signal_only));
    std::printf("nvshmem putmem_signal(8 B):      %.3f us one way\n", median(put_signal));
  }
  nvshmem_free(target);
  nvshmem_free(data);
  nvshmem_free(signal);
  cudaFree(source);
  nvshmem_finalize();
  MPI_Finalize();
  return 0;
}

// iallreduce-overlap: how much of an MPI_Iallreduce on device buffers hides
// behind a compute kernel, for Ferry, NCCL and staging by hand, in one run.
//
//   mpirun -np 2 -x LD_PRELOAD=/path/libferry.so iallreduce-overlap [--nccl PATH|none] [--sizes LIST] [--iters N]
//
// For each size (bytes per rank, floats, sum) and each way, the host clock
// as the caller feels it, median of --iters after warm-up, every iteration
// starting at a barrier:
//   comm     the allreduce alone (ferry: MPI_Iallreduce + MPI_Wait; nccl:
//            ncclAllReduce + stream sync; staged: copy to host,
//            MPI_Iallreduce, MPI_Wait, copy back);
//   compute  a kernel that fills the GPU for about as long as Ferry's comm;
//   both     the allreduce started, the kernel launched on another stream,
//            the kernel synchronized, then the allreduce completed.
// overlap = (comm + compute - both) / min(comm, compute): 1 is complete
// hiding, 0 none. Results are checked against a host reference.
#include <cuda_runtime_api.h>
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "ferry_bench_nccl.h"

namespace {

void check(cudaError_t error, const char* what) {
  if (error != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(error));
}

void check_mpi(int result, const char* what) {
  if (result != MPI_SUCCESS) throw std::runtime_error(std::string(what) + " failed");
}

// Many short blocks, as a real kernel has: the engine's own small kernels
// can take SMs between them.
__global__ void compute_kernel(float* sink, long spins) {
  float x = threadIdx.x * 0.001f, y = blockIdx.x * 0.002f;
  for (long i = 0; i < spins; ++i) x = fmaf(x, 0.999f, y);
  if (x == 12345.f) sink[blockIdx.x] = x;  // never true; keeps the loop
}

double now_us() {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Median time of body over iters, each started at a barrier, after warm-up.
double time_median(int iters, const std::function<void()>& body) {
  for (int i = 0; i < 3; ++i) body();
  std::vector<double> samples;
  for (int i = 0; i < iters; ++i) {
    MPI_Barrier(MPI_COMM_WORLD);
    const double start = now_us();
    body();
    samples.push_back(now_us() - start);
  }
  // Every rank reports the slowest rank's median: the call ends for all.
  double mine = median(samples), slowest = 0;
  MPI_Allreduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return slowest;
}

std::size_t parse_size(const std::string& text) {
  char* end = nullptr;
  std::size_t value = std::strtoull(text.c_str(), &end, 10);
  if (*end == 'K') value <<= 10;
  if (*end == 'M') value <<= 20;
  if (*end == 'G') value <<= 30;
  return value;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, nranks = 1, local_rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  MPI_Comm local;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local);
  MPI_Comm_rank(local, &local_rank);
  std::vector<std::size_t> sizes = {std::size_t{1} << 20, std::size_t{16} << 20, std::size_t{64} << 20,
                                    std::size_t{256} << 20};
  std::string nccl_path = "libnccl.so.2";
  int iters = 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string option = argv[i], value = argv[i + 1];
    if (option == "--nccl") nccl_path = value;
    if (option == "--iters") iters = std::max(1, std::atoi(value.c_str()));
    if (option == "--sizes") {
      sizes.clear();
      for (std::size_t begin = 0; begin < value.size();) {
        const std::size_t comma = std::min(value.find(',', begin), value.size());
        sizes.push_back(parse_size(value.substr(begin, comma - begin)));
        begin = comma + 1;
      }
    }
  }
  try {
    int devices = 0;
    check(cudaGetDeviceCount(&devices), "cudaGetDeviceCount");
    check(cudaSetDevice(local_rank % devices), "cudaSetDevice");
    cudaDeviceProp prop{};
    check(cudaGetDeviceProperties(&prop, local_rank % devices), "cudaGetDeviceProperties");
    cudaStream_t compute_stream = nullptr, nccl_stream = nullptr;
    check(cudaStreamCreateWithFlags(&compute_stream, cudaStreamNonBlocking), "cudaStreamCreate");
    check(cudaStreamCreateWithFlags(&nccl_stream, cudaStreamNonBlocking), "cudaStreamCreate");
    const int blocks = prop.multiProcessorCount * 16;
    float* sink = nullptr;
    check(cudaMalloc(&sink, blocks * sizeof(float)), "cudaMalloc");

    ferry_bench::nccl::Library nccl;
    ferry_bench::nccl::Comm nccl_comm = nullptr;
    std::string why;
    if (nccl_path != "none") {
      setenv("NCCL_NVLS_ENABLE", "0", 1);
      if (ferry_bench::nccl::load({nccl_path}, &nccl, &why)) {
        ferry_bench::nccl::UniqueId id{};
        if (rank == 0) nccl.api.get_unique_id(&id);
        MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
        if (nccl.api.comm_init_rank(&nccl_comm, nranks, id, rank) != ferry_bench::nccl::kSuccess) nccl_comm = nullptr;
      }
    }
    if (rank == 0) {
      std::printf("# iallreduce-overlap: %d ranks, %s, %d SMs; compute kernel %d blocks of 256 threads; NCCL %s\n",
                  nranks, prop.name, prop.multiProcessorCount, blocks, nccl_comm ? nccl.path.c_str() : "none");
      std::printf("# times in us (median of %d, host clock, slowest rank); overlap = (comm+compute-both)/min\n",
                  iters);
      std::printf("%10s  %-8s %10s %10s %10s %8s\n", "bytes", "way", "comm", "compute", "both", "overlap");
    }

    for (const std::size_t bytes : sizes) {
      const int count = static_cast<int>(bytes / sizeof(float));
      std::vector<float> input(count), expected(count, 0.f), result(count);
      for (int r = 0; r < nranks; ++r)
        for (int i = 0; i < count; ++i) {
          const float v = static_cast<float>(((i * 7 + r * 13) % 101) - 50);
          if (r == rank) input[i] = v;
          expected[i] += v;
        }
      float *send = nullptr, *recv = nullptr;
      check(cudaMalloc(&send, bytes), "cudaMalloc");
      check(cudaMalloc(&recv, bytes), "cudaMalloc");
      check(cudaMemcpy(send, input.data(), bytes, cudaMemcpyHostToDevice), "cudaMemcpy");
      std::vector<float> host_send(input), host_recv(count);
      auto verify = [&](const char* way) {
        check(cudaMemcpy(result.data(), recv, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy");
        if (result != expected) throw std::runtime_error(std::string(way) + ": wrong sum at " + std::to_string(bytes));
        check(cudaMemset(recv, 0, bytes), "cudaMemset");
      };

      struct Way {
        const char* name;
        std::function<void()> start, finish;
      };
      MPI_Request request = MPI_REQUEST_NULL;
      std::vector<Way> ways;
      ways.push_back({"ferry",
                      [&] {
                        check_mpi(MPI_Iallreduce(send, recv, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &request),
                                  "MPI_Iallreduce");
                      },
                      [&] { check_mpi(MPI_Wait(&request, MPI_STATUS_IGNORE), "MPI_Wait"); }});
      if (nccl_comm)
        ways.push_back({"nccl",
                        [&] {
                          if (nccl.api.all_reduce(send, recv, count, ferry_bench::nccl::kFloat32, ferry_bench::nccl::kSum,
                                                  nccl_comm, nccl_stream) != ferry_bench::nccl::kSuccess)
                            throw std::runtime_error("ncclAllReduce failed");
                        },
                        [&] { check(cudaStreamSynchronize(nccl_stream), "cudaStreamSynchronize"); }});
      ways.push_back({"staged",
                      [&] {
                        check(cudaMemcpy(host_send.data(), send, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy");
                        check_mpi(MPI_Iallreduce(host_send.data(), host_recv.data(), count, MPI_FLOAT, MPI_SUM,
                                                 MPI_COMM_WORLD, &request),
                                  "MPI_Iallreduce");
                      },
                      [&] {
                        check_mpi(MPI_Wait(&request, MPI_STATUS_IGNORE), "MPI_Wait");
                        check(cudaMemcpy(recv, host_recv.data(), bytes, cudaMemcpyHostToDevice), "cudaMemcpy");
                      }});

      // The kernel is sized to Ferry's comm time (at least 50 us).
      const double ferry_comm = time_median(iters, [&] {
        ways[0].start();
        ways[0].finish();
      });
      verify("ferry");
      long spins = 1000;
      auto run_kernel = [&] {
        compute_kernel<<<blocks, 256, 0, compute_stream>>>(sink, spins);
        check(cudaStreamSynchronize(compute_stream), "compute kernel");
      };
      const double probe = time_median(5, run_kernel);
      spins = std::max<long>(1, static_cast<long>(spins * std::max(50.0, ferry_comm) / probe));
      MPI_Bcast(&spins, 1, MPI_LONG, 0, MPI_COMM_WORLD);
      const double compute = time_median(iters, run_kernel);

      for (const Way& way : ways) {
        const double comm = time_median(iters, [&] {
          way.start();
          way.finish();
        });
        verify(way.name);
        const double both = time_median(iters, [&] {
          way.start();
          compute_kernel<<<blocks, 256, 0, compute_stream>>>(sink, spins);
          check(cudaStreamSynchronize(compute_stream), "compute kernel");
          way.finish();
        });
        verify(way.name);
        const double overlap = std::clamp((comm + compute - both) / std::min(comm, compute), 0.0, 1.0);
        if (rank == 0)
          std::printf("%10zu  %-8s %10.1f %10.1f %10.1f %7.0f%%\n", bytes, way.name, comm, compute, both,
                      overlap * 100);
      }
      cudaFree(send);
      cudaFree(recv);
    }
    if (nccl_comm) nccl.api.comm_destroy(nccl_comm);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "iallreduce-overlap rank %d: %s\n", rank, error.what());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Finalize();
  return 0;
}

// window-bandwidth: the pattern of OSU's osu_bw on device buffers. Rank 0
// posts a window of MPI_Isend (64 by default) of one size and waits for all;
// rank 1 posts as many MPI_Irecv and waits; a small reply ends each window.
// Two ways on the same device buffers, in one run: the device buffers given
// to MPI as they are (Ferry), and the staged way an application without
// Ferry takes (each message copied to pinned host memory, host MPI, copied
// back on the receiving side). Bandwidth is bytes moved per second of the
// sender's host clock over the timed windows, median window time.
//
//   mpirun -np 2 -x LD_PRELOAD=libferry.so window-bandwidth [--sizes 8M,16M,...] [--window 64] [--iters 10]
//
// Device memory comes from ferry_device_malloc, so the program needs no GPU
// toolkit and runs on the emulated device too. FERRY_STATS=1 shows how many
// sends were copied straight from the send buffer and how many went through
// bounce buffers.
#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench_common.h"

namespace {

using bench::Ferry;
using bench::median;
using bench::parse_sizes;
using bench::seconds_since;

// One window each way of sending: the device buffers to MPI (staged false),
// or through host copies by hand (staged true). Returns the window's time
// on rank 0.
double window(const Ferry& ferry, int rank, bool staged, const std::vector<char*>& device,
              const std::vector<char*>& host, std::size_t bytes) {
  const int n = static_cast<int>(device.size());
  std::vector<MPI_Request> requests(n);
  MPI_Barrier(MPI_COMM_WORLD);
  const auto start = std::chrono::steady_clock::now();
  const int count = static_cast<int>(bytes);
  if (rank == 0) {
    for (int i = 0; i < n; ++i) {
      char* buffer = device[i];
      if (staged) {
        ferry.memcpy(host[i], device[i], bytes);
        buffer = host[i];
      }
      MPI_Isend(buffer, count, MPI_BYTE, 1, 100, MPI_COMM_WORLD, &requests[i]);
    }
    MPI_Waitall(n, requests.data(), MPI_STATUSES_IGNORE);
    int reply = 0;
    MPI_Recv(&reply, 1, MPI_INT, 1, 101, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  } else if (rank == 1) {
    for (int i = 0; i < n; ++i)
      MPI_Irecv(staged ? host[i] : device[i], count, MPI_BYTE, 0, 100, MPI_COMM_WORLD, &requests[i]);
    MPI_Waitall(n, requests.data(), MPI_STATUSES_IGNORE);
    if (staged)
      for (int i = 0; i < n; ++i) ferry.memcpy(device[i], host[i], bytes);
    int reply = 0;
    MPI_Send(&reply, 1, MPI_INT, 0, 101, MPI_COMM_WORLD);
  }
  return seconds_since(start);
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  std::vector<std::size_t> sizes = parse_sizes("1M,8M,16M,32M,64M,128M,256M");
  int window_size = 64, iters = 10, warmup = 2;
  bool with_staged = true;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--sizes" && i + 1 < argc)
      sizes = parse_sizes(argv[++i]);
    else if (arg == "--window" && i + 1 < argc)
      window_size = std::atoi(argv[++i]);
    else if (arg == "--iters" && i + 1 < argc)
      iters = std::atoi(argv[++i]);
    else if (arg == "--no-staged")
      with_staged = false;
  }
  if (size < 2) {
    if (rank == 0) std::fprintf(stderr, "window-bandwidth: needs two ranks\n");
    MPI_Finalize();
    return 2;
  }
  const Ferry ferry = bench::load_ferry("window-bandwidth");
  if (rank == 0) std::printf("%12s %8s %16s %16s\n", "bytes", "window", "ferry GB/s", "staged GB/s");
  for (std::size_t bytes : sizes) {
    std::vector<char*> device(window_size), host;
    // The receiver's window, and the sender's, of distinct buffers as osu_bw
    // uses (one buffer would let every send name the same memory).
    for (char*& d : device) {
      d = static_cast<char*>(ferry.malloc(bytes));
      std::vector<char> fill(bytes, static_cast<char>(rank + 1));
      if (!d || ferry.memcpy(d, fill.data(), bytes) != 0) {
        std::fprintf(stderr, "window-bandwidth: no device memory for %zu bytes\n", bytes);
        MPI_Abort(MPI_COMM_WORLD, 1);
      }
    }
    if (with_staged) {
      host.resize(window_size);
      for (char*& h : host) MPI_Alloc_mem(static_cast<MPI_Aint>(bytes), MPI_INFO_NULL, &h);
    }
    double results[2] = {0, 0};
    for (int way = 0; way < (with_staged ? 2 : 1); ++way) {
      std::vector<double> times;
      for (int it = 0; it < warmup + iters; ++it) {
        const double t = window(ferry, rank, way == 1, device, host, bytes);
        if (it >= warmup) times.push_back(t);
      }
      results[way] = static_cast<double>(bytes) * window_size / median(times) / 1e9;
    }
    if (rank == 0) {
      char staged_text[32] = "-";
      if (with_staged) std::snprintf(staged_text, sizeof staged_text, "%.2f", results[1]);
      std::printf("%12zu %8d %16.2f %16s\n", bytes, window_size, results[0], staged_text);
      std::fflush(stdout);
    }
    for (char* d : device) ferry.free(d);
    for (char* h : host) MPI_Free_mem(h);
  }
  MPI_Finalize();
  return 0;
}

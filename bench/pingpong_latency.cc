// pingpong-latency: the pattern of OSU's osu_latency on device buffers. Rank
// 0 sends a message to rank 1 with MPI_Send and waits for it to come back
// with MPI_Recv; rank 1 receives and sends it back. The latency is half the
// round trip, the median of many after warm-up, on rank 0's host clock. Two
// ways on the same device buffers, in one run: the device buffers given to
// MPI as they are (Ferry), and staged by hand (copied to pinned host memory
// before each send, back to the device after each receive). Each way's first
// round trip of each size is checked: what comes back is what was sent.
//
//   mpirun -np 2 -x LD_PRELOAD=libferry.so pingpong-latency [--sizes 8,4K,1M] [--iters 1000]
//
// Ranks above 1 only take part in the barriers.
#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench_common.h"

namespace {

using bench::Ferry;

struct Buffers {
  char* device_send;
  char* device_recv;
  char* host;  // pinned by MPI_Alloc_mem where the MPI can; the staged way's
};

// One round trip; returns its time on rank 0.
double round_trip(const Ferry& ferry, int rank, bool staged, const Buffers& b, std::size_t bytes) {
  const int count = static_cast<int>(bytes);
  const auto start = std::chrono::steady_clock::now();
  if (rank == 0) {
    if (staged) {
      ferry.memcpy(b.host, b.device_send, bytes);
      MPI_Send(b.host, count, MPI_BYTE, 1, 1, MPI_COMM_WORLD);
      MPI_Recv(b.host, count, MPI_BYTE, 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      ferry.memcpy(b.device_recv, b.host, bytes);
    } else {
      MPI_Send(b.device_send, count, MPI_BYTE, 1, 1, MPI_COMM_WORLD);
      MPI_Recv(b.device_recv, count, MPI_BYTE, 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    }
  } else if (rank == 1) {
    // Rank 1 sends back what it received, from the buffer it received into.
    if (staged) {
      MPI_Recv(b.host, count, MPI_BYTE, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      ferry.memcpy(b.device_recv, b.host, bytes);
      ferry.memcpy(b.host, b.device_recv, bytes);
      MPI_Send(b.host, count, MPI_BYTE, 0, 1, MPI_COMM_WORLD);
    } else {
      MPI_Recv(b.device_recv, count, MPI_BYTE, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      MPI_Send(b.device_recv, count, MPI_BYTE, 0, 1, MPI_COMM_WORLD);
    }
  }
  return bench::seconds_since(start);
}

// Rank 0's device receive buffer after one round trip equals its send
// buffer of fresh bytes; false on any rank means a wrong result somewhere.
bool round_trip_is_right(const Ferry& ferry, int rank, bool staged, const Buffers& b, std::size_t bytes,
                         unsigned seed) {
  std::vector<char> sent(bytes), back(bytes);
  for (std::size_t i = 0; i < bytes; ++i) sent[i] = static_cast<char>((i * 131 + seed * 7 + 1) % 251);
  int right = 1;
  if (rank == 0) {
    std::vector<char> poison(bytes, 0x5a);
    right =
        ferry.memcpy(b.device_send, sent.data(), bytes) == 0 && ferry.memcpy(b.device_recv, poison.data(), bytes) == 0;
  }
  MPI_Barrier(MPI_COMM_WORLD);
  round_trip(ferry, rank, staged, b, bytes);
  if (rank == 0) right = right && ferry.memcpy(back.data(), b.device_recv, bytes) == 0 && back == sent;
  MPI_Allreduce(MPI_IN_PLACE, &right, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
  return right;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  std::vector<std::size_t> sizes = bench::parse_sizes("8,256,4K,64K,1M,4M,16M");
  int iters = 1000, warmup = 100;
  bool with_staged = true;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--sizes" && i + 1 < argc)
      sizes = bench::parse_sizes(argv[++i]);
    else if (arg == "--iters" && i + 1 < argc)
      iters = std::max(1, std::atoi(argv[++i]));
    else if (arg == "--warmup" && i + 1 < argc)
      warmup = std::max(0, std::atoi(argv[++i]));
    else if (arg == "--no-staged")
      with_staged = false;
  }
  if (size < 2) {
    if (rank == 0) std::fprintf(stderr, "pingpong-latency: needs two ranks\n");
    MPI_Finalize();
    return 2;
  }
  const Ferry ferry = bench::load_ferry("pingpong-latency");
  if (rank == 0) std::printf("%12s %14s %14s\n", "bytes", "ferry us", "staged us");
  for (std::size_t bytes : sizes) {
    Buffers b{static_cast<char*>(ferry.malloc(bytes)), static_cast<char*>(ferry.malloc(bytes)), nullptr};
    MPI_Alloc_mem(static_cast<MPI_Aint>(bytes), MPI_INFO_NULL, &b.host);
    if (!b.device_send || !b.device_recv) {
      std::fprintf(stderr, "pingpong-latency: no device memory for %zu bytes\n", bytes);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    double one_way_us[2] = {0, 0};
    for (int way = 0; way < (with_staged ? 2 : 1); ++way) {
      const bool staged = way == 1;
      if (!round_trip_is_right(ferry, rank, staged, b, bytes, static_cast<unsigned>(bytes + way))) {
        if (rank == 0)
          std::fprintf(stderr, "pingpong-latency: %s round trip of %zu bytes came back WRONG\n",
                       staged ? "staged" : "ferry", bytes);
        MPI_Abort(MPI_COMM_WORLD, 1);
      }
      std::vector<double> times;
      MPI_Barrier(MPI_COMM_WORLD);
      for (int it = 0; it < warmup + iters; ++it) {
        const double t = round_trip(ferry, rank, staged, b, bytes);
        if (it >= warmup) times.push_back(t);
      }
      one_way_us[way] = bench::median(times) / 2 * 1e6;
    }
    if (rank == 0) {
      char staged_text[32] = "-";
      if (with_staged) std::snprintf(staged_text, sizeof staged_text, "%.2f", one_way_us[1]);
      std::printf("%12zu %14.2f %14s\n", bytes, one_way_us[0], staged_text);
      std::fflush(stdout);
    }
    ferry.free(b.device_send);
    ferry.free(b.device_recv);
    MPI_Free_mem(b.host);
  }
  MPI_Finalize();
  return 0;
}

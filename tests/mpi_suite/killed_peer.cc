// A peer that dies during a job whose launcher keeps the others running:
// after one MPI_Allreduce on device buffers that every rank makes, the last
// rank kills itself with SIGKILL; rank 0 then calls MPI_Allreduce on device
// buffers (MPI_ERRORS_RETURN) and must get an error, naming the peer, within
// 10 s instead of waiting FERRY_HANDSHAKE_TIMEOUT. The real MPI cannot
// finish a job with a dead rank, so the survivors end with _exit.
// killed_peer_test.sh runs it and reads what rank 0 printed.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <vector>

#include "suite.h"

using namespace suite;

int main(int argc, char** argv) {
  init(&argc, &argv);
  MPI_Comm comm;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  constexpr int kCount = 1001;
  const Buffer send = make_buffer(std::vector<double>(kCount, 1.0), Memory::device);
  const Buffer recv = make_buffer(std::vector<double>(kCount, 0.0), Memory::device);
  const Case what{"MPI_Allreduce", "MPI_DOUBLE", "MPI_SUM", kCount, "device", "every rank alive"};
  check_mpi(MPI_Allreduce(send.data(), recv.data(), kCount, MPI_DOUBLE, MPI_SUM, comm), what);
  MPI_Barrier(comm);
  const int rank = world_rank();
  if (rank == world_size() - 1) raise(SIGKILL);
  if (rank != 0) {
    pause();
    _exit(0);
  }
  sleep(1);
  const auto start = std::chrono::steady_clock::now();
  const int rc = MPI_Allreduce(send.data(), recv.data(), kCount, MPI_DOUBLE, MPI_SUM, comm);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  char text[MPI_MAX_ERROR_STRING] = "";
  int length = 0, error_class = MPI_SUCCESS;
  MPI_Error_class(rc, &error_class);
  MPI_Error_string(rc, text, &length);
  std::printf("rank 0: MPI_Allreduce returned class %d after %.1f s: %s\n", error_class, seconds,
              text);
  std::printf(rc != MPI_SUCCESS && seconds < 10 ? "No Errors\n" : "FAIL: no error within 10 s\n");
  std::fflush(stdout);
  _exit(0);
}

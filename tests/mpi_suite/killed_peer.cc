// A peer that dies during a job whose launcher keeps the others running;
// rank 0 must get an error naming the peer within 10 s instead of waiting
// FERRY_HANDSHAKE_TIMEOUT. The real MPI cannot finish a job with a dead
// rank, so the survivors end with _exit. killed_peer_test.sh runs it and
// reads what rank 0 printed.
//   (no argument) after one MPI_Allreduce on device buffers that every rank
//       makes, the last rank kills itself; rank 0 then calls MPI_Allreduce
//       (MPI_ERRORS_RETURN): the handshake notices.
//   nonblocking: the same with MPI_Iallreduce and MPI_Wait (the engine's
//       nonblocking collectives).
//   waiting: the last rank kills itself from a thread halfway through one of
//       a series of large device MPI_Allreduce calls, so rank 0's device work
//       is waiting for it (with FERRY_TUNE choosing the ring: its FIFOs).
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#include "suite.h"

using namespace suite;

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

const char* g_call = "MPI_Allreduce";

// Rank 0's verdict on a call that should have failed.
[[noreturn]] void report(int rc, double seconds) {
  char text[MPI_MAX_ERROR_STRING] = "";
  int length = 0, error_class = MPI_SUCCESS;
  MPI_Error_class(rc, &error_class);
  MPI_Error_string(rc, text, &length);
  std::printf("rank 0: %s returned class %d after %.1f s: %s\n", g_call, error_class, seconds, text);
  std::printf(rc != MPI_SUCCESS && seconds < 10 ? "No Errors\n" : "FAIL: no error within 10 s\n");
  std::fflush(stdout);
  _exit(0);
}

}  // namespace

int main(int argc, char** argv) {
  init(&argc, &argv);
  const bool waiting = argc > 1 && std::strcmp(argv[1], "waiting") == 0;
  const bool nonblocking = argc > 1 && std::strcmp(argv[1], "nonblocking") == 0;
  MPI_Comm comm;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  if (nonblocking) g_call = "MPI_Iallreduce";
  const int count = waiting ? (16 << 20) + 1 : 1001;
  const Buffer send = make_buffer(std::vector<double>(count, 1.0), Memory::device);
  const Buffer recv = make_buffer(std::vector<double>(count, 0.0), Memory::device);
  auto allreduce = [&] {
    if (!nonblocking) return MPI_Allreduce(send.data(), recv.data(), count, MPI_DOUBLE, MPI_SUM, comm);
    MPI_Request request = MPI_REQUEST_NULL;
    const int rc = MPI_Iallreduce(send.data(), recv.data(), count, MPI_DOUBLE, MPI_SUM, comm, &request);
    return rc == MPI_SUCCESS ? MPI_Wait(&request, MPI_STATUS_IGNORE) : rc;
  };
  const Case what{g_call, "MPI_DOUBLE", "MPI_SUM", count, "device", "every rank alive"};
  // The first call sets up the engine's channels; the second is timed.
  check_mpi(allreduce(), what);
  MPI_Barrier(comm);
  auto start = std::chrono::steady_clock::now();
  check_mpi(allreduce(), what);
  double call_seconds = seconds_since(start);
  MPI_Allreduce(MPI_IN_PLACE, &call_seconds, 1, MPI_DOUBLE, MPI_MAX, comm);
  MPI_Barrier(comm);
  const int rank = world_rank();
  const bool dies = rank == world_size() - 1;
  if (!waiting) {
    if (dies) raise(SIGKILL);
    if (rank != 0) {
      pause();
      _exit(0);
    }
    sleep(1);
    start = std::chrono::steady_clock::now();
    report(allreduce(), seconds_since(start));
  }
  if (dies)
    std::thread([call_seconds] {
      std::this_thread::sleep_for(std::chrono::duration<double>(call_seconds / 2));
      raise(SIGKILL);
    }).detach();
  for (int call = 0; call < 20; ++call) {
    start = std::chrono::steady_clock::now();
    const int rc = allreduce();
    if (rc == MPI_SUCCESS) continue;
    if (rank == 0) report(rc, seconds_since(start));
    pause();
  }
  if (rank == 0) report(MPI_SUCCESS, 0);
  pause();
  _exit(0);
}

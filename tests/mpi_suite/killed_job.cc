// A job that is killed while Ferry holds shared memory between its ranks:
// rank 0 sends device messages to rank 1, whose receive waits, so the
// sends are offers (a claims segment) and, with FERRY_PT2PT_BOUNCE_BYTES=1
// and FERRY_PT2PT_CLAIM_US=1, withdrawn into host bounce buffers. Rank 0
// then prints "holding shared memory" and every rank sleeps until killed;
// killed_job_test.sh kills the job with SIGKILL and looks for what it left.
#include <unistd.h>

#include <cstdio>
#include <vector>

#include "suite.h"

using namespace suite;

int main(int argc, char** argv) {
  init(&argc, &argv);
  constexpr size_t kCount = 1 << 16;
  std::vector<double> values(kCount, 1.5);
  Buffer buffer = make_buffer(values, Memory::device);
  const Case what{"MPI_Isend", "MPI_DOUBLE",
                  "",          static_cast<long>(kCount),
                  "device",    "to a receive never posted"};
  if (world_rank() == 0) {
    MPI_Request request = MPI_REQUEST_NULL;
    check_mpi(MPI_Isend(buffer.data(), kCount, MPI_DOUBLE, 1, 7, MPI_COMM_WORLD, &request), what);
    check_mpi(MPI_Wait(&request, MPI_STATUS_IGNORE), what);
    std::printf("holding shared memory\n");
    std::fflush(stdout);
  }
  for (;;) pause();
}

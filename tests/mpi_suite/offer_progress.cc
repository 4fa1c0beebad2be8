// Sends through peer memory (mpi_shim/peer_pt2pt.h) whose completion waits
// for their receive while that rank's own receive is not yet completed by
// the application: each rank of a pair sends first and receives after, in
// the orders programs write, with device buffers. A send waiting for its
// offer to be claimed lets this rank's complete receives claim the offers
// they matched; ctest runs it with an offer window of 10 s and expects no
// send to have gone through a bounce buffer. Valid MPI throughout: the
// program also runs on plain Open MPI with host buffers (the baseline).
#include <string>
#include <vector>

#include "suite.h"

using namespace suite;

namespace {

constexpr long kCount = 1001;  // odd, over FERRY_PT2PT_MIN_BYTES
constexpr int kRounds = 8;

enum class Pattern {
  isend_irecv_wait_send_first,  // MPI_Isend, MPI_Irecv, MPI_Wait(send), MPI_Wait(receive)
  irecv_send_wait,              // MPI_Irecv, MPI_Send, MPI_Wait(receive)
  isend_irecv_waitany,          // MPI_Isend, MPI_Irecv, MPI_Waitany twice
};

const char* pattern_name(Pattern p) {
  switch (p) {
    case Pattern::isend_irecv_wait_send_first: return "MPI_Isend, MPI_Irecv, MPI_Wait(send), MPI_Wait(receive)";
    case Pattern::irecv_send_wait: return "MPI_Irecv, MPI_Send, MPI_Wait(receive)";
    case Pattern::isend_irecv_waitany: return "MPI_Isend, MPI_Irecv, MPI_Waitany twice";
  }
  return "?";
}

void exchange(Pattern pattern) {
  const uint64_t id = next_case_id();
  const int rank = world_rank();
  const int partner = rank % 2 ? rank - 1 : rank + 1;
  if (partner >= world_size()) return;
  const Case what{pattern_name(pattern), "MPI_DOUBLE", "", kCount, "device", ""};
  for (int round = 0; round < kRounds; ++round) {
    Buffer out = make_buffer(random_values<double>(kCount, id + round, rank), Memory::device);
    const Buffer in = make_buffer(poisoned<double>(kCount), Memory::device);
    MPI_Request requests[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
    switch (pattern) {
      case Pattern::isend_irecv_wait_send_first:
        check_mpi(MPI_Isend(out.data(), int(kCount), MPI_DOUBLE, partner, 0, MPI_COMM_WORLD, &requests[0]), what);
        check_mpi(MPI_Irecv(in.data(), int(kCount), MPI_DOUBLE, partner, 0, MPI_COMM_WORLD, &requests[1]), what);
        check_mpi(MPI_Wait(&requests[0], MPI_STATUS_IGNORE), what);
        check_mpi(MPI_Wait(&requests[1], MPI_STATUS_IGNORE), what);
        break;
      case Pattern::irecv_send_wait:
        check_mpi(MPI_Irecv(in.data(), int(kCount), MPI_DOUBLE, partner, 0, MPI_COMM_WORLD, &requests[1]), what);
        check_mpi(MPI_Send(out.data(), int(kCount), MPI_DOUBLE, partner, 0, MPI_COMM_WORLD), what);
        check_mpi(MPI_Wait(&requests[1], MPI_STATUS_IGNORE), what);
        break;
      case Pattern::isend_irecv_waitany:
        check_mpi(MPI_Isend(out.data(), int(kCount), MPI_DOUBLE, partner, 0, MPI_COMM_WORLD, &requests[0]), what);
        check_mpi(MPI_Irecv(in.data(), int(kCount), MPI_DOUBLE, partner, 0, MPI_COMM_WORLD, &requests[1]), what);
        for (int left = 2; left > 0; --left) {
          int index = MPI_UNDEFINED;
          check_mpi(MPI_Waitany(2, requests, &index, MPI_STATUS_IGNORE), what);
        }
        break;
    }
    // The send is complete: its buffer is the program's again.
    out.write(poisoned<double>(kCount).data(), kCount * sizeof(double));
    const std::vector<double> got = read_back<double>(in, kCount);
    const std::vector<double> want = random_values<double>(kCount, id + round, partner);
    for (long i = 0; i < kCount; ++i) {
      if (got[i] != want[i]) {
        fail(what, "round " + std::to_string(round) + ": element " + std::to_string(i) + " is " + show(got[i]) +
                       ", want " + show(want[i]));
        break;
      }
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  suite::init(&argc, &argv);
  for (Pattern pattern :
       {Pattern::isend_irecv_wait_send_first, Pattern::irecv_send_wait, Pattern::isend_irecv_waitany})
    exchange(pattern);
  return suite::finish();
}

// The operations ferry-bench times: one (operation, size) case, the input
// every rank can compute for any rank, and the plain MPI call of each
// operation, which every column but NCCL's runs.
#pragma once

#include <mpi.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

namespace ferry_bench {

constexpr int kRoot = 0;
// Outside the range of any correct result: an element left at this value was
// never written.
constexpr float kUntouched = 1e9f;

enum class Op { kAllreduce, kBcast, kAlltoallv, kSendrecv, kIsendrecv, kPsendrecv, kSend };
constexpr std::array<Op, 3> kDefaultOps{Op::kAllreduce, Op::kBcast, Op::kAlltoallv};
constexpr std::array<Op, 7> kKnownOps{Op::kAllreduce,  Op::kBcast,      Op::kAlltoallv, Op::kSendrecv,
                                      Op::kIsendrecv, Op::kPsendrecv, Op::kSend};

// The name --ops takes and the table prints.
const char* op_name(Op op);

struct Case {
  Op op;
  std::size_t count;                // floats in each rank's buffer; alltoallv: the whole send buffer
  std::vector<int> counts, displs;  // alltoallv: one equal block per peer
  std::uint64_t seed;               // for the input data
  std::size_t bytes() const { return count * sizeof(float); }
};

// None when the size gives alltoallv less than one float per peer.
std::optional<Case> make_case(Op op, std::size_t bytes, int nranks, std::uint64_t seed);

// Small integers stored in floats: every sum over ranks is exact, so results
// compare bit for bit. Any rank can compute any rank's data.
float input_value(std::uint64_t seed, int rank, std::size_t index);

// Throws with MPI's error string unless `result` is MPI_SUCCESS.
void check_mpi(int result, const char* what);

// The ranks a sendrecv sends to and receives from.
inline int next_rank(int rank, int nranks) { return (rank + 1) % nranks; }
inline int previous_rank(int rank, int nranks) { return (rank + nranks - 1) % nranks; }
// A send's partner: the odd rank after an even one, and back; none for the
// last rank of an odd count.
inline int send_partner(int rank, int nranks) {
  const int partner = rank % 2 ? rank - 1 : rank + 1;
  return partner < nranks ? partner : MPI_PROC_NULL;
}

// Allreduce, alltoallv and sendrecv from send to recv; bcast in place in send.
void run_mpi(const Case& c, float* send, float* recv);

}  // namespace ferry_bench

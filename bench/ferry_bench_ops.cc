#include "ferry_bench_ops.h"

#include <memory>
#include <stdexcept>
#include <string>

namespace ferry_bench {

const char* op_name(Op op) {
  switch (op) {
    case Op::kAllreduce: return "allreduce";
    case Op::kBcast: return "bcast";
    case Op::kAlltoallv: return "alltoallv";
    case Op::kSendrecv: return "sendrecv";
    case Op::kIsendrecv: return "isendrecv";
    case Op::kPsendrecv: return "psendrecv";
    case Op::kSend: return "send";
  }
  return "?";
}

std::optional<Case> make_case(Op op, std::size_t bytes, int nranks, std::uint64_t seed) {
  Case c{op, bytes / sizeof(float), {}, {}, seed};
  if (op == Op::kAlltoallv) {
    const std::size_t block = c.count / nranks;
    if (block == 0) return std::nullopt;
    c.count = block * nranks;
    for (int peer = 0; peer < nranks; ++peer) {
      c.counts.push_back(static_cast<int>(block));
      c.displs.push_back(static_cast<int>(block * peer));
    }
  }
  return c;
}

float input_value(std::uint64_t seed, int rank, std::size_t index) {
  // splitmix64's mixing of one word made from (seed, rank, index).
  std::uint64_t z = seed * 0x9e3779b97f4a7c15ull + (static_cast<std::uint64_t>(rank) << 40) + index;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return static_cast<float>(static_cast<int>(z % 1024) - 512);
}

void check_mpi(int result, const char* what) {
  if (result == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(result, text, &length);
  throw std::runtime_error(std::string(what) + " failed: " + text);
}

namespace {

// psendrecv's persistent requests, made at the first call on a pair of
// buffers and a count and kept to the end of the run.
struct PersistentExchange {
  float* send;
  float* recv;
  int count;
  MPI_Request requests[2];
};

MPI_Request* persistent_exchange(float* send, float* recv, int count) {
  static std::vector<std::unique_ptr<PersistentExchange>> made;
  for (const auto& e : made)
    if (e->send == send && e->recv == recv && e->count == count) return e->requests;
  int rank = 0, nranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  auto e = std::make_unique<PersistentExchange>(PersistentExchange{send, recv, count, {}});
  check_mpi(MPI_Recv_init(recv, count, MPI_FLOAT, previous_rank(rank, nranks), 0, MPI_COMM_WORLD, &e->requests[0]),
            "MPI_Recv_init");
  check_mpi(MPI_Send_init(send, count, MPI_FLOAT, next_rank(rank, nranks), 0, MPI_COMM_WORLD, &e->requests[1]),
            "MPI_Send_init");
  made.push_back(std::move(e));
  return made.back()->requests;
}

}  // namespace

void run_mpi(const Case& c, float* send, float* recv) {
  const int count = static_cast<int>(c.count);
  switch (c.op) {
    case Op::kAllreduce:
      check_mpi(MPI_Allreduce(send, recv, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD), "MPI_Allreduce");
      break;
    case Op::kBcast: check_mpi(MPI_Bcast(send, count, MPI_FLOAT, kRoot, MPI_COMM_WORLD), "MPI_Bcast"); break;
    case Op::kAlltoallv:
      check_mpi(MPI_Alltoallv(send, c.counts.data(), c.displs.data(), MPI_FLOAT, recv, c.counts.data(), c.displs.data(),
                              MPI_FLOAT, MPI_COMM_WORLD),
                "MPI_Alltoallv");
      break;
    case Op::kSendrecv: {
      int rank = 0, nranks = 1;
      MPI_Comm_rank(MPI_COMM_WORLD, &rank);
      MPI_Comm_size(MPI_COMM_WORLD, &nranks);
      check_mpi(MPI_Sendrecv(send, count, MPI_FLOAT, next_rank(rank, nranks), 0, recv, count, MPI_FLOAT,
                             previous_rank(rank, nranks), 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE),
                "MPI_Sendrecv");
      break;
    }
    case Op::kIsendrecv: {
      int rank = 0, nranks = 1;
      MPI_Comm_rank(MPI_COMM_WORLD, &rank);
      MPI_Comm_size(MPI_COMM_WORLD, &nranks);
      MPI_Request requests[2];
      check_mpi(MPI_Irecv(recv, count, MPI_FLOAT, previous_rank(rank, nranks), 0, MPI_COMM_WORLD, &requests[0]),
                "MPI_Irecv");
      check_mpi(MPI_Isend(send, count, MPI_FLOAT, next_rank(rank, nranks), 0, MPI_COMM_WORLD, &requests[1]),
                "MPI_Isend");
      check_mpi(MPI_Waitall(2, requests, MPI_STATUSES_IGNORE), "MPI_Waitall");
      break;
    }
    case Op::kPsendrecv: {
      MPI_Request* requests = persistent_exchange(send, recv, count);
      check_mpi(MPI_Startall(2, requests), "MPI_Startall");
      check_mpi(MPI_Waitall(2, requests, MPI_STATUSES_IGNORE), "MPI_Waitall");
      break;
    }
    case Op::kSend: {
      int rank = 0, nranks = 1;
      MPI_Comm_rank(MPI_COMM_WORLD, &rank);
      MPI_Comm_size(MPI_COMM_WORLD, &nranks);
      if (rank % 2 == 0) {
        check_mpi(MPI_Send(send, count, MPI_FLOAT, send_partner(rank, nranks), 0, MPI_COMM_WORLD), "MPI_Send");
      } else {
        check_mpi(MPI_Recv(recv, count, MPI_FLOAT, send_partner(rank, nranks), 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE),
                  "MPI_Recv");
      }
      break;
    }
  }
}

}  // namespace ferry_bench

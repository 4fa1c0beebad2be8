// Ranks of one machine given different host names (FERRY_HOSTNAME, set per
// rank by virtual_node.sh): virtual nodes. Device-buffer collectives and
// messages are checked on the whole job (ranks on two nodes: Ferry must not
// map memory or share host memory between them, so it stages; FERRY_STATS
// shows it) and on each node's communicator (the engine's transports).
// Argument: "world" or "node".
#include <cstring>
#include <string>

#include "suite.h"

namespace {

using namespace suite;

void test_calls(MPI_Comm comm, const char* scope, int count) {
  int rank = 0, size = 0;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  const Memory device = Memory::device;
  {  // Allreduce, odd count, one element past the allocation base.
    const uint64_t id = next_case_id();
    const Case what{"MPI_Allreduce", "MPI_INT64_T sum", scope, count, "device"};
    Buffer in = make_buffer(random_values<int64_t>(count, id, rank), device, 8);
    Buffer out = make_buffer(poisoned<int64_t>(count), device, 8);
    check_mpi(MPI_Allreduce(in.data(), out.data(), count, MPI_INT64_T, MPI_SUM, comm), what);
    std::vector<int64_t> expected(count, 0);
    for (int r = 0; r < size; ++r) {
      const std::vector<int64_t> theirs = random_values<int64_t>(count, id, r);
      for (int i = 0; i < count; ++i) expected[i] += theirs[i];
    }
    expect_buffer(what, out, expected);
  }
  {  // Bcast of bytes from the last rank.
    const uint64_t id = next_case_id();
    const Case what{"MPI_Bcast", "MPI_BYTE", scope, count, "device"};
    const int root = size - 1;
    Buffer buffer = make_buffer(rank == root ? random_values<uint8_t>(count, id, root) : poisoned<uint8_t>(count),
                                device, 3);
    check_mpi(MPI_Bcast(buffer.data(), count, MPI_BYTE, root, comm), what);
    expect_buffer(what, buffer, random_values<uint8_t>(count, id, root));
  }
  {  // Around a ring: on the whole job, every message crosses to the other node.
    const uint64_t id = next_case_id();
    const Case what{"MPI_Sendrecv", "MPI_FLOAT", scope, count, "device"};
    const int to = (rank + size / 2) % size, from = (rank + size - size / 2) % size;
    Buffer out = make_buffer(random_values<float>(count, id, rank), device);
    Buffer in = make_buffer(poisoned<float>(count), device, 4);
    check_mpi(MPI_Sendrecv(out.data(), count, MPI_FLOAT, to, 5, in.data(), count, MPI_FLOAT, from, 5, comm,
                           MPI_STATUS_IGNORE),
              what);
    expect_buffer(what, in, random_values<float>(count, id, from));
  }
}

}  // namespace

int main(int argc, char** argv) {
  suite::init(&argc, &argv);
  const bool by_node = argc > 1 && std::strcmp(argv[1], "node") == 0;
  // The node of each rank, as virtual_node.sh gave it.
  const char* per_node = std::getenv("FERRY_SUITE_RANKS_PER_NODE");
  const int ranks_per_node = per_node ? std::atoi(per_node) : 2;
  MPI_Comm comm = MPI_COMM_WORLD;
  if (by_node) MPI_Comm_split(MPI_COMM_WORLD, suite::world_rank() / ranks_per_node, 0, &comm);
  for (int count : {1, 1001, 262147}) test_calls(comm, by_node ? "one node" : "two nodes", count);
  if (by_node) MPI_Comm_free(&comm);
  return suite::finish();
}

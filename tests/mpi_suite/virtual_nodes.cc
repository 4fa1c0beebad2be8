// Ranks of one machine given different host names (FERRY_HOSTNAME, set per
// rank by virtual_node.sh): virtual nodes. Device-buffer collectives and
// messages are checked against a host reference on the whole job (ranks on
// several nodes: Ferry must not map memory or share host memory between
// them; collectives go by node over the net transport, and so do messages;
// FERRY_STATS shows it) and on each node's communicator (the engine's
// transports). A window on device memory carries a put within a node (the
// engine's, unified model) and across the nodes (over host copies, separate
// model).
// Argument: "world" or "node".
#include <algorithm>
#include <cstring>
#include <string>

#include "device_alloc.h"
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
  {  // Allreduce in place, doubles, max.
    const uint64_t id = next_case_id();
    const Case what{"MPI_Allreduce", "MPI_DOUBLE max in place", scope, count, "device"};
    Buffer inout = make_buffer(random_values<double>(count, id, rank), device, 16);
    check_mpi(MPI_Allreduce(MPI_IN_PLACE, inout.data(), count, MPI_DOUBLE, MPI_MAX, comm), what);
    std::vector<double> expected = random_values<double>(count, id, 0);
    for (int r = 1; r < size; ++r) {
      const std::vector<double> theirs = random_values<double>(count, id, r);
      for (int i = 0; i < count; ++i) expected[i] = std::max(expected[i], theirs[i]);
    }
    expect_buffer(what, inout, expected);
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
  {  // Bcast of floats from rank 1, at an odd offset.
    const uint64_t id = next_case_id();
    const Case what{"MPI_Bcast", "MPI_FLOAT", scope, count, "device"};
    const int root = 1 % size;
    Buffer buffer = make_buffer(rank == root ? random_values<float>(count, id, root) : poisoned<float>(count),
                                device, 4);
    check_mpi(MPI_Bcast(buffer.data(), count, MPI_FLOAT, root, comm), what);
    expect_buffer(what, buffer, random_values<float>(count, id, root));
  }
  {  // Alltoallv, blocks of different odd lengths with a gap after each.
    const uint64_t id = next_case_id();
    const Case what{"MPI_Alltoallv", "MPI_INT32_T", scope, count, "device"};
    auto block = [&](int from, int to) { return count + 2 * from + to; };
    auto layout = [&](int owner, bool sending, std::vector<int>* counts, std::vector<int>* displs) {
      int at = 0;
      for (int p = 0; p < size; ++p) {
        counts->push_back(sending ? block(owner, p) : block(p, owner));
        displs->push_back(at);
        at += counts->back() + 1;
      }
      return at;
    };
    std::vector<int> send_counts, send_displs, recv_counts, recv_displs;
    const int send_total = layout(rank, true, &send_counts, &send_displs);
    const int recv_total = layout(rank, false, &recv_counts, &recv_displs);
    Buffer out = make_buffer(random_values<int32_t>(send_total, id, rank), device, 4);
    Buffer in = make_buffer(poisoned<int32_t>(recv_total), device, 8);
    check_mpi(MPI_Alltoallv(out.data(), send_counts.data(), send_displs.data(), MPI_INT32_T, in.data(),
                            recv_counts.data(), recv_displs.data(), MPI_INT32_T, comm),
              what);
    std::vector<int32_t> expected = poisoned<int32_t>(recv_total);
    for (int p = 0; p < size; ++p) {
      std::vector<int> their_counts, their_displs;
      const std::vector<int32_t> theirs = random_values<int32_t>(layout(p, true, &their_counts, &their_displs), id, p);
      std::copy_n(theirs.begin() + their_displs[rank], recv_counts[p], expected.begin() + recv_displs[p]);
    }
    expect_buffer(what, in, expected);
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

void test_window(MPI_Comm comm, const char* scope, bool spans_nodes) {
  int rank = 0, size = 0;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  const uint64_t id = next_case_id();
  const Case what{"MPI_Win_create", "MPI_INT32_T", scope, 257, "device"};
  constexpr int kCount = 257;
  Buffer exposed = make_buffer(poisoned<int32_t>(kCount), Memory::device);
  MPI_Win win = MPI_WIN_NULL;
  check_mpi(MPI_Win_create(exposed.data(), kCount * sizeof(int32_t), sizeof(int32_t), MPI_INFO_NULL, comm, &win),
            what);
  int* model = nullptr;
  int found = 0;
  check_mpi(MPI_Win_get_attr(win, MPI_WIN_MODEL, &model, &found), what);
  // Across nodes: the real MPI's window over host copies (separate model).
  expect(found && *model == (spans_nodes ? MPI_WIN_SEPARATE : MPI_WIN_UNIFIED), what, "MPI_WIN_MODEL");
  Buffer mine = make_buffer(random_values<int32_t>(kCount, id, rank), Memory::device);
  check_mpi(MPI_Win_fence(0, win), what);
  check_mpi(MPI_Put(mine.data(), kCount, MPI_INT32_T, (rank + 1) % size, 0, kCount, MPI_INT32_T, win), what);
  check_mpi(MPI_Win_fence(0, win), what);
  expect_buffer(what, exposed, random_values<int32_t>(kCount, id, (rank + size - 1) % size));
  check_mpi(MPI_Win_free(&win), what);
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
  for (int count : {1, 3, 1001, 262147}) test_calls(comm, by_node ? "one node" : "two nodes", count);
  test_window(comm, by_node ? "one node" : "two nodes", !by_node);
  if (by_node) MPI_Comm_free(&comm);
  return suite::finish();
}

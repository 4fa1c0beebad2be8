// The collectives without an engine route that Ferry stages: neighbourhood
// collectives on a 2-D periodic cartesian communicator and on a distributed
// graph (blocking, nonblocking, persistent), MPI_Ireduce_scatter,
// MPI_Ialltoallw and the MPIX_ persistent collectives. Each call runs twice
// from the same contents: on host buffers, where the real MPI computes the
// reference, and on device buffers at an unaligned offset; the receive
// buffers, gaps included, must be equal. A persistent call is started twice,
// with new send data for the second start.
#include <mpi.h>
// The persistent collectives by their name in this MPI.
#include "mpi40_calls.h"

#include <algorithm>
#include <functional>
#include <numeric>

#include "suite.h"

namespace {

using namespace suite;

// call(send, recv) makes the call; refill(send) gives the send buffer new
// contents between the starts of a persistent call.
using Call = std::function<int(void* send, void* recv)>;

struct Sides {
  std::vector<int32_t> send;
  std::vector<int32_t> recv;  // the receive buffer before the call
};

// Runs call on host and on device buffers holding sides and compares.
void same_as_host(const Case& what, const Sides& sides, const Call& call) {
  std::vector<std::vector<int32_t>> results, sent;
  for (Memory memory : {Memory::host, Memory::device}) {
    const size_t offset = memory == Memory::device ? sizeof(int32_t) : 0;
    Buffer send = make_buffer(sides.send, memory, offset);
    Buffer recv = make_buffer(sides.recv, memory, offset);
    Case where = what;
    where.layout = memory == Memory::host ? "host" : "device+offset";
    check_mpi(call(send.data(), recv.data()), where);
    results.push_back(read_back<int32_t>(recv, sides.recv.size()));
    expect(recv.guards_intact(), where, "wrote outside the receive buffer");
    sent.push_back(read_back<int32_t>(send, sides.send.size()));
  }
  expect_values(what, results[0], results[1]);
  Case send_case = what;
  send_case.detail += " (send buffer)";
  expect_values(send_case, sent[0], sent[1]);
}

// A nonblocking call: start(send, recv, request) and its MPI_Wait.
Call waited(std::function<int(void*, void*, MPI_Request*)> start) {
  return [start](void* send, void* recv) {
    MPI_Request request = MPI_REQUEST_NULL;
    const int rc = start(send, recv, &request);
    return rc != MPI_SUCCESS ? rc : MPI_Wait(&request, MPI_STATUS_IGNORE);
  };
}

// A persistent call: init(send, recv, request), starts (the send buffer
// refilled, count elements, before each after the first), and
// MPI_Request_free.
Call started(int starts, size_t count, std::function<int(void*, void*, MPI_Request*)> init) {
  return [starts, count, init](void* send, void* recv) {
    MPI_Request request = MPI_REQUEST_NULL;
    int rc = init(send, recv, &request);
    for (int start = 0; start < starts && rc == MPI_SUCCESS; ++start) {
      if (start == 1 && count > 0) {
        std::vector<int32_t> next = random_values<int32_t>(count, 7777, world_rank());
        Buffer staging = make_buffer(next, Memory::host);
        suite_memcpy(send, staging.data(), count * sizeof(int32_t));
      }
      rc = MPI_Start(&request);
      if (rc == MPI_SUCCESS) rc = MPI_Wait(&request, MPI_STATUS_IGNORE);
    }
    if (request != MPI_REQUEST_NULL) MPI_Request_free(&request);
    return rc;
  };
}

Call started_twice(size_t count, std::function<int(void*, void*, MPI_Request*)> init) {
  return started(2, count, init);
}

// Blocks of count + i elements for peer i, each followed by a gap of one.
struct Layout1D {
  std::vector<int> counts, displs;
  int extent = 0;
};
Layout1D blocks_of(int peers, int count) {
  Layout1D layout;
  for (int i = 0; i < peers; ++i) {
    layout.counts.push_back(count + i);
    layout.displs.push_back(layout.extent);
    layout.extent += count + i + 1;
  }
  return layout;
}

// One element more on each side: a buffer of no elements would be null, which
// Open MPI rejects.
Sides sides(uint64_t id, size_t send_count, size_t recv_count) {
  return {random_values<int32_t>(send_count + 1, id, world_rank()), poisoned<int32_t>(recv_count + 1)};
}

// Every neighbourhood collective, in its three forms, on comm.
void test_neighbors(MPI_Comm comm, const std::string& topology, int count) {
  int indegree = 0, outdegree = 0;
  int topo = MPI_UNDEFINED;
  MPI_Topo_test(comm, &topo);
  if (topo == MPI_CART) {
    int dims = 0;
    MPI_Cartdim_get(comm, &dims);
    indegree = outdegree = 2 * dims;
  } else {
    int weighted = 0;
    MPI_Dist_graph_neighbors_count(comm, &indegree, &outdegree, &weighted);
  }
  const MPI_Datatype t = MPI_INT32_T;
  auto what = [&](const char* call) { return Case{call, "MPI_INT32_T", "", count, "", topology}; };

  {  // allgather
    const uint64_t id = next_case_id();
    const Sides s = sides(id, count, size_t(count) * indegree);
    same_as_host(what("MPI_Neighbor_allgather"), s,
                 [&](void* a, void* b) { return MPI_Neighbor_allgather(a, count, t, b, count, t, comm); });
    same_as_host(what("MPI_Ineighbor_allgather"), s, waited([&](void* a, void* b, MPI_Request* r) {
                   return MPI_Ineighbor_allgather(a, count, t, b, count, t, comm, r);
                 }));
    same_as_host(what("MPIX_Neighbor_allgather_init"), s, started_twice(count, [&](void* a, void* b, MPI_Request* r) {
                   return SUITE_PERSISTENT(Neighbor_allgather_init)(a, count, t, b, count, t, comm, MPI_INFO_NULL, r);
                 }));
  }
  {  // allgatherv
    const uint64_t id = next_case_id();
    const Layout1D in = blocks_of(indegree, count);
    // Every neighbour sends count elements; block i sits at the end of the
    // i-th region blocks_of lays out, so the gaps before blocks grow.
    // (At least one entry: Open MPI rejects null arrays, also of no neighbours.)
    std::vector<int> counts(std::max(indegree, 1), count), displs(std::max(indegree, 1));
    for (int i = 0; i < indegree; ++i) displs[i] = in.displs[i] + (in.counts[i] - count);
    const Sides s = sides(id, count, in.extent);
    same_as_host(what("MPI_Neighbor_allgatherv"), s, [&](void* a, void* b) {
      return MPI_Neighbor_allgatherv(a, count, t, b, counts.data(), displs.data(), t, comm);
    });
    same_as_host(what("MPI_Ineighbor_allgatherv"), s, waited([&](void* a, void* b, MPI_Request* r) {
                   return MPI_Ineighbor_allgatherv(a, count, t, b, counts.data(), displs.data(), t, comm, r);
                 }));
    same_as_host(what("MPIX_Neighbor_allgatherv_init"), s, started_twice(count, [&](void* a, void* b, MPI_Request* r) {
                   return SUITE_PERSISTENT(Neighbor_allgatherv_init)(a, count, t, b, counts.data(), displs.data(), t, comm,
                                                        MPI_INFO_NULL, r);
                 }));
  }
  {  // alltoall
    const uint64_t id = next_case_id();
    const Sides s = sides(id, size_t(count) * outdegree, size_t(count) * indegree);
    same_as_host(what("MPI_Neighbor_alltoall"), s,
                 [&](void* a, void* b) { return MPI_Neighbor_alltoall(a, count, t, b, count, t, comm); });
    same_as_host(what("MPI_Ineighbor_alltoall"), s, waited([&](void* a, void* b, MPI_Request* r) {
                   return MPI_Ineighbor_alltoall(a, count, t, b, count, t, comm, r);
                 }));
    same_as_host(what("MPIX_Neighbor_alltoall_init"), s,
                 started_twice(size_t(count) * outdegree, [&](void* a, void* b, MPI_Request* r) {
                   return SUITE_PERSISTENT(Neighbor_alltoall_init)(a, count, t, b, count, t, comm, MPI_INFO_NULL, r);
                 }));
  }
  {  // alltoallv and alltoallw: the same count to every neighbour (both
     // sides must agree), blocks spread with gaps.
    const uint64_t id = next_case_id();
    const Layout1D out = blocks_of(outdegree, count), in = blocks_of(indegree, count);
    std::vector<int> send_counts(outdegree, count), recv_counts(indegree, count);
    std::vector<MPI_Aint> send_bytes(outdegree), recv_bytes(indegree);
    for (int i = 0; i < outdegree; ++i) send_bytes[i] = MPI_Aint(out.displs[i]) * 4;
    for (int i = 0; i < indegree; ++i) recv_bytes[i] = MPI_Aint(in.displs[i]) * 4;
    std::vector<MPI_Datatype> send_types(outdegree, t), recv_types(indegree, t);
    const Sides s = sides(id, out.extent, in.extent);
    same_as_host(what("MPI_Neighbor_alltoallv"), s, [&](void* a, void* b) {
      return MPI_Neighbor_alltoallv(a, send_counts.data(), out.displs.data(), t, b, recv_counts.data(),
                                    in.displs.data(), t, comm);
    });
    same_as_host(what("MPI_Ineighbor_alltoallv"), s, waited([&](void* a, void* b, MPI_Request* r) {
                   return MPI_Ineighbor_alltoallv(a, send_counts.data(), out.displs.data(), t, b, recv_counts.data(),
                                                  in.displs.data(), t, comm, r);
                 }));
    same_as_host(what("MPIX_Neighbor_alltoallv_init"), s,
                 started_twice(out.extent, [&](void* a, void* b, MPI_Request* r) {
                   return SUITE_PERSISTENT(Neighbor_alltoallv_init)(a, send_counts.data(), out.displs.data(), t, b,
                                                       recv_counts.data(), in.displs.data(), t, comm, MPI_INFO_NULL, r);
                 }));
    same_as_host(what("MPI_Neighbor_alltoallw"), s, [&](void* a, void* b) {
      return MPI_Neighbor_alltoallw(a, send_counts.data(), send_bytes.data(), send_types.data(), b, recv_counts.data(),
                                    recv_bytes.data(), recv_types.data(), comm);
    });
    same_as_host(what("MPI_Ineighbor_alltoallw"), s, waited([&](void* a, void* b, MPI_Request* r) {
                   return MPI_Ineighbor_alltoallw(a, send_counts.data(), send_bytes.data(), send_types.data(), b,
                                                  recv_counts.data(), recv_bytes.data(), recv_types.data(), comm, r);
                 }));
    same_as_host(what("MPIX_Neighbor_alltoallw_init"), s,
                 started_twice(out.extent, [&](void* a, void* b, MPI_Request* r) {
                   return SUITE_PERSISTENT(Neighbor_alltoallw_init)(a, send_counts.data(), send_bytes.data(), send_types.data(), b,
                                                       recv_counts.data(), recv_bytes.data(), recv_types.data(), comm,
                                                       MPI_INFO_NULL, r);
                 }));
  }
}

void test_topologies() {
  const int size = world_size();
  int dims[2] = {0, 0}, periods[2] = {1, 1};
  MPI_Dims_create(size, 2, dims);
  MPI_Comm cart = MPI_COMM_NULL;
  check_mpi(MPI_Cart_create(MPI_COMM_WORLD, 2, dims, periods, 0, &cart), Case{"MPI_Cart_create", ""});
  // A ring as a distributed graph: each rank sends to the next two ranks and
  // hears from the previous two (fewer where there are fewer ranks).
  const int rank = world_rank();
  std::vector<int> destinations, sources;
  for (int step = 1; step <= std::min(2, size - 1); ++step) {
    destinations.push_back((rank + step) % size);
    sources.push_back((rank - step + size) % size);
  }
  MPI_Comm graph = MPI_COMM_NULL;
  check_mpi(MPI_Dist_graph_create_adjacent(MPI_COMM_WORLD, int(sources.size()), sources.data(), MPI_UNWEIGHTED,
                                           int(destinations.size()), destinations.data(), MPI_UNWEIGHTED, MPI_INFO_NULL,
                                           0, &graph),
            Case{"MPI_Dist_graph_create_adjacent", ""});
  for (int count : {1, 7, 1025}) {
    test_neighbors(cart, "2-D periodic cart", count);
    test_neighbors(graph, "dist graph ring", count);
  }
  MPI_Comm_free(&cart);
  MPI_Comm_free(&graph);
}

void test_other_collectives(int count) {
  const int size = world_size(), rank = world_rank();
  const MPI_Datatype t = MPI_INT32_T;
  auto what = [&](const char* call, const char* op = "") { return Case{call, "MPI_INT32_T", op, count, "", ""}; };
  {  // Ireduce_scatter and its persistent form: uneven blocks.
    std::vector<int> counts(size);
    for (int r = 0; r < size; ++r) counts[r] = count + r;
    const int total = std::accumulate(counts.begin(), counts.end(), 0);
    const uint64_t id = next_case_id();
    Sides s{random_values<int32_t>(total, id, rank, Values::small), poisoned<int32_t>(counts[rank] + 1)};
    same_as_host(what("MPI_Ireduce_scatter", "MPI_SUM"), s, waited([&](void* a, void* b, MPI_Request* r) {
                   return MPI_Ireduce_scatter(a, b, counts.data(), t, MPI_SUM, MPI_COMM_WORLD, r);
                 }));
    same_as_host(what("MPIX_Reduce_scatter_init", "MPI_MAX"), s,
                 started_twice(total, [&](void* a, void* b, MPI_Request* r) {
                   return SUITE_PERSISTENT(Reduce_scatter_init)(a, b, counts.data(), t, MPI_MAX, MPI_COMM_WORLD, MPI_INFO_NULL, r);
                 }));
  }
  {  // Ialltoallw: per-peer types (int32 runs, and a strided vector to odd peers).
    MPI_Datatype strided = MPI_DATATYPE_NULL;
    MPI_Type_vector(count, 1, 2, t, &strided);
    MPI_Type_commit(&strided);
    std::vector<int> send_counts(size), recv_counts(size), sdispls(size), rdispls(size);
    std::vector<MPI_Datatype> send_types(size), recv_types(size);
    int send_extent = 0, recv_extent = 0;
    for (int p = 0; p < size; ++p) {
      // Rank p receives count elements from everyone, as a strided vector if
      // p is odd; senders send contiguous runs.
      send_counts[p] = count;
      send_types[p] = t;
      sdispls[p] = send_extent * 4;
      send_extent += count + 1;
      recv_counts[p] = rank % 2 ? 1 : count;
      recv_types[p] = rank % 2 ? strided : t;
      rdispls[p] = recv_extent * 4;
      recv_extent += 2 * count + 1;
    }
    const uint64_t id = next_case_id();
    const Sides s = sides(id, send_extent, recv_extent);
    same_as_host(what("MPI_Ialltoallw"), s, waited([&](void* a, void* b, MPI_Request* r) {
                   return MPI_Ialltoallw(a, send_counts.data(), sdispls.data(), send_types.data(), b,
                                         recv_counts.data(), rdispls.data(), recv_types.data(), MPI_COMM_WORLD, r);
                 }));
    same_as_host(what("MPIX_Alltoallw_init"), s, started_twice(send_extent, [&](void* a, void* b, MPI_Request* r) {
                   return SUITE_PERSISTENT(Alltoallw_init)(a, send_counts.data(), sdispls.data(), send_types.data(), b,
                                              recv_counts.data(), rdispls.data(), recv_types.data(), MPI_COMM_WORLD,
                                              MPI_INFO_NULL, r);
                 }));
    MPI_Type_free(&strided);
  }
  {  // The rooted and scanning persistent collectives.
    const int root = size - 1;
    const uint64_t id = next_case_id();
    Sides one{random_values<int32_t>(count, id, rank, Values::small), poisoned<int32_t>(count)};
    Sides all{one.send, poisoned<int32_t>(size_t(count) * size)};
    Sides scattered{random_values<int32_t>(size_t(count) * size, id, rank), poisoned<int32_t>(count)};
    same_as_host(what("MPIX_Reduce_init", "MPI_SUM"), one, started_twice(count, [&](void* a, void* b, MPI_Request* r) {
                   return SUITE_PERSISTENT(Reduce_init)(a, b, count, t, MPI_SUM, root, MPI_COMM_WORLD, MPI_INFO_NULL, r);
                 }));
    same_as_host(what("MPIX_Scan_init", "MPI_SUM"), one, started_twice(count, [&](void* a, void* b, MPI_Request* r) {
                   return SUITE_PERSISTENT(Scan_init)(a, b, count, t, MPI_SUM, MPI_COMM_WORLD, MPI_INFO_NULL, r);
                 }));
    same_as_host(what("MPIX_Exscan_init", "MPI_SUM"), one, started_twice(count, [&](void* a, void* b, MPI_Request* r) {
                   return SUITE_PERSISTENT(Exscan_init)(a, b, count, t, MPI_SUM, MPI_COMM_WORLD, MPI_INFO_NULL, r);
                 }));
    same_as_host(what("MPIX_Allgather_init"), all, started_twice(count, [&](void* a, void* b, MPI_Request* r) {
                   return SUITE_PERSISTENT(Allgather_init)(a, count, t, b, count, t, MPI_COMM_WORLD, MPI_INFO_NULL, r);
                 }));
    same_as_host(what("MPIX_Gather_init"), all, started_twice(count, [&](void* a, void* b, MPI_Request* r) {
                   return SUITE_PERSISTENT(Gather_init)(a, count, t, b, count, t, root, MPI_COMM_WORLD, MPI_INFO_NULL, r);
                 }));
    same_as_host(what("MPIX_Scatter_init"), scattered,
                 started_twice(size_t(count) * size, [&](void* a, void* b, MPI_Request* r) {
                   return SUITE_PERSISTENT(Scatter_init)(a, count, t, b, count, t, root, MPI_COMM_WORLD, MPI_INFO_NULL, r);
                 }));
    same_as_host(what("MPIX_Alltoall_init"), Sides{scattered.send, poisoned<int32_t>(size_t(count) * size)},
                 started_twice(size_t(count) * size, [&](void* a, void* b, MPI_Request* r) {
                   return SUITE_PERSISTENT(Alltoall_init)(a, count, t, b, count, t, MPI_COMM_WORLD, MPI_INFO_NULL, r);
                 }));
    same_as_host(what("MPIX_Reduce_scatter_block_init", "MPI_MIN"), Sides{scattered.send, poisoned<int32_t>(count)},
                 started_twice(size_t(count) * size, [&](void* a, void* b, MPI_Request* r) {
                   return SUITE_PERSISTENT(Reduce_scatter_block_init)(a, b, count, t, MPI_MIN, MPI_COMM_WORLD, MPI_INFO_NULL, r);
                 }));
  }
}

}  // namespace

int main(int argc, char** argv) {
  suite::init(&argc, &argv);
  test_topologies();
  for (int count : {1, 5, 1023}) test_other_collectives(count);
  return suite::finish();
}

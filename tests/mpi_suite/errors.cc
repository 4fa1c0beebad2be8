// Bad arguments with device buffers must fail the way the real MPI fails with
// host buffers: the same error class, returned through MPI_ERRORS_RETURN,
// with no crash and no hang, and the communicator still usable afterwards.
#include <cstdlib>
#include <cstring>
#include <functional>

#include "suite.h"

namespace {

using namespace suite;

constexpr int kElements = 64;

// One erroneous call, made by every rank alike so that no rank waits on
// another: MPI must reject it while checking arguments.
struct BadCall {
  const char* call;
  const char* problem;
  std::function<int(void* send, void* recv, MPI_Comm comm)> invoke;
};

std::vector<BadCall> bad_calls() {
  const int ranks = world_size();
  const int next = (world_rank() + 1) % ranks;
  const int previous = (world_rank() + ranks - 1) % ranks;
  return {
      {"MPI_Allreduce", "count -1",
       [](void* s, void* r, MPI_Comm c) { return MPI_Allreduce(s, r, -1, MPI_INT, MPI_SUM, c); }},
      {"MPI_Allreduce", "MPI_DATATYPE_NULL",
       [](void* s, void* r, MPI_Comm c) {
         return MPI_Allreduce(s, r, 8, MPI_DATATYPE_NULL, MPI_SUM, c);
       }},
      {"MPI_Allreduce", "MPI_OP_NULL",
       [](void* s, void* r, MPI_Comm c) {
         return MPI_Allreduce(s, r, 8, MPI_INT, MPI_OP_NULL, c);
       }},
      {"MPI_Reduce", "root out of range",
       [=](void* s, void* r, MPI_Comm c) {
         return MPI_Reduce(s, r, 8, MPI_INT, MPI_SUM, ranks, c);
       }},
      {"MPI_Reduce", "count -1",
       [](void* s, void* r, MPI_Comm c) { return MPI_Reduce(s, r, -1, MPI_INT, MPI_SUM, 0, c); }},
      {"MPI_Bcast", "count -1",
       [](void*, void* r, MPI_Comm c) { return MPI_Bcast(r, -1, MPI_INT, 0, c); }},
      {"MPI_Bcast", "root out of range",
       [=](void*, void* r, MPI_Comm c) { return MPI_Bcast(r, 8, MPI_INT, ranks, c); }},
      {"MPI_Bcast", "MPI_DATATYPE_NULL",
       [](void*, void* r, MPI_Comm c) { return MPI_Bcast(r, 8, MPI_DATATYPE_NULL, 0, c); }},
      {"MPI_Allgather", "count -1",
       [](void* s, void* r, MPI_Comm c) {
         return MPI_Allgather(s, -1, MPI_INT, r, -1, MPI_INT, c);
       }},
      {"MPI_Gather", "root out of range",
       [=](void* s, void* r, MPI_Comm c) {
         return MPI_Gather(s, 1, MPI_INT, r, 1, MPI_INT, ranks, c);
       }},
      {"MPI_Scatter", "root out of range",
       [=](void* s, void* r, MPI_Comm c) {
         return MPI_Scatter(s, 1, MPI_INT, r, 1, MPI_INT, ranks, c);
       }},
      {"MPI_Alltoall", "MPI_DATATYPE_NULL",
       [](void* s, void* r, MPI_Comm c) {
         return MPI_Alltoall(s, 1, MPI_DATATYPE_NULL, r, 1, MPI_DATATYPE_NULL, c);
       }},
      {"MPI_Reduce_scatter_block", "count -1",
       [](void* s, void* r, MPI_Comm c) {
         return MPI_Reduce_scatter_block(s, r, -1, MPI_INT, MPI_SUM, c);
       }},
      {"MPI_Scan", "MPI_DATATYPE_NULL",
       [](void* s, void* r, MPI_Comm c) {
         return MPI_Scan(s, r, 8, MPI_DATATYPE_NULL, MPI_SUM, c);
       }},
      {"MPI_Send", "count -1",
       [=](void* s, void*, MPI_Comm c) { return MPI_Send(s, -1, MPI_INT, next, 0, c); }},
      {"MPI_Send", "MPI_DATATYPE_NULL",
       [=](void* s, void*, MPI_Comm c) { return MPI_Send(s, 8, MPI_DATATYPE_NULL, next, 0, c); }},
      {"MPI_Send", "dest out of range",
       [=](void* s, void*, MPI_Comm c) { return MPI_Send(s, 8, MPI_INT, ranks, 0, c); }},
      {"MPI_Recv", "count -1",
       [=](void*, void* r, MPI_Comm c) {
         return MPI_Recv(r, -1, MPI_INT, previous, 0, c, MPI_STATUS_IGNORE);
       }},
      {"MPI_Recv", "MPI_DATATYPE_NULL",
       [=](void*, void* r, MPI_Comm c) {
         return MPI_Recv(r, 8, MPI_DATATYPE_NULL, previous, 0, c, MPI_STATUS_IGNORE);
       }},
      {"MPI_Sendrecv", "count -1",
       [=](void* s, void* r, MPI_Comm c) {
         return MPI_Sendrecv(s, -1, MPI_INT, next, 0, r, -1, MPI_INT, previous, 0, c,
                             MPI_STATUS_IGNORE);
       }},
  };
}

int error_class(int rc) {
  int error_class = MPI_SUCCESS;
  MPI_Error_class(rc, &error_class);
  return error_class;
}

std::string class_name(int error_class) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(error_class, text, &length);
  return std::to_string(error_class) + " (" + std::string(text, length) + ")";
}

void test_bad_calls(MPI_Comm comm) {
  // MPICH as Debian (4.0.2) and PyPI (5.0.2) build it checks no arguments:
  // these calls crash it with host buffers, so there is no class to compare
  // with.
  if (mpi_library_is("MPICH")) return;
  const std::vector<int> values(kElements, 1);
  const Buffer host_send = make_buffer(values, Memory::host);
  const Buffer host_recv = make_buffer(values, Memory::host);
  const Buffer device_send = make_buffer(values, Memory::device);
  const Buffer device_recv = make_buffer(values, Memory::device);
  for (const BadCall& bad : bad_calls()) {
    const Case what{bad.call, "MPI_INT", "", 0, "device", bad.problem};
    const int host_class = error_class(bad.invoke(host_send.data(), host_recv.data(), comm));
    if (host_class == MPI_SUCCESS) {
      fail(what,
           "the real MPI accepts this call with host buffers, so there is nothing to compare");
      continue;
    }
    const int device_class = error_class(bad.invoke(device_send.data(), device_recv.data(), comm));
    expect(device_class == host_class, what,
           "error class " + class_name(device_class) + ", host buffers give " +
               class_name(host_class));
  }
  expect_buffer(Case{"bad calls", "MPI_INT", "", 0, "device", "(send buffer)"}, device_send,
                values);
  expect_buffer(Case{"bad calls", "MPI_INT", "", 0, "device", "(receive buffer)"}, device_recv,
                values);
}

// After the rejected calls the communicator must still work.
void test_still_usable(MPI_Comm comm) {
  const Case what{"MPI_Allreduce", "MPI_INT", "MPI_SUM", kElements, "device", "after bad calls"};
  check_mpi(MPI_Barrier(comm), what);
  const std::vector<int> ones(kElements, 1);
  const Buffer send = make_buffer(ones, Memory::device);
  const Buffer recv = make_buffer(poisoned<int>(kElements), Memory::device);
  check_mpi(MPI_Allreduce(send.data(), recv.data(), kElements, MPI_INT, MPI_SUM, comm), what);
  expect_buffer(what, recv, std::vector<int>(kElements, world_size()));
}

// A null send buffer with data to send, beside a device receive buffer, is
// MPI_ERR_BUFFER and leaves the receive buffer as it was; it is never taken
// for MPI_IN_PLACE. (The real MPI crashes on it with host buffers, so there
// is no host class to compare with: only under Ferry with a device.)
void test_null_send_buffer(MPI_Comm comm) {
  const char* ferry_backend = suite_ferry_backend();
  if (!ferry_backend || std::strcmp(ferry_backend, "none") == 0) return;
  const std::vector<int> values(kElements, 3);
  const Buffer recv = make_buffer(values, Memory::device);
  const Case blocking{"MPI_Allreduce", "MPI_INT", "MPI_SUM",
                      kElements,       "device",  "null send buffer"};
  const int blocking_class =
      error_class(MPI_Allreduce(nullptr, recv.data(), kElements, MPI_INT, MPI_SUM, comm));
  expect(blocking_class == MPI_ERR_BUFFER, blocking, "error class " + class_name(blocking_class));
  const Case nonblocking{"MPI_Iallreduce", "MPI_INT", "MPI_SUM",
                         kElements,        "device",  "null send buffer"};
  MPI_Request request = MPI_REQUEST_NULL;
  const int nonblocking_class = error_class(
      MPI_Iallreduce(nullptr, recv.data(), kElements, MPI_INT, MPI_SUM, comm, &request));
  expect(nonblocking_class == MPI_ERR_BUFFER, nonblocking,
         "error class " + class_name(nonblocking_class));
  expect_buffer(blocking, recv, values);
}

void expect_class(const Case& what, int rc, int want) {
  expect(error_class(rc) == want, what,
         "error class " + class_name(error_class(rc)) + ", want " + class_name(want));
}

// A nonblocking call's result: its completion's, once it started.
int completed(int rc, MPI_Request* request) {
  return rc == MPI_SUCCESS ? MPI_Wait(request, MPI_STATUS_IGNORE) : rc;
}

// Alltoallv counts by which rank 0 sends rank 1 one element more than rank
// 1 receives from it; every other pair agrees.
struct DisagreeingCounts {
  std::vector<int> send, recv, displs;
};
DisagreeingCounts disagreeing_counts() {
  const int ranks = world_size();
  DisagreeingCounts c{std::vector<int>(ranks, 1), std::vector<int>(ranks, 1),
                      std::vector<int>(ranks)};
  for (int r = 0; r < ranks; ++r) c.displs[r] = 2 * r;
  if (world_rank() == 0) c.send[1] = 2;
  return c;
}

// Ranks that call a collective on device buffers with different arguments
// all get the same error class at once (Ferry's engine compares what each
// rank passed before any data moves), and every buffer stays as it was.
// The real MPI returns wrong data or waits forever there, so only under
// Ferry's engine: not with FERRY_ROUTE=staged, where the real MPI runs it.
void test_disagreeing_ranks(MPI_Comm comm) {
  const char* ferry_backend = suite_ferry_backend();
  const char* route = std::getenv("FERRY_ROUTE");
  if (!ferry_backend || std::strcmp(ferry_backend, "none") == 0 ||
      (route && std::strcmp(route, "staged") == 0))
    return;
  const int rank = world_rank();
  const std::vector<int> values(kElements, 5);
  const Buffer send = make_buffer(values, Memory::device);
  const Buffer recv = make_buffer(values, Memory::device);
  const Case counts{"MPI_Allreduce", "MPI_INT", "MPI_SUM",
                    kElements,       "device",  "rank 0 passes twice the others' count"};
  expect_class(counts,
               MPI_Allreduce(send.data(), recv.data(), rank == 0 ? kElements : kElements / 2,
                             MPI_INT, MPI_SUM, comm),
               MPI_ERR_COUNT);
  const Case ops{"MPI_Allreduce", "MPI_INT", "MPI_SUM/MPI_MAX",
                 kElements,       "device",  "rank 0 passes another op"};
  expect_class(ops,
               MPI_Allreduce(send.data(), recv.data(), kElements, MPI_INT,
                             rank == 0 ? MPI_MAX : MPI_SUM, comm),
               MPI_ERR_OP);
  const Case roots{"MPI_Bcast", "MPI_INT", "",
                   kElements,   "device",  "rank 0 names itself the root, the others rank 1"};
  expect_class(roots, MPI_Bcast(recv.data(), kElements, MPI_INT, rank == 0 ? 0 : 1, comm),
               MPI_ERR_ROOT);
  const DisagreeingCounts c = disagreeing_counts();
  const Case pairs{"MPI_Alltoallv",
                   "MPI_INT",
                   "",
                   1,
                   "device",
                   "rank 0 sends rank 1 more than rank 1 receives from it"};
  expect_class(pairs,
               MPI_Alltoallv(send.data(), c.send.data(), c.displs.data(), MPI_INT, recv.data(),
                             c.recv.data(), c.displs.data(), MPI_INT, comm),
               MPI_ERR_COUNT);
  expect_buffer(Case{"disagreeing calls", "MPI_INT", "", 0, "device", "(receive buffer)"}, recv,
                values);
}

// The same for the nonblocking collectives that Ferry's engine runs: the
// error comes from the completion. Only where ctest says every rank's call
// takes the engine (FERRY_SUITE_NONBLOCKING_ON_ENGINE=1): elsewhere the
// real MPI runs them, and hangs on such calls.
void test_disagreeing_nonblocking(MPI_Comm comm) {
  const char* wanted = std::getenv("FERRY_SUITE_NONBLOCKING_ON_ENGINE");
  if (!wanted || std::strcmp(wanted, "1") != 0) return;
  const int rank = world_rank();
  const std::vector<int> values(kElements, 7);
  const Buffer send = make_buffer(values, Memory::device);
  const Buffer recv = make_buffer(values, Memory::device);
  MPI_Request request = MPI_REQUEST_NULL;
  const Case roots{"MPI_Ibcast", "MPI_INT", "",
                   kElements,    "device",  "rank 0 names itself the root, the others rank 1"};
  expect_class(
      roots,
      completed(MPI_Ibcast(recv.data(), kElements, MPI_INT, rank == 0 ? 0 : 1, comm, &request),
                &request),
      MPI_ERR_ROOT);
  const DisagreeingCounts c = disagreeing_counts();
  const Case pairs{"MPI_Ialltoallv",
                   "MPI_INT",
                   "",
                   1,
                   "device",
                   "rank 0 sends rank 1 more than rank 1 receives from it"};
  expect_class(
      pairs,
      completed(MPI_Ialltoallv(send.data(), c.send.data(), c.displs.data(), MPI_INT, recv.data(),
                               c.recv.data(), c.displs.data(), MPI_INT, comm, &request),
                &request),
      MPI_ERR_COUNT);
  expect_buffer(
      Case{"disagreeing nonblocking calls", "MPI_INT", "", 0, "device", "(receive buffer)"}, recv,
      values);
}

}  // namespace

int main(int argc, char** argv) {
  suite::init(&argc, &argv);
  MPI_Comm comm;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  test_bad_calls(comm);
  test_null_send_buffer(comm);
  test_disagreeing_ranks(comm);
  test_disagreeing_nonblocking(comm);
  test_still_usable(comm);
  MPI_Comm_free(&comm);
  return suite::finish();
}

// MPI_Iallreduce, MPI_Ibcast and MPI_Ialltoallv on device buffers as
// Ferry's engine runs them: many calls outstanding at once on one communicator, completed with every completion
// call next to host point-to-point requests; blocking allreduces between
// nonblocking ones; a split communicator (freed while its call is
// outstanding, on the engine); calls where some ranks pass host buffers (every rank then
// takes the real MPI) with an all-device call queued behind; MPI_Request_free
// refused; persistent collectives (MPIX_*_init) started round after round.
// With FERRY_SUITE_EXPECT_PROGRESS=1 the result must
// also arrive while no rank makes any MPI call.
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "completion.h"
#include "suite.h"
// The persistent collectives by their name in this MPI.
#include "mpi40_calls.h"

namespace {

using namespace suite;

// One Iallreduce of this rank: its buffers, and how to check the result.
struct Posted {
  Case what;
  std::unique_ptr<Operands> operands;
  std::function<bool()> matches;  // the receive buffer holds the sum

  void check() const {
    expect(matches(), what, "wrong sum");
    expect(operands->recv->guards_intact(), what, "wrote past the receive buffer");
  }
};

// Set by the test's run under the engine: calls move without MPI calls.
bool engine_expected() {
  const char* value = std::getenv("FERRY_SUITE_EXPECT_PROGRESS");
  return value && *value == '1';
}

// The sum over the given world ranks of their seeded values for case id.
template <class T>
std::vector<T> sum_over(const std::vector<int>& world_ranks, uint64_t id, long count, Values kind) {
  std::vector<T> total(count, T{});
  for (int world : world_ranks) {
    const std::vector<T> part = random_values<T>(count, id, world, kind);
    for (long i = 0; i < count; ++i) total[i] += part[i];
  }
  return total;
}

// World ranks of comm's members, in comm's rank order.
std::vector<int> members_of(MPI_Comm comm) {
  int size = 0;
  MPI_Comm_size(comm, &size);
  std::vector<int> members(size);
  const int me = world_rank();
  MPI_Allgather(&me, 1, MPI_INT, members.data(), 1, MPI_INT, comm);
  return members;
}

// Posts a sum of count values of T over comm; memory says where this rank's
// buffers are.
template <class T>
Posted post_sum(MPI_Comm comm, const Datatype& type, long count, Layout layout, MPI_Request* request,
                const std::string& detail) {
  const uint64_t id = next_case_id();
  const std::vector<int> members = members_of(comm);
  const bool in_place = layout == Layout::in_place;
  Posted posted{Case{"MPI_Iallreduce", type.name, "MPI_SUM", count, layout_name(layout), detail}, nullptr, {}};
  const std::vector<T> mine = random_values<T>(count, id, world_rank(), Values::small);
  const std::vector<T> garbage = random_values<T>(count, id + 1000003, world_rank());
  posted.operands = std::make_unique<Operands>(
      place(layout, id, world_rank(), in_place, &mine, in_place ? &mine : &garbage));
  check_mpi(MPI_Iallreduce(posted.operands->send_arg(), posted.operands->recv_arg(), int(count), type.handle,
                           MPI_SUM, comm, request),
            posted.what);
  const std::vector<T> expected = sum_over<T>(members, id, count, Values::small);
  Operands* operands = posted.operands.get();
  posted.matches = [operands, expected, count] { return read_back<T>(*operands->recv, count) == expected; };
  return posted;
}

// A broadcast of count values of T from root over comm.
template <class T>
Posted post_bcast(MPI_Comm comm, const Datatype& type, long count, Layout layout, int root, MPI_Request* request,
                  const std::string& detail) {
  const uint64_t id = next_case_id();
  const std::vector<int> members = members_of(comm);
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  Posted posted{Case{"MPI_Ibcast", type.name, "", count, layout_name(layout), detail + ", root " + std::to_string(root)},
                nullptr, {}};
  const std::vector<T> expected = random_values<T>(count, id, members[root]);
  const std::vector<T> garbage = random_values<T>(count, id + 1000003, world_rank());
  posted.operands = std::make_unique<Operands>(
      place<T>(layout, id, world_rank(), false, nullptr, rank == root ? &expected : &garbage));
  check_mpi(MPI_Ibcast(posted.operands->recv_arg(), int(count), type.handle, root, comm, request), posted.what);
  Operands* operands = posted.operands.get();
  posted.matches = [operands, expected, count] { return read_back<T>(*operands->recv, count) == expected; };
  return posted;
}

// An alltoallv over comm in which rank r sends (r + p) % 3 * count + 1
// values of T to rank p, at displacements with gaps, received in reverse
// block order.
template <class T>
Posted post_alltoallv(MPI_Comm comm, const Datatype& type, long count, Layout layout, MPI_Request* request,
                      const std::string& detail) {
  const uint64_t id = next_case_id();
  const std::vector<int> members = members_of(comm);
  const int n = int(members.size());
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  auto block = [count](int from, int to) { return int((from + to) % 3 * count + 1); };
  std::vector<int> send_counts(n), send_displs(n), recv_counts(n), recv_displs(n);
  int send_total = 0, recv_total = 0;
  for (int p = 0; p < n; ++p) {
    send_counts[p] = block(rank, p);
    send_displs[p] = send_total + 1;  // one value of gap before each block
    send_total += send_counts[p] + 1;
  }
  for (int p = n - 1; p >= 0; --p) {
    recv_counts[p] = block(p, rank);
    recv_displs[p] = recv_total;
    recv_total += recv_counts[p];
  }
  Posted posted{Case{"MPI_Ialltoallv", type.name, "", count, layout_name(layout), detail}, nullptr, {}};
  const std::vector<T> mine = random_values<T>(send_total, id, world_rank());
  const std::vector<T> garbage = random_values<T>(recv_total, id + 1000003, world_rank());
  posted.operands = std::make_unique<Operands>(place(layout, id, world_rank(), false, &mine, &garbage));
  check_mpi(MPI_Ialltoallv(posted.operands->send_arg(), send_counts.data(), send_displs.data(), type.handle,
                           posted.operands->recv_arg(), recv_counts.data(), recv_displs.data(), type.handle, comm,
                           request),
            posted.what);
  // What rank p sent this rank: its values at its displacement for this rank.
  std::vector<T> expected(recv_total);
  for (int p = 0; p < n; ++p) {
    int displ = 0;
    for (int q = 0; q < rank; ++q) displ += block(p, q) + 1;
    const std::vector<T> theirs = random_values<T>(displ + 1 + block(p, rank), id, members[p]);
    std::copy(theirs.begin() + displ + 1, theirs.end(), expected.begin() + recv_displs[p]);
  }
  Operands* operands = posted.operands.get();
  posted.matches = [operands, expected, recv_total] { return read_back<T>(*operands->recv, recv_total) == expected; };
  return posted;
}

// Many calls at once, completed with each completion call in turn, with a
// host ring exchange in the same request array.
void many_outstanding() {
  const Datatype f64{MPI_DOUBLE, "MPI_DOUBLE"}, i32{MPI_INT, "MPI_INT"}, f32{MPI_FLOAT, "MPI_FLOAT"};
  const std::vector<long> counts = {1, 7, 1023, 65537};
  const std::vector<Layout> layouts = {Layout::device, Layout::offset, Layout::in_place};
  for (int round = 0; round < kCompletions; ++round) {
    std::vector<MPI_Request> requests;
    std::vector<Posted> posted;
    for (int k = 0; k < 12; ++k) {
      const long count = counts[(round + k) % counts.size()];
      const Layout layout = layouts[(round + k) % layouts.size()];
      MPI_Request request;
      const std::string detail = "call " + std::to_string(k) + " of 12 outstanding";
      const Layout copy_layout = layout == Layout::in_place ? Layout::device : layout;
      if (k % 5 == 0) posted.push_back(post_sum<double>(MPI_COMM_WORLD, f64, count, layout, &request, detail));
      if (k % 5 == 1) posted.push_back(post_sum<int>(MPI_COMM_WORLD, i32, count, layout, &request, detail));
      if (k % 5 == 2) posted.push_back(post_sum<float>(MPI_COMM_WORLD, f32, count, layout, &request, detail));
      if (k % 5 == 3)
        posted.push_back(post_bcast<int>(MPI_COMM_WORLD, i32, count, copy_layout, k % world_size(), &request, detail));
      if (k % 5 == 4)
        posted.push_back(post_alltoallv<double>(MPI_COMM_WORLD, f64, count / 7, copy_layout, &request, detail));
      requests.push_back(request);
    }
    // A host ring exchange among them.
    const int n = world_size(), me = world_rank();
    int outgoing = me * 1000 + round, incoming = -1;
    requests.resize(requests.size() + 2);
    MPI_Irecv(&incoming, 1, MPI_INT, (me + n - 1) % n, 77, MPI_COMM_WORLD, &requests[requests.size() - 2]);
    MPI_Isend(&outgoing, 1, MPI_INT, (me + 1) % n, 77, MPI_COMM_WORLD, &requests.back());
    const Case what{"MPI_Iallreduce", "mixed", "MPI_SUM", 12, "", completion_name(completion(round))};
    complete(completion(round), requests, what);
    expect(incoming == ((me + n - 1) % n) * 1000 + round, what, "host ring message among the requests");
    for (Posted& p : posted) p.check();
  }
}

// Blocking allreduces between nonblocking ones on one communicator,
// completed in reverse order.
void blocking_between() {
  const Datatype f64{MPI_DOUBLE, "MPI_DOUBLE"};
  MPI_Request first, second;
  Posted a = post_sum<double>(MPI_COMM_WORLD, f64, 4099, Layout::device, &first, "before a blocking allreduce");
  const uint64_t id = next_case_id();
  const Case blocking{"MPI_Allreduce", "MPI_DOUBLE", "MPI_SUM", 333, "device", "between nonblocking ones"};
  const std::vector<double> mine = random_values<double>(333, id, world_rank(), Values::small);
  Buffer in = make_buffer(mine, Memory::device), out = make_buffer(mine, Memory::device);
  check_mpi(MPI_Allreduce(in.data(), out.data(), 333, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD), blocking);
  Posted b = post_sum<double>(MPI_COMM_WORLD, f64, 1 << 18, Layout::in_place, &second, "after a blocking allreduce");
  check_mpi(MPI_Wait(&second, MPI_STATUS_IGNORE), b.what);
  check_mpi(MPI_Wait(&first, MPI_STATUS_IGNORE), a.what);
  expect(read_back<double>(out, 333) == sum_over<double>(members_of(MPI_COMM_WORLD), id, 333, Values::small),
         blocking, "wrong sum");
  a.check();
  b.check();
}

// A split communicator in reversed order. On the engine it is freed while
// its call is outstanding, as MPI allows (Open MPI 4.1's own nonblocking
// collectives crash in that case at 3 ranks, so not on the other routes).
void split_communicator() {
  MPI_Comm comm;
  MPI_Comm_split(MPI_COMM_WORLD, world_rank() % 2, world_size() - world_rank(), &comm);
  MPI_Request request;
  Posted p = post_sum<int>(comm, Datatype{MPI_INT, "MPI_INT"}, 10001, Layout::offset, &request,
                           "split communicator");
  if (engine_expected()) MPI_Comm_free(&comm);
  check_mpi(MPI_Wait(&request, MPI_STATUS_IGNORE), p.what);
  if (!engine_expected()) MPI_Comm_free(&comm);
  p.check();
}

// Odd ranks pass host buffers: every rank takes the real MPI for that call;
// an all-device call follows it on the same communicator.
void host_on_some_ranks() {
  const Datatype f32{MPI_FLOAT, "MPI_FLOAT"};
  MPI_Request requests[2];
  Posted mixed = post_sum<float>(MPI_COMM_WORLD, f32, 513, Layout::mixed_ranks, &requests[0], "host buffers on odd ranks");
  Posted after = post_sum<float>(MPI_COMM_WORLD, f32, 70001, Layout::device, &requests[1],
                                 "all device, behind a call with host buffers");
  check_mpi(MPI_Waitall(2, requests, MPI_STATUSES_IGNORE), after.what);
  mixed.check();
  after.check();
}

// Rank 0 passes host buffers, completed by a loop of MPI_Test.
void host_only_on_rank_zero() {
  // Rank 0 host, the others device: a Buffer in host memory on rank 0 only.
  const uint64_t id = next_case_id();
  const Case what{"MPI_Iallreduce", "MPI_LONG", "MPI_SUM", 999, "host on rank 0", "mixed kinds"};
  const std::vector<long> mine = random_values<long>(999, id, world_rank(), Values::small);
  const Memory memory = world_rank() == 0 ? Memory::host : Memory::device;
  Buffer in = make_buffer(mine, memory), out = make_buffer(mine, memory);
  MPI_Request request;
  check_mpi(MPI_Iallreduce(in.data(), out.data(), 999, MPI_LONG, MPI_SUM, MPI_COMM_WORLD, &request), what);
  int done = 0;
  Deadline deadline(what, "MPI_Test");
  while (!done) {
    check_mpi(MPI_Test(&request, &done, MPI_STATUS_IGNORE), what);
    deadline.check();
  }
  expect(read_back<long>(out, 999) == sum_over<long>(members_of(MPI_COMM_WORLD), id, 999, Values::small),
         what, "wrong sum");
}

// MPI_Request_free of a nonblocking collective's request is erroneous:
// refused with MPI_ERR_REQUEST, as Open MPI does, and the request stays
// usable (completed here by a loop of MPI_Request_get_status).
void refused_free() {
  // MPICH frees it (what an erroneous call does is the MPI's choice), and a
  // call that Ferry stages (one GPU shared by the ranks) is MPICH's request.
  if (mpi_library_is("MPICH")) return;
  MPI_Request request;
  Posted p = post_sum<int>(MPI_COMM_WORLD, Datatype{MPI_INT, "MPI_INT"}, 2049, Layout::device, &request,
                           "MPI_Request_free refused");
  int error_class = MPI_SUCCESS;
  MPI_Error_class(MPI_Request_free(&request), &error_class);
  expect(error_class == MPI_ERR_REQUEST, p.what, "MPI_Request_free did not fail with MPI_ERR_REQUEST");
  expect(request != MPI_REQUEST_NULL, p.what, "the refused MPI_Request_free cleared the handle");
  int done = 0;
  Deadline deadline(p.what, "MPI_Request_get_status");
  while (!done) {
    check_mpi(MPI_Request_get_status(request, &done, MPI_STATUS_IGNORE), p.what);
    deadline.check();
  }
  check_mpi(MPI_Wait(&request, MPI_STATUS_IGNORE), p.what);
  p.check();
}

// The results arrive while no rank makes an MPI call: the engine moves them.
// Whether two ranks of the job run on one GPU (ferry_device_key).
bool ranks_share_a_gpu() {
  const unsigned long long mine = suite_device_key();
  std::vector<unsigned long long> keys(world_size());
  MPI_Allgather(&mine, 1, MPI_UNSIGNED_LONG_LONG, keys.data(), 1, MPI_UNSIGNED_LONG_LONG, MPI_COMM_WORLD);
  std::sort(keys.begin(), keys.end());
  return std::adjacent_find(keys.begin(), keys.end()) != keys.end();
}

void progress_without_mpi_calls() {
  const Datatype f64{MPI_DOUBLE, "MPI_DOUBLE"};
  const std::string detail = "no MPI call until the result is there";
  // Ranks sharing a GPU stage MPI_Iallreduce (its copy-engine push would
  // wait on the other process's time slices) unless one rank a GPU does the
  // device work (FERRY_GPU_LEADER; by default only where the GPU takes
  // turns, which this program cannot see): then its result needs the wait.
  const char* leading = std::getenv("FERRY_GPU_LEADER");
  const bool allreduce_moves_alone = !ranks_share_a_gpu() || (leading && std::string(leading) == "on");
  MPI_Request requests[3];
  std::vector<Posted> posted;
  posted.push_back(post_sum<double>(MPI_COMM_WORLD, f64, 100003, Layout::device, &requests[0], detail));
  posted.push_back(post_bcast<double>(MPI_COMM_WORLD, f64, 100003, Layout::device, 1, &requests[1], detail));
  posted.push_back(post_alltoallv<double>(MPI_COMM_WORLD, f64, 10007, Layout::device, &requests[2], detail));
  // Only device copies (suite_memcpy) until the results are there: no MPI call.
  for (const Posted& p : posted) {
    if (&p == &posted[0] && !allreduce_moves_alone) continue;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    bool arrived = p.matches();
    while (!arrived && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      arrived = p.matches();
    }
    expect(arrived, p.what, "the result did not arrive before MPI_Waitall was called");
  }
  check_mpi(MPI_Waitall(3, requests, MPI_STATUSES_IGNORE), posted[0].what);
  for (const Posted& p : posted) p.check();
}

// Persistent collectives (MPI 4.0's, MPIX_ in Open MPI 4.1): set up once,
// started in several rounds with new data each time (MPI_Start and
// MPI_Startall), completed with every completion call, next to a host
// ring exchange; the handles stay the same throughout; then freed.
void persistent_collectives() {
  // MPICH's own persistent collectives (4.0.2, 5.0.2) fail among other
  // requests in MPI_Testall (MPI_ERR_IN_STATUS) and MPI_Waitany, host
  // buffers too; Ferry's pass.
  if (!suite_ferry_backend() && mpi_library_is("MPICH")) return;
  const int n = world_size(), me = world_rank();
  const long count = 1001;
  const int root = 1 % n;
  Buffer sum_in(count * sizeof(double), Memory::device), sum_out(count * sizeof(double), Memory::device, 8);
  Buffer broadcast(count * sizeof(int), Memory::device, 4);
  // Alltoallv: this rank sends (me + p) % 4 + 1 blocks of 33 to rank p.
  auto block = [](int from, int to) { return ((from + to) % 4 + 1) * 33; };
  std::vector<int> send_counts(n), send_displs(n), recv_counts(n), recv_displs(n);
  int send_total = 0, recv_total = 0;
  for (int p = 0; p < n; ++p) {
    send_counts[p] = block(me, p);
    send_displs[p] = send_total;
    send_total += send_counts[p];
    recv_counts[p] = block(p, me);
    recv_displs[p] = recv_total;
    recv_total += recv_counts[p];
  }
  Buffer spread_in(send_total * sizeof(float), Memory::device), spread_out(recv_total * sizeof(float), Memory::device);
  const Case what{"MPIX_*_init", "mixed", "", count, "device", "persistent collectives"};
  std::vector<MPI_Request> requests(3);
  check_mpi(SUITE_PERSISTENT(Allreduce_init)(sum_in.data(), sum_out.data(), int(count), MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD,
                                MPI_INFO_NULL, &requests[0]),
            what);
  check_mpi(SUITE_PERSISTENT(Bcast_init)(broadcast.data(), int(count), MPI_INT, root, MPI_COMM_WORLD, MPI_INFO_NULL, &requests[1]),
            what);
  check_mpi(SUITE_PERSISTENT(Alltoallv_init)(spread_in.data(), send_counts.data(), send_displs.data(), MPI_FLOAT, spread_out.data(),
                                recv_counts.data(), recv_displs.data(), MPI_FLOAT, MPI_COMM_WORLD, MPI_INFO_NULL,
                                &requests[2]),
            what);
  const std::vector<MPI_Request> handles = requests;
  for (int round = 0; round < kCompletions; ++round) {
    const uint64_t id = next_case_id();
    sum_in.write(random_values<double>(count, id, me, Values::small).data(), count * sizeof(double));
    const std::vector<int> sent = random_values<int>(count, id + 1, root);
    broadcast.write(me == root ? sent.data() : random_values<int>(count, id + 2, me).data(), count * sizeof(int));
    spread_in.write(random_values<float>(send_total, id + 3, me).data(), send_total * sizeof(float));
    if (round % 2 == 0) {
      check_mpi(MPI_Startall(3, requests.data()), what);
    } else {
      for (MPI_Request& request : requests) check_mpi(MPI_Start(&request), what);
    }
    std::vector<MPI_Request> batch = requests;
    int outgoing = me * 1000 + round, incoming = -1;
    batch.resize(5);
    MPI_Irecv(&incoming, 1, MPI_INT, (me + n - 1) % n, 78, MPI_COMM_WORLD, &batch[3]);
    MPI_Isend(&outgoing, 1, MPI_INT, (me + 1) % n, 78, MPI_COMM_WORLD, &batch[4]);
    Case round_case = what;
    round_case.detail = "round " + std::to_string(round) + ", " + completion_name(completion(round));
    complete(completion(round), batch, round_case, {true, true, true, false, false});
    for (int i = 0; i < 3; ++i) expect(batch[i] == handles[i], round_case, "a persistent handle changed");
    expect(incoming == ((me + n - 1) % n) * 1000 + round, round_case, "host ring message among the requests");

    std::vector<double> sum(count, 0.0);
    for (int r = 0; r < n; ++r) {
      const std::vector<double> part = random_values<double>(count, id, r, Values::small);
      for (long i = 0; i < count; ++i) sum[i] += part[i];
    }
    expect(read_back<double>(sum_out, count) == sum, round_case, "MPIX_Allreduce_init: wrong sum");
    expect(read_back<int>(broadcast, count) == sent, round_case, "MPIX_Bcast_init: wrong data");
    std::vector<float> expected(recv_total);
    for (int p = 0; p < n; ++p) {
      int displ = 0;
      for (int q = 0; q < me; ++q) displ += block(p, q);
      const std::vector<float> theirs = random_values<float>(displ + block(p, me), id + 3, p);
      std::copy(theirs.begin() + displ, theirs.end(), expected.begin() + recv_displs[p]);
    }
    expect(read_back<float>(spread_out, recv_total) == expected, round_case, "MPIX_Alltoallv_init: wrong blocks");
    expect(sum_out.guards_intact() && broadcast.guards_intact() && spread_out.guards_intact(), round_case,
           "wrote past a receive buffer");
  }
  for (MPI_Request& request : requests) {
    check_mpi(MPI_Request_free(&request), what);
    expect(request == MPI_REQUEST_NULL, what, "MPI_Request_free left the handle set");
  }
}

}  // namespace

int main(int argc, char** argv) {
  init(&argc, &argv);
  many_outstanding();
  blocking_between();
  split_communicator();
  host_on_some_ranks();
  host_only_on_rank_zero();
  refused_free();
  persistent_collectives();
  if (engine_expected()) progress_without_mpi_calls();
  return finish();
}

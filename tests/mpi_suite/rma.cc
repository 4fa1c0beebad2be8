// One-sided communication on device windows: MPI_Win_allocate with the MPI
// 4.1 memory-kinds info key, MPI_Win_allocate_shared with MPI_Win_shared_query,
// and MPI_Win_create on a device buffer at an unaligned address; MPI_Put,
// MPI_Get, MPI_Accumulate, MPI_Get_accumulate, MPI_Fetch_and_op,
// MPI_Compare_and_swap and the request-based forms, with device and host
// origin buffers; every synchronization mode (fence, post/start/complete/
// wait/test, lock/unlock, lock_all, flush); accumulates and exclusive locks
// checked for atomicity under contention; the predefined window attributes;
// the error classes of bad calls; host windows beside device windows; host
// windows reached with device origin and result buffers (staged); a window
// over a sub-communicator.
//
// Window memory is read and written only through suite_memcpy (and through
// MPI), as real GPU memory would have to be.
//
// This half runs the epochs of active and passive target; rma_windows.cc
// has window attributes, bad calls, host windows and windows that outlive
// their communicator.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "rma.h"
#include "rma_common.h"
#include "suite.h"

namespace {

using namespace suite;

Memory origin_memory(uint64_t case_id, int rank) { return (case_id + rank) % 2 ? Memory::host : Memory::device; }

// ---- Active target ----------------------------------------------------------

// Fence epochs: every rank puts a block into its right neighbour's window,
// then gets a block of its left neighbour's, at odd offsets and counts.
template <class T>
void fence_put_get(Flavor flavor, const char* type_name, MPI_Comm comm, const char* comm_name) {
  int rank, ranks;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &ranks);
  const uint64_t id = next_case_id();
  Case what{std::string(flavor_name(flavor)) + " MPI_Put/MPI_Get fence", type_name, "", 0, "", comm_name};
  const size_t count = 1001;
  const size_t block = 333;
  const int right = (rank + 1) % ranks, left = (rank + ranks - 1) % ranks;
  auto initial = [&](int r) { return random_values<T>(count, id, r); };
  auto sent = [&](int r) { return random_values<T>(block, id, 1000 + r); };
  auto put_at = [](int r) { return size_t(1 + 2 * r); };
  // rank r's window after the put from rank r-1.
  auto after_put = [&](int r) {
    std::vector<T> w = initial(r);
    const int from = (r + ranks - 1) % ranks;
    const std::vector<T> s = sent(from);
    std::copy(s.begin(), s.end(), w.begin() + put_at(from));
    return w;
  };

  DeviceWindow<T> window(flavor, count, initial(rank), comm, what);
  check_mpi(MPI_Win_fence(0, window.win()), what);
  Buffer origin = make_buffer(sent(rank), origin_memory(id, rank), 1);
  check_mpi(MPI_Put(origin.data(), int(block), mpi_type<T>(), right,
                    window.disp(put_at(rank)), int(block), mpi_type<T>(), window.win()),
            what);
  check_mpi(MPI_Win_fence(0, window.win()), what);
  expect_values(what, after_put(rank), window.read());

  Case get_case = what;
  get_case.detail += ", get";
  const size_t get_from = 5, get_count = 777;
  Buffer fetched = make_buffer(poisoned<T>(get_count), origin_memory(id, rank + 1), 3);
  check_mpi(MPI_Get(fetched.data(), int(get_count), mpi_type<T>(), left, window.disp(get_from), int(get_count),
                    mpi_type<T>(), window.win()),
            get_case);
  check_mpi(MPI_Win_fence(MPI_MODE_NOSUCCEED, window.win()), get_case);
  const std::vector<T> left_window = after_put(left);
  expect_buffer(get_case, fetched,
                std::vector<T>(left_window.begin() + get_from, left_window.begin() + get_from + get_count));
  expect_buffer(what, origin, sent(rank));
}

// General active target: rank r exposes its window to r-1 and accesses r+1,
// in a ring; the target waits with MPI_Win_wait or polls MPI_Win_test.
void pscw(Flavor flavor, bool poll) {
  const int rank = world_rank(), ranks = world_size();
  const uint64_t id = next_case_id();
  Case what{std::string(flavor_name(flavor)) + " post/start/complete/" + (poll ? "test" : "wait"), "MPI_DOUBLE"};
  const size_t count = 257;
  const int right = (rank + 1) % ranks, left = (rank + ranks - 1) % ranks;
  DeviceWindow<double> window(flavor, count, poisoned<double>(count), MPI_COMM_WORLD, what);
  MPI_Group world, origins, targets;
  MPI_Comm_group(MPI_COMM_WORLD, &world);
  MPI_Group_incl(world, 1, &left, &origins);
  MPI_Group_incl(world, 1, &right, &targets);

  for (int round = 0; round < 3; ++round) {
    const std::vector<double> mine = random_values<double>(count, id + round, rank);
    Buffer origin = make_buffer(mine, origin_memory(id + round, rank));
    check_mpi(MPI_Win_post(origins, 0, window.win()), what);
    check_mpi(MPI_Win_start(targets, 0, window.win()), what);
    check_mpi(MPI_Put(origin.data(), int(count), MPI_DOUBLE, right, 0, int(count), MPI_DOUBLE, window.win()), what);
    check_mpi(MPI_Win_complete(window.win()), what);
    if (poll) {
      int done = 0;
      while (!done) check_mpi(MPI_Win_test(window.win(), &done), what);
    } else {
      check_mpi(MPI_Win_wait(window.win()), what);
    }
    expect_values(what, random_values<double>(count, id + round, left), window.read());
    // Nobody posts the next round before every rank has checked this one.
    MPI_Barrier(MPI_COMM_WORLD);
  }
  MPI_Group_free(&origins);
  MPI_Group_free(&targets);
  MPI_Group_free(&world);
}

// ---- Passive target ---------------------------------------------------------

// Read-modify-write of a counter under an exclusive lock, from every rank at
// once: any overlap of two lock holders loses an increment.
void exclusive_lock_counter(Flavor flavor) {
  const int ranks = world_size();
  Case what{std::string(flavor_name(flavor)) + " MPI_Win_lock(EXCLUSIVE) read-modify-write", "MPI_LONG"};
  const int rounds = 40;
  DeviceWindow<long> window(flavor, 2, {0, 0}, MPI_COMM_WORLD, what);
  Buffer value(sizeof(long), Memory::device);
  for (int i = 0; i < rounds; ++i) {
    check_mpi(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 0, 0, window.win()), what);
    check_mpi(MPI_Get(value.data(), 1, MPI_LONG, 0, window.disp(1), 1, MPI_LONG, window.win()), what);
    check_mpi(MPI_Win_flush(0, window.win()), what);
    long seen = 0;
    value.read(&seen, sizeof(seen));
    ++seen;
    value.write(&seen, sizeof(seen));
    check_mpi(MPI_Put(value.data(), 1, MPI_LONG, 0, window.disp(1), 1, MPI_LONG, window.win()), what);
    check_mpi(MPI_Win_unlock(0, window.win()), what);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (world_rank() == 0) expect_values(what, std::vector<long>{0, long(rounds) * ranks}, window.read());
  MPI_Barrier(MPI_COMM_WORLD);
}

// Concurrent accumulates into every rank's window under shared locks: the
// result must be the exact reduction of every contribution.
template <class T>
void accumulate_contention(Flavor flavor, MPI_Op op, const char* op_name, const char* type_name, Values values) {
  const int rank = world_rank(), ranks = world_size();
  const uint64_t id = next_case_id();
  Case what{std::string(flavor_name(flavor)) + " MPI_Accumulate under MPI_Win_lock_all", type_name, op_name, 0};
  const size_t count = 515;
  const int rounds = 6;
  auto contribution = [&](int r, int round) { return random_values<T>(count, id + 1 + round, r, values); };
  const std::vector<T> initial = random_values<T>(count, id, rank, values);
  DeviceWindow<T> window(flavor, count, initial, MPI_COMM_WORLD, what);

  check_mpi(MPI_Win_lock_all(0, window.win()), what);
  for (int round = 0; round < rounds; ++round) {
    Buffer origin = make_buffer(contribution(rank, round), origin_memory(id + round, rank));
    for (int t = 0; t < ranks; ++t) {
      const int target = (rank + t) % ranks;
      check_mpi(MPI_Accumulate(origin.data(), int(count), mpi_type<T>(), target, 0, int(count), mpi_type<T>(), op,
                               window.win()),
                what);
    }
    check_mpi(MPI_Win_flush_all(window.win()), what);
  }
  check_mpi(MPI_Win_unlock_all(window.win()), what);
  MPI_Barrier(MPI_COMM_WORLD);

  std::vector<T> expected = initial;
  for (int round = 0; round < rounds; ++round)
    for (int r = 0; r < ranks; ++r) {
      const std::vector<T> c = contribution(r, round);
      for (size_t i = 0; i < count; ++i) {
        if (op == MPI_SUM) expected[i] += c[i];
        else if (op == MPI_MAX) expected[i] = std::max(expected[i], c[i]);
        else if constexpr (std::is_integral_v<T>) expected[i] ^= c[i];
      }
    }
  expect_values(what, expected, window.read());
  MPI_Barrier(MPI_COMM_WORLD);
}

// MPI_Fetch_and_op(SUM, 1) on one counter from every rank at once: the
// values fetched, over all ranks, are exactly 0 .. total-1.
void fetch_and_op_tickets(Flavor flavor) {
  const int ranks = world_size();
  Case what{std::string(flavor_name(flavor)) + " MPI_Fetch_and_op tickets", "MPI_INT64_T", "MPI_SUM"};
  const int per_rank = 50;
  const int counter_rank = ranks - 1;
  DeviceWindow<int64_t> window(flavor, 3, {7, 0, 7}, MPI_COMM_WORLD, what);
  Buffer one = make_buffer(std::vector<int64_t>{1}, Memory::device);
  Buffer fetched(sizeof(int64_t), Memory::device);
  std::vector<int64_t> mine;
  check_mpi(MPI_Win_lock_all(0, window.win()), what);
  for (int i = 0; i < per_rank; ++i) {
    check_mpi(MPI_Fetch_and_op(one.data(), fetched.data(), MPI_INT64_T, counter_rank, window.disp(1), MPI_SUM,
                               window.win()),
              what);
    check_mpi(MPI_Win_flush(counter_rank, window.win()), what);
    mine.push_back(read_back<int64_t>(fetched, 1)[0]);
  }
  check_mpi(MPI_Win_unlock_all(window.win()), what);
  std::vector<int64_t> all(size_t(per_rank) * ranks);
  MPI_Allgather(mine.data(), per_rank, MPI_INT64_T, all.data(), per_rank, MPI_INT64_T, MPI_COMM_WORLD);
  std::sort(all.begin(), all.end());
  std::vector<int64_t> tickets(all.size());
  std::iota(tickets.begin(), tickets.end(), 0);
  expect_values(what, tickets, all);
  if (world_rank() == counter_rank)
    expect_values(what, std::vector<int64_t>{7, int64_t(per_rank) * ranks, 7}, window.read());
  MPI_Barrier(MPI_COMM_WORLD);
}

// Get_accumulate with MPI_NO_OP (an atomic read) and MPI_REPLACE (an atomic
// swap), and MPI_Compare_and_swap electing exactly one winner.
void fetch_replace_and_swap(Flavor flavor) {
  const int rank = world_rank(), ranks = world_size();
  const uint64_t id = next_case_id();
  Case what{std::string(flavor_name(flavor)) + " MPI_Get_accumulate / MPI_Compare_and_swap", "MPI_INT"};
  const size_t count = 33;
  const std::vector<int> initial = random_values<int>(count, id, rank);
  DeviceWindow<int> window(flavor, count + 1, [&] {
    std::vector<int> w = initial;
    w.push_back(-1);  // the election slot
    return w;
  }(), MPI_COMM_WORLD, what);
  const int right = (rank + 1) % ranks;

  check_mpi(MPI_Win_lock_all(0, window.win()), what);
  // Atomic read of the right neighbour's data.
  Buffer read(count * sizeof(int), Memory::device, 4);
  check_mpi(MPI_Get_accumulate(nullptr, 0, MPI_INT, read.data(), int(count), MPI_INT, right, 0, int(count), MPI_INT,
                               MPI_NO_OP, window.win()),
            what);
  check_mpi(MPI_Win_flush(right, window.win()), what);
  expect_buffer(what, read, random_values<int>(count, id, right));

  // Election on rank 0's slot: exactly one rank sees -1.
  Buffer candidate = make_buffer(std::vector<int>{rank}, origin_memory(id, rank));
  Buffer expected_old = make_buffer(std::vector<int>{-1}, Memory::device);
  Buffer old_value(sizeof(int), origin_memory(id, rank + 1));
  check_mpi(MPI_Compare_and_swap(candidate.data(), expected_old.data(), old_value.data(), MPI_INT, 0,
                                 window.disp(count), window.win()),
            what);
  check_mpi(MPI_Win_flush(0, window.win()), what);
  check_mpi(MPI_Win_unlock_all(window.win()), what);
  MPI_Barrier(MPI_COMM_WORLD);
  const int seen = read_back<int>(old_value, 1)[0];
  std::vector<int> everyone(ranks);
  MPI_Allgather(&seen, 1, MPI_INT, everyone.data(), 1, MPI_INT, MPI_COMM_WORLD);
  const int winners = int(std::count(everyone.begin(), everyone.end(), -1));
  expect(winners == 1, what, "compare-and-swap elected " + std::to_string(winners) + " ranks");
  int winner = -1;
  if (rank == 0) winner = window.read()[count];
  MPI_Bcast(&winner, 1, MPI_INT, 0, MPI_COMM_WORLD);
  for (int r = 0; r < ranks; ++r)
    expect(everyone[r] == (r == winner ? -1 : winner), what,
           "rank " + std::to_string(r) + " saw " + std::to_string(everyone[r]) + ", winner " + std::to_string(winner));

  // Atomic swap: each rank replaces its right neighbour's data with its own
  // and gets the old contents back.
  MPI_Barrier(MPI_COMM_WORLD);
  Case swap = what;
  swap.op = "MPI_REPLACE";
  const std::vector<int> replacement = random_values<int>(count, id + 1, rank);
  Buffer incoming = make_buffer(replacement, origin_memory(id + 1, rank));
  Buffer old_block(count * sizeof(int), Memory::device);
  check_mpi(MPI_Win_lock(MPI_LOCK_SHARED, right, 0, window.win()), swap);
  check_mpi(MPI_Get_accumulate(incoming.data(), int(count), MPI_INT, old_block.data(), int(count), MPI_INT, right, 0,
                               int(count), MPI_INT, MPI_REPLACE, window.win()),
            swap);
  check_mpi(MPI_Win_unlock(right, window.win()), swap);
  MPI_Barrier(MPI_COMM_WORLD);
  expect_buffer(swap, old_block, random_values<int>(count, id, right));
  std::vector<int> now = window.read();
  now.pop_back();
  expect_values(swap, random_values<int>(count, id + 1, (rank + ranks - 1) % ranks), now);
  MPI_Barrier(MPI_COMM_WORLD);
}

// MPI_Rput, MPI_Rget, MPI_Raccumulate and MPI_Rget_accumulate in a
// lock_all epoch, completed by MPI_Waitall.
void request_based(Flavor flavor) {
  const int rank = world_rank(), ranks = world_size();
  const uint64_t id = next_case_id();
  Case what{std::string(flavor_name(flavor)) + " MPI_Rput/MPI_Rget/MPI_Raccumulate/MPI_Rget_accumulate", "MPI_FLOAT"};
  const size_t count = 99;
  const int right = (rank + 1) % ranks, left = (rank + ranks - 1) % ranks;
  DeviceWindow<float> window(flavor, 3 * count, poisoned<float>(3 * count), MPI_COMM_WORLD, what);
  const std::vector<float> mine = random_values<float>(count, id, rank, Values::small);
  Buffer origin = make_buffer(mine, origin_memory(id, rank));
  MPI_Request requests[2];
  check_mpi(MPI_Win_lock_all(0, window.win()), what);
  check_mpi(MPI_Rput(origin.data(), int(count), MPI_FLOAT, right, 0, int(count), MPI_FLOAT, window.win(),
                     &requests[0]),
            what);
  check_mpi(MPI_Raccumulate(origin.data(), int(count), MPI_FLOAT, right, window.disp(count), int(count), MPI_FLOAT,
                            MPI_REPLACE, window.win(), &requests[1]),
            what);
  check_mpi(MPI_Waitall(2, requests, MPI_STATUSES_IGNORE), what);
  check_mpi(MPI_Win_unlock_all(window.win()), what);
  MPI_Barrier(MPI_COMM_WORLD);

  Buffer fetched(count * sizeof(float), Memory::device);
  Buffer fetched_before(count * sizeof(float), Memory::host);
  check_mpi(MPI_Win_lock_all(0, window.win()), what);
  check_mpi(MPI_Rget(fetched.data(), int(count), MPI_FLOAT, left, 0, int(count), MPI_FLOAT, window.win(),
                     &requests[0]),
            what);
  check_mpi(MPI_Wait(&requests[0], MPI_STATUS_IGNORE), what);
  check_mpi(MPI_Rget_accumulate(origin.data(), int(count), MPI_FLOAT, fetched_before.data(), int(count), MPI_FLOAT,
                                right, window.disp(2 * count), int(count), MPI_FLOAT, MPI_SUM, window.win(),
                                &requests[1]),
            what);
  check_mpi(MPI_Wait(&requests[1], MPI_STATUS_IGNORE), what);
  check_mpi(MPI_Win_unlock_all(window.win()), what);
  MPI_Barrier(MPI_COMM_WORLD);

  // This rank's own window: left's data twice, then poison + left's data.
  const std::vector<float> from_left = random_values<float>(count, id, left, Values::small);
  std::vector<float> expected = from_left;
  expected.insert(expected.end(), from_left.begin(), from_left.end());
  for (float v : from_left) expected.push_back(poison<float>() + v);
  expect_values(what, expected, window.read());
  // Left's window holds what left's left neighbour put there.
  expect_buffer(what, fetched, random_values<float>(count, id, (rank + 2 * ranks - 2) % ranks, Values::small));
  expect_buffer(what, fetched_before, poisoned<float>(count));
  MPI_Barrier(MPI_COMM_WORLD);
}

}  // namespace

int main(int argc, char** argv) {
  init(&argc, &argv);
  for (Flavor flavor : kFlavors)
    if (flavor != Flavor::allocate_shared || shared_windows()) window_outlives_communicator(flavor);
  for (Flavor flavor : kFlavors) {
    if (flavor == Flavor::allocate_shared && !shared_windows()) continue;
    fence_put_get<int>(flavor, "MPI_INT", MPI_COMM_WORLD, "MPI_COMM_WORLD");
    fence_put_get<double>(flavor, "MPI_DOUBLE", MPI_COMM_WORLD, "MPI_COMM_WORLD");
    pscw(flavor, false);
    pscw(flavor, true);
    exclusive_lock_counter(flavor);
    accumulate_contention<int64_t>(flavor, MPI_SUM, "MPI_SUM", "MPI_INT64_T", Values::wide);
    accumulate_contention<double>(flavor, MPI_MAX, "MPI_MAX", "MPI_DOUBLE", Values::wide);
    accumulate_contention<uint32_t>(flavor, MPI_BXOR, "MPI_BXOR", "MPI_UINT32_T", Values::bits);
    fetch_and_op_tickets(flavor);
    fetch_replace_and_swap(flavor);
    request_based(flavor);
    attributes(flavor);
  }
  // A window over half the ranks (world_size 3: ranks 0 and 2, and rank 1 alone).
  MPI_Comm half;
  MPI_Comm_split(MPI_COMM_WORLD, world_rank() % 2, world_rank(), &half);
  fence_put_get<int64_t>(Flavor::allocate, "MPI_INT64_T", half, "even/odd split");
  fence_put_get<float>(Flavor::create, "MPI_FLOAT", half, "even/odd split");
  MPI_Comm_free(&half);
  if (shared_windows()) shared_query();
  bad_calls();
  host_window_beside_device_window();
  host_window_device_buffers();
  return finish();
}

// One-sided communication, the second half of the program (rma.cc): the
// predefined window attributes, MPI_Win_shared_query, the error classes of
// bad calls, host windows beside device windows, host windows reached with
// device origin and result buffers (staged), and a window that outlives the
// communicator it was made from.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "rma.h"
#include "rma_common.h"
#include "suite.h"

namespace suite {

void attributes(Flavor flavor) {
  Case what{std::string(flavor_name(flavor)) + " MPI_Win_get_attr", "MPI_DOUBLE"};
  const size_t count = 17;
  DeviceWindow<double> window(flavor, count, poisoned<double>(count), MPI_COMM_WORLD, what);
  void* base = nullptr;
  MPI_Aint* size = nullptr;
  int* disp_unit = nullptr;
  int* created_as = nullptr;
  int found[4] = {0, 0, 0, 0};
  check_mpi(MPI_Win_get_attr(window.win(), MPI_WIN_BASE, &base, &found[0]), what);
  check_mpi(MPI_Win_get_attr(window.win(), MPI_WIN_SIZE, &size, &found[1]), what);
  check_mpi(MPI_Win_get_attr(window.win(), MPI_WIN_DISP_UNIT, &disp_unit, &found[2]), what);
  check_mpi(MPI_Win_get_attr(window.win(), MPI_WIN_CREATE_FLAVOR, &created_as, &found[3]), what);
  expect(found[0] && found[1] && found[2] && found[3], what, "a predefined attribute is missing");
  if (!(found[0] && found[1] && found[2] && found[3])) return;
  expect(base == window.base(), what, "MPI_WIN_BASE is not the window's memory");
  expect(*size == MPI_Aint(count * sizeof(double)), what, "MPI_WIN_SIZE is " + std::to_string(*size));
  expect(*disp_unit == window.disp_unit(), what, "MPI_WIN_DISP_UNIT is " + std::to_string(*disp_unit));
  const int flavor_expected = flavor == Flavor::allocate          ? MPI_WIN_FLAVOR_ALLOCATE
                              : flavor == Flavor::allocate_shared ? MPI_WIN_FLAVOR_SHARED
                                                                  : MPI_WIN_FLAVOR_CREATE;
  expect(*created_as == flavor_expected, what, "MPI_WIN_CREATE_FLAVOR is " + std::to_string(*created_as));
}

// MPI_Win_shared_query on a shared window: a rank writes straight into its
// neighbour's memory through the address the query returns.
void shared_query() {
  const int rank = world_rank(), ranks = world_size();
  const uint64_t id = next_case_id();
  Case what{"MPI_Win_allocate_shared + MPI_Win_shared_query", "MPI_INT"};
  const size_t count = 129;
  DeviceWindow<int> window(Flavor::allocate_shared, count, poisoned<int>(count), MPI_COMM_WORLD, what);
  const int right = (rank + 1) % ranks;
  MPI_Aint size = 0;
  int disp_unit = 0;
  void* peer = nullptr;
  check_mpi(MPI_Win_shared_query(window.win(), right, &size, &disp_unit, &peer), what);
  expect(size == MPI_Aint(count * sizeof(int)) && disp_unit == int(sizeof(int)) && peer, what,
         "MPI_Win_shared_query returned size " + std::to_string(size) + ", unit " + std::to_string(disp_unit));
  check_mpi(MPI_Win_lock_all(0, window.win()), what);
  const std::vector<int> mine = random_values<int>(count, id, rank);
  if (peer) suite_memcpy(peer, mine.data(), count * sizeof(int));
  check_mpi(MPI_Win_sync(window.win()), what);
  check_mpi(MPI_Win_unlock_all(window.win()), what);
  MPI_Barrier(MPI_COMM_WORLD);
  expect_values(what, random_values<int>(count, id, (rank + ranks - 1) % ranks), window.read());
  MPI_Barrier(MPI_COMM_WORLD);
}

// Bad calls fail with the error class the real MPI gives for host windows,
// through the window's error handler, and the window stays usable.
void bad_calls() {
  const int ranks = world_size();
  Case what{"bad RMA calls on a device window", "MPI_INT"};
  const size_t count = 8;
  DeviceWindow<int> window(Flavor::allocate, count, poisoned<int>(count), MPI_COMM_WORLD, what);
  Buffer origin = make_buffer(std::vector<int>(count, 3), Memory::device);
  auto expect_class = [&](int rc, int wanted, const char* problem) {
    int got = MPI_SUCCESS;
    if (rc != MPI_SUCCESS) MPI_Error_class(rc, &got);
    Case c = what;
    c.detail = problem;
    expect(got == wanted, c, "error class " + std::to_string(got) + ", expected " + std::to_string(wanted));
  };
  expect_class(MPI_Win_unlock(0, window.win()), MPI_ERR_RMA_SYNC, "unlock without a lock");
  check_mpi(MPI_Win_lock_all(0, window.win()), what);
  expect_class(MPI_Put(origin.data(), int(count), MPI_INT, ranks, 0, int(count), MPI_INT, window.win()),
               MPI_ERR_RANK, "target rank out of range");
  expect_class(MPI_Put(origin.data(), -1, MPI_INT, 0, 0, -1, MPI_INT, window.win()), MPI_ERR_COUNT, "count -1");
  expect_class(MPI_Put(origin.data(), int(count), MPI_INT, 0, -1, int(count), MPI_INT, window.win()), MPI_ERR_DISP,
               "displacement -1");
  expect_class(MPI_Put(origin.data(), int(count), MPI_DATATYPE_NULL, 0, 0, int(count), MPI_DATATYPE_NULL,
                       window.win()),
               MPI_ERR_TYPE, "MPI_DATATYPE_NULL");
  expect_class(MPI_Win_lock_all(0, window.win()), MPI_ERR_RMA_SYNC, "lock_all twice");
  // The window still works after the errors.
  check_mpi(MPI_Put(origin.data(), int(count), MPI_INT, 0, 0, int(count), MPI_INT, window.win()), what);
  check_mpi(MPI_Win_unlock_all(window.win()), what);
  MPI_Barrier(MPI_COMM_WORLD);
  if (world_rank() == 0) expect_values(what, std::vector<int>(count, 3), window.read());
  MPI_Barrier(MPI_COMM_WORLD);
}

// A host window next to a device window: the host window is the real MPI's.
void host_window_beside_device_window() {
  const int rank = world_rank(), ranks = world_size();
  const uint64_t id = next_case_id();
  Case what{"MPI_Win_create on host memory beside a device window", "MPI_INT"};
  const size_t count = 65;
  DeviceWindow<int> device(Flavor::allocate, count, poisoned<int>(count), MPI_COMM_WORLD, what);
  std::vector<int> host(count, poison<int>());
  MPI_Win win;
  check_mpi(MPI_Win_create(host.data(), MPI_Aint(count * sizeof(int)), sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD,
                           &win),
            what);
  const std::vector<int> mine = random_values<int>(count, id, rank);
  check_mpi(MPI_Win_fence(0, win), what);
  check_mpi(MPI_Win_fence(0, device.win()), what);
  check_mpi(MPI_Put(mine.data(), int(count), MPI_INT, (rank + 1) % ranks, 0, int(count), MPI_INT, win), what);
  check_mpi(MPI_Put(mine.data(), int(count), MPI_INT, (rank + 1) % ranks, 0, int(count), MPI_INT, device.win()),
            what);
  check_mpi(MPI_Win_fence(0, win), what);
  check_mpi(MPI_Win_fence(0, device.win()), what);
  const std::vector<int> expected = random_values<int>(count, id, (rank + ranks - 1) % ranks);
  expect_values(what, expected, host);
  expect_values(what, expected, device.read());
  MPI_Win_free(&win);
}


// A host window (the real MPI's) reached with device origin and result
// buffers, which Ferry stages through host memory: results must be in the
// device buffers once the synchronization (fence, flush, flush_all, unlock)
// or the request's completion says so, and not a moment later.
void host_window_device_buffers() {
  const int rank = world_rank(), ranks = world_size();
  const uint64_t id = next_case_id();
  Case what{"MPI_Win_create on host memory, device origin and result buffers", "MPI_INT64_T"};
  const size_t count = 101;
  const int right = (rank + 1) % ranks, left = (rank + ranks - 1) % ranks;
  auto initial = [&](int r) { return random_values<int64_t>(count, id, r, Values::small); };
  std::vector<int64_t> host = initial(rank);
  MPI_Win win;
  check_mpi(MPI_Win_create(host.data(), MPI_Aint(count * sizeof(int64_t)), sizeof(int64_t), MPI_INFO_NULL,
                           MPI_COMM_WORLD, &win),
            what);
  MPI_Win_set_errhandler(win, MPI_ERRORS_RETURN);

  // Fence epoch: a put of 31 elements at 5, an accumulate of 29 at 40, and a
  // get of 23 of the left neighbour's elements from 75 (odd counts, offsets).
  Case fence_case = what;
  fence_case.detail = "fence";
  const std::vector<int64_t> sent = random_values<int64_t>(31, id + 1, rank, Values::small);
  const std::vector<int64_t> added = random_values<int64_t>(29, id + 2, rank, Values::small);
  Buffer put_origin = make_buffer(sent, Memory::device, 8);
  Buffer acc_origin = make_buffer(added, Memory::device, 8);
  Buffer fetched = make_buffer(poisoned<int64_t>(23), Memory::device, 8);
  check_mpi(MPI_Win_fence(0, win), fence_case);
  check_mpi(MPI_Put(put_origin.data(), 31, MPI_INT64_T, right, 5, 31, MPI_INT64_T, win), fence_case);
  check_mpi(MPI_Accumulate(acc_origin.data(), 29, MPI_INT64_T, right, 40, 29, MPI_INT64_T, MPI_SUM, win),
            fence_case);
  check_mpi(MPI_Get(fetched.data(), 23, MPI_INT64_T, left, 75, 23, MPI_INT64_T, win), fence_case);
  check_mpi(MPI_Win_fence(0, win), fence_case);
  std::vector<int64_t> expected = initial(rank);
  {
    const std::vector<int64_t> s = random_values<int64_t>(31, id + 1, left, Values::small);
    const std::vector<int64_t> a = random_values<int64_t>(29, id + 2, left, Values::small);
    std::copy(s.begin(), s.end(), expected.begin() + 5);
    for (size_t i = 0; i < a.size(); ++i) expected[40 + i] += a[i];
  }
  const std::vector<int64_t> left_initial = initial(left);
  expect_buffer(fence_case, fetched, std::vector<int64_t>(left_initial.begin() + 75, left_initial.begin() + 98));
  check_mpi(MPI_Win_fence(MPI_MODE_NOSUCCEED, win), fence_case);
  expect_values(fence_case, expected, host);
  MPI_Barrier(MPI_COMM_WORLD);

  // Lock epoch on the right neighbour: fetch-and-op, compare-and-swap and a
  // get, checked after MPI_Win_flush and before the unlock; an MPI_Rget
  // checked after its MPI_Wait; an MPI_Rput completed by the unlock.
  Case lock_case = what;
  lock_case.detail = "lock/flush";
  const std::vector<int64_t> right_before = [&] {
    std::vector<int64_t> w = initial(right);
    const std::vector<int64_t> s = random_values<int64_t>(31, id + 1, rank, Values::small);
    const std::vector<int64_t> a = random_values<int64_t>(29, id + 2, rank, Values::small);
    std::copy(s.begin(), s.end(), w.begin() + 5);
    for (size_t i = 0; i < a.size(); ++i) w[40 + i] += a[i];
    return w;
  }();
  Buffer one = make_buffer(std::vector<int64_t>{1000 + rank}, Memory::device);
  Buffer old_value = make_buffer(poisoned<int64_t>(1), Memory::device);
  Buffer compare = make_buffer(std::vector<int64_t>{right_before[3]}, Memory::device);
  Buffer swapped_in = make_buffer(std::vector<int64_t>{-7}, Memory::device);
  Buffer swapped_out = make_buffer(poisoned<int64_t>(1), Memory::device);
  Buffer got = make_buffer(poisoned<int64_t>(9), Memory::device, 8);
  Buffer requested = make_buffer(poisoned<int64_t>(11), Memory::device, 8);
  const std::vector<int64_t> rput_data = random_values<int64_t>(4, id + 3, rank, Values::small);
  Buffer rput_origin = make_buffer(rput_data, Memory::device, 8);
  check_mpi(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, right, 0, win), lock_case);
  check_mpi(MPI_Fetch_and_op(one.data(), old_value.data(), MPI_INT64_T, right, 1, MPI_SUM, win), lock_case);
  check_mpi(MPI_Compare_and_swap(swapped_in.data(), compare.data(), swapped_out.data(), MPI_INT64_T, right, 3, win),
            lock_case);
  check_mpi(MPI_Get(got.data(), 9, MPI_INT64_T, right, 60, 9, MPI_INT64_T, win), lock_case);
  check_mpi(MPI_Win_flush(right, win), lock_case);
  expect_buffer(lock_case, old_value, std::vector<int64_t>{right_before[1]});
  expect_buffer(lock_case, swapped_out, std::vector<int64_t>{right_before[3]});
  expect_buffer(lock_case, got, std::vector<int64_t>(right_before.begin() + 60, right_before.begin() + 69));
  MPI_Request request;
  check_mpi(MPI_Rget(requested.data(), 11, MPI_INT64_T, right, 20, 11, MPI_INT64_T, win, &request), lock_case);
  check_mpi(MPI_Wait(&request, MPI_STATUS_IGNORE), lock_case);
  Case rget_case = lock_case;
  rget_case.detail = "MPI_Rget + MPI_Wait";
  expect_buffer(rget_case, requested, std::vector<int64_t>(right_before.begin() + 20, right_before.begin() + 31));
  check_mpi(MPI_Rput(rput_origin.data(), 4, MPI_INT64_T, right, 70, 4, MPI_INT64_T, win, &request), lock_case);
  check_mpi(MPI_Win_unlock(right, win), lock_case);
  check_mpi(MPI_Wait(&request, MPI_STATUS_IGNORE), lock_case);
  MPI_Barrier(MPI_COMM_WORLD);
  expected[1] += 1000 + left;
  expected[3] = -7;
  const std::vector<int64_t> from_left = random_values<int64_t>(4, id + 3, left, Values::small);
  std::copy(from_left.begin(), from_left.end(), expected.begin() + 70);
  expect_values(lock_case, expected, host);
  MPI_Barrier(MPI_COMM_WORLD);

  // lock_all: a get from every rank, completed by MPI_Win_flush_all.
  Case all_case = what;
  all_case.detail = "lock_all/flush_all";
  std::vector<Buffer> everyone;
  for (int r = 0; r < ranks; ++r) everyone.push_back(make_buffer(poisoned<int64_t>(3), Memory::device));
  check_mpi(MPI_Win_lock_all(0, win), all_case);
  for (int r = 0; r < ranks; ++r)
    check_mpi(MPI_Get(everyone[r].data(), 3, MPI_INT64_T, r, 69, 3, MPI_INT64_T, win), all_case);
  check_mpi(MPI_Win_flush_all(win), all_case);
  for (int r = 0; r < ranks; ++r) {
    std::vector<int64_t> theirs = initial(r);
    const std::vector<int64_t> p = random_values<int64_t>(4, id + 3, (r + ranks - 1) % ranks, Values::small);
    std::copy(p.begin(), p.end(), theirs.begin() + 70);
    expect_buffer(all_case, everyone[r], std::vector<int64_t>(theirs.begin() + 69, theirs.begin() + 72));
  }
  check_mpi(MPI_Win_unlock_all(win), all_case);
  MPI_Barrier(MPI_COMM_WORLD);
  MPI_Win_free(&win);
}

// MPI lets the application free the communicator a window was made from
// before the window: the window must go on working, and free cleanly.
void window_outlives_communicator(Flavor flavor) {
  const int rank = world_rank(), ranks = world_size();
  const uint64_t id = next_case_id();
  Case what{std::string(flavor_name(flavor)) + " after MPI_Comm_free of its communicator", "MPI_INT"};
  const size_t count = 77;
  MPI_Comm dup;
  MPI_Comm_dup(MPI_COMM_WORLD, &dup);
  DeviceWindow<int> window(flavor, count, poisoned<int>(count), dup, what);
  MPI_Comm_free(&dup);
  const std::vector<int> mine = random_values<int>(count, id, rank);
  Buffer origin = make_buffer(mine, Memory::device);
  check_mpi(MPI_Win_fence(0, window.win()), what);
  check_mpi(MPI_Put(origin.data(), int(count), MPI_INT, (rank + 1) % ranks, 0, int(count), MPI_INT, window.win()),
            what);
  check_mpi(MPI_Win_fence(0, window.win()), what);
  expect_values(what, random_values<int>(count, id, (rank + ranks - 1) % ranks), window.read());
}

}  // namespace suite

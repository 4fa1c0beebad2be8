// Dynamic windows over device memory: MPI_Win_create_dynamic with the MPI
// 4.1 memory-kinds info key, MPI_Win_attach of device regions (two at once,
// at unaligned addresses), targets addressed by MPI_Get_address, puts, gets
// and accumulates in fence and lock epochs, a strided target type, detach
// and attach of a new region (which origins must notice), an access outside
// every attached region (MPI_ERR_RMA_RANGE); host memory attaches beside
// device regions.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "rma_common.h"
#include "suite.h"

namespace {

using namespace suite;

// A region of device memory, three bytes past its allocation, attached to
// win while it lives; every rank learns every rank's address.
class Region {
 public:
  Region(MPI_Win win, size_t count, const std::vector<double>& initial, const Case& what)
      : win_(win), count_(count), owned_(static_cast<char*>(suite_device_malloc(count * sizeof(double) + 3))),
        base_(owned_ + 3), addresses_(world_size()) {
    suite_memcpy(base_, initial.data(), count * sizeof(double));
    check_mpi(MPI_Win_attach(win_, base_, MPI_Aint(count * sizeof(double))), what);
    MPI_Aint mine;
    MPI_Get_address(base_, &mine);
    MPI_Allgather(&mine, 1, MPI_AINT, addresses_.data(), 1, MPI_AINT, MPI_COMM_WORLD);
  }
  ~Region() {
    MPI_Win_detach(win_, base_);
    suite_device_free(owned_);
  }
  // The address of element i at rank r, as a target displacement.
  MPI_Aint at(int r, size_t i) const { return MPI_Aint_add(addresses_[r], MPI_Aint(i * sizeof(double))); }
  std::vector<double> read() const {
    std::vector<double> values(count_);
    suite_memcpy(values.data(), base_, count_ * sizeof(double));
    return values;
  }

 private:
  MPI_Win win_;
  size_t count_;
  char* owned_;
  char* base_;
  std::vector<MPI_Aint> addresses_;
};

MPI_Win dynamic_window(const Case& what) {
  MPI_Info info;
  MPI_Info_create(&info);
  MPI_Info_set(info, "mpi_memory_alloc_kinds", "cuda:device");
  MPI_Win win;
  check_mpi(MPI_Win_create_dynamic(info, MPI_COMM_WORLD, &win), what);
  MPI_Info_free(&info);
  MPI_Win_set_errhandler(win, MPI_ERRORS_RETURN);
  return win;
}

void expect_class(int rc, int wanted, const Case& what, const char* problem) {
  int got = MPI_SUCCESS;
  if (rc != MPI_SUCCESS) MPI_Error_class(rc, &got);
  Case c = what;
  c.detail = problem;
  expect(got == wanted, c, "error class " + std::to_string(got) + ", expected " + std::to_string(wanted));
}

void dynamic_window_cases() {
  const int rank = world_rank(), ranks = world_size();
  const int right = (rank + 1) % ranks, left = (rank + ranks - 1) % ranks;
  Case what{"MPI_Win_create_dynamic + MPI_Win_attach", "MPI_DOUBLE"};
  MPI_Win win = dynamic_window(what);
  int* flavor = nullptr;
  int found = 0;
  check_mpi(MPI_Win_get_attr(win, MPI_WIN_CREATE_FLAVOR, &flavor, &found), what);
  expect(found && *flavor == MPI_WIN_FLAVOR_DYNAMIC, what, "MPI_WIN_CREATE_FLAVOR is not MPI_WIN_FLAVOR_DYNAMIC");

  MPI_Aint stale = 0;  // an address in the right neighbour's last region
  for (int generation = 0; generation < 3; ++generation) {
    const uint64_t id = next_case_id();
    Case round = what;
    round.detail = "attach round " + std::to_string(generation);
    // Sizes change with each round, so a stale mapping of the last round's
    // region shows up as wrong data or a range error.
    const size_t na = 101 + 10 * generation, nb = 37;
    auto initial_a = [&](int r) { return random_values<double>(na, id, r, Values::small); };
    auto initial_b = [&](int r) { return random_values<double>(nb, id + 1, r, Values::small); };
    Region a(win, na, initial_a(rank), round);
    Region b(win, nb, initial_b(rank), round);
    stale = a.at(right, 1);
    MPI_Barrier(MPI_COMM_WORLD);

    // Fence: put 13 values at a[7] of the right neighbour, get 17 of the
    // left neighbour's b from b[19].
    const std::vector<double> sent = random_values<double>(13, id + 2, rank, Values::small);
    Buffer origin = make_buffer(sent, (rank + generation) % 2 ? Memory::host : Memory::device, 1);
    Buffer fetched = make_buffer(poisoned<double>(17), Memory::device, 1);
    check_mpi(MPI_Win_fence(0, win), round);
    check_mpi(MPI_Put(origin.data(), 13, MPI_DOUBLE, right, a.at(right, 7), 13, MPI_DOUBLE, win), round);
    check_mpi(MPI_Get(fetched.data(), 17, MPI_DOUBLE, left, b.at(left, 19), 17, MPI_DOUBLE, win), round);
    check_mpi(MPI_Win_fence(MPI_MODE_NOSUCCEED, win), round);
    std::vector<double> expected_a = initial_a(rank);
    const std::vector<double> from_left = random_values<double>(13, id + 2, left, Values::small);
    std::copy(from_left.begin(), from_left.end(), expected_a.begin() + 7);
    const std::vector<double> left_b = initial_b(left);
    expect_buffer(round, fetched, std::vector<double>(left_b.begin() + 19, left_b.begin() + 36));
    MPI_Barrier(MPI_COMM_WORLD);
    expect_values(round, expected_a, a.read());
    MPI_Barrier(MPI_COMM_WORLD);

    // Lock_all: every rank adds into every rank's b through a strided
    // target type (5 blocks of 2, stride 7), and into a's last element.
    Case acc = round;
    acc.call = "MPI_Accumulate on a dynamic window";
    acc.op = "MPI_SUM";
    MPI_Datatype strided;
    MPI_Type_vector(5, 2, 7, MPI_DOUBLE, &strided);
    MPI_Type_commit(&strided);
    auto added = [&](int r) { return random_values<double>(11, id + 3, r, Values::small); };
    Buffer contribution = make_buffer(added(rank), Memory::device);
    check_mpi(MPI_Win_lock_all(0, win), acc);
    for (int t = 0; t < ranks; ++t) {
      const int target = (rank + t) % ranks;
      check_mpi(MPI_Accumulate(contribution.data(), 10, MPI_DOUBLE, target, b.at(target, 3), 1, strided, MPI_SUM, win),
                acc);
      check_mpi(MPI_Accumulate(static_cast<double*>(contribution.data()) + 10, 1, MPI_DOUBLE, target,
                               a.at(target, na - 1), 1, MPI_DOUBLE, MPI_SUM, win),
                acc);
    }
    check_mpi(MPI_Win_unlock_all(win), acc);
    MPI_Type_free(&strided);
    MPI_Barrier(MPI_COMM_WORLD);
    std::vector<double> expected_b = initial_b(rank);
    for (int r = 0; r < ranks; ++r) {
      const std::vector<double> c = added(r);
      for (int k = 0; k < 10; ++k) expected_b[3 + size_t(k / 2) * 7 + size_t(k % 2)] += c[size_t(k)];
      expected_a[na - 1] += c[10];
    }
    expect_values(acc, expected_b, b.read());
    expect_values(acc, expected_a, a.read());
    MPI_Barrier(MPI_COMM_WORLD);

    // Ferry's errors: outside every region, and host memory.
    if (!host_baseline()) {
      check_mpi(MPI_Win_lock(MPI_LOCK_SHARED, right, 0, win), round);
      expect_class(MPI_Get(fetched.data(), 2, MPI_DOUBLE, right, a.at(right, na - 1), 2, MPI_DOUBLE, win),
                   MPI_ERR_RMA_RANGE, round, "get across the end of a region");
      expect_class(MPI_Put(origin.data(), 1, MPI_DOUBLE, right, b.at(right, nb), 1, MPI_DOUBLE, win),
                   MPI_ERR_RMA_RANGE, round, "put just past a region");
      check_mpi(MPI_Win_unlock(right, win), round);
      // Host memory beside device regions is the real MPI's to reach
      // (the conformance program moves data through it).
      std::vector<double> host(4);
      expect_class(MPI_Win_attach(win, host.data(), MPI_Aint(sizeof(double) * host.size())), MPI_SUCCESS, round,
                   "host memory attached beside device regions");
      expect_class(MPI_Win_detach(win, host.data()), MPI_SUCCESS, round, "host memory detached");
    }
    // Both regions are detached (and freed) at the end of the round; nobody
    // reaches them afterwards.
    MPI_Barrier(MPI_COMM_WORLD);
  }

  // After the detach, the last round's addresses are outside every region
  // (origins must notice the change), and a detach of memory never
  // attached fails.
  MPI_Barrier(MPI_COMM_WORLD);
  if (!host_baseline()) {
    Buffer scratch(2 * sizeof(double), Memory::device);
    check_mpi(MPI_Win_lock(MPI_LOCK_SHARED, right, 0, win), what);
    expect_class(MPI_Get(scratch.data(), 1, MPI_DOUBLE, right, stale, 1, MPI_DOUBLE, win), MPI_ERR_RMA_RANGE, what,
                 "get from a detached region");
    check_mpi(MPI_Win_unlock(right, win), what);
    expect_class(MPI_Win_detach(win, scratch.data()), MPI_ERR_ARG, what, "detach of memory never attached");
  }
  MPI_Barrier(MPI_COMM_WORLD);
  MPI_Win_free(&win);
}

}  // namespace

int main(int argc, char** argv) {
  init(&argc, &argv);
  dynamic_window_cases();
  return finish();
}

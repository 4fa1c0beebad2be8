// One-sided windows on device memory whose ranks cannot map each other's
// memory: virtual nodes (virtual_node.sh), where Ferry runs the window on
// the real MPI's window over host copies, under the separate memory model
// (mpi_shim/rma_across.h), or with FERRY_RMA_ACROSS=queue every call through
// the GDA queue, under the unified model. Checked against host references: fence with put,
// get and accumulate; a local store before a fence seen by the others'
// gets; a put past the target's memory refused (MPI_ERR_RMA_RANGE);
// general active target; passive target, the target seeing the update after
// locking itself; MPI_Win_allocate with device memory asked
// for; a window of device and host memory; the attributes.
#include <cstdlib>
#include <cstring>
#include <string>

#include "suite.h"

namespace {

using namespace suite;

constexpr int kCount = 1001;
int g_rank = 0, g_size = 0;

void check_attributes(MPI_Win win, void* base, int flavor, const Case& what) {
  void* reported = nullptr;
  int* model = nullptr;
  int* reported_flavor = nullptr;
  int found = 0;
  check_mpi(MPI_Win_get_attr(win, MPI_WIN_BASE, &reported, &found), what);
  expect(found && reported == base, what, "MPI_WIN_BASE is not the window's memory");
  check_mpi(MPI_Win_get_attr(win, MPI_WIN_MODEL, &model, &found), what);
  // The GDA queue carries every call straight into the memory itself.
  const char* carrier = std::getenv("FERRY_RMA_ACROSS");
  const bool queue = carrier && std::strcmp(carrier, "queue") == 0;
  expect(found && *model == (queue ? MPI_WIN_UNIFIED : MPI_WIN_SEPARATE), what,
         queue ? "MPI_WIN_MODEL is not MPI_WIN_UNIFIED" : "MPI_WIN_MODEL is not MPI_WIN_SEPARATE");
  check_mpi(MPI_Win_get_attr(win, MPI_WIN_CREATE_FLAVOR, &reported_flavor, &found), what);
  expect(found && *reported_flavor == flavor, what, "MPI_WIN_CREATE_FLAVOR");
}

// Fence epochs on memory (device, or host on odd ranks when mixed).
void fence_epochs(bool mixed) {
  const uint64_t id = next_case_id();
  const Memory memory = mixed && g_rank % 2 ? Memory::host : Memory::device;
  const Case what{"MPI_Win_create, fence: put, local store, get, accumulate", "MPI_INT32_T", "", kCount,
                  mixed ? "device and host ranks" : "device"};
  Buffer exposed = make_buffer(poisoned<int32_t>(3 * kCount), memory);
  MPI_Win win;
  check_mpi(MPI_Win_create(exposed.data(), 3 * kCount * sizeof(int32_t), sizeof(int32_t), MPI_INFO_NULL,
                           MPI_COMM_WORLD, &win),
            what);
  if (!mixed) check_attributes(win, exposed.data(), MPI_WIN_FLAVOR_CREATE, what);
  const int next = (g_rank + 1) % g_size, prev = (g_rank + g_size - 1) % g_size;
  // A put into the first third of the next rank's memory.
  Buffer mine = make_buffer(random_values<int32_t>(kCount, id, g_rank), Memory::device);
  check_mpi(MPI_Win_fence(0, win), what);
  check_mpi(MPI_Put(mine.data(), kCount, MPI_INT32_T, next, 0, kCount, MPI_INT32_T, win), what);
  check_mpi(MPI_Win_fence(0, win), what);
  std::vector<int32_t> image = poisoned<int32_t>(3 * kCount);
  const std::vector<int32_t> from_prev = random_values<int32_t>(kCount, id, prev);
  std::copy(from_prev.begin(), from_prev.end(), image.begin());
  expect_buffer(what, exposed, image);
  // A local store into the second third, then the previous rank's get of it.
  const std::vector<int32_t> stored = random_values<int32_t>(kCount, id + 1, g_rank);
  std::copy(stored.begin(), stored.end(), image.begin() + kCount);
  exposed.write(image.data(), image.size() * sizeof(int32_t));
  Buffer got = make_buffer(poisoned<int32_t>(kCount), Memory::device);
  check_mpi(MPI_Win_fence(0, win), what);
  check_mpi(MPI_Get(got.data(), kCount, MPI_INT32_T, next, kCount, kCount, MPI_INT32_T, win), what);
  check_mpi(MPI_Win_fence(0, win), what);
  expect_buffer(what, got, random_values<int32_t>(kCount, id + 1, next));
  // Every rank adds into rank 0's last third.
  check_mpi(MPI_Accumulate(mine.data(), kCount, MPI_INT32_T, 0, 2 * kCount, kCount, MPI_INT32_T, MPI_SUM, win),
            what);
  check_mpi(MPI_Win_fence(0, win), what);
  if (g_rank == 0) {
    for (int i = 0; i < kCount; ++i) image[2 * kCount + i] = poisoned<int32_t>(1)[0];
    for (int r = 0; r < g_size; ++r) {
      const std::vector<int32_t> theirs = random_values<int32_t>(kCount, id, r);
      for (int i = 0; i < kCount; ++i) image[2 * kCount + i] += theirs[i];
    }
  }
  expect_buffer(what, exposed, image);
  // A put that reaches past the next rank's memory is refused, and nothing
  // of it lands.
  MPI_Win_set_errhandler(win, MPI_ERRORS_RETURN);
  check_mpi(MPI_Win_fence(0, win), what);
  const int rc = MPI_Put(mine.data(), kCount, MPI_INT32_T, next, 2 * kCount + 1, kCount, MPI_INT32_T, win);
  int error_class = MPI_SUCCESS;
  MPI_Error_class(rc, &error_class);
  expect(error_class == MPI_ERR_RMA_RANGE, what,
         "a put past the target's memory returned class " + std::to_string(error_class));
  check_mpi(MPI_Win_fence(0, win), what);
  expect_buffer(what, exposed, image);
  check_mpi(MPI_Win_free(&win), what);
}

// Post/start/complete/wait: every rank exposes to the previous and
// accesses the next.
void general_active_target() {
  const uint64_t id = next_case_id();
  const Case what{"MPI_Win_post/start/complete/wait, put", "MPI_DOUBLE", "", kCount, "device"};
  Buffer exposed = make_buffer(poisoned<double>(kCount), Memory::device);
  MPI_Win win;
  check_mpi(MPI_Win_create(exposed.data(), kCount * sizeof(double), sizeof(double), MPI_INFO_NULL, MPI_COMM_WORLD,
                           &win),
            what);
  const int next = (g_rank + 1) % g_size, prev = (g_rank + g_size - 1) % g_size;
  MPI_Group world, to, from;
  MPI_Comm_group(MPI_COMM_WORLD, &world);
  MPI_Group_incl(world, 1, &next, &to);
  MPI_Group_incl(world, 1, &prev, &from);
  Buffer mine = make_buffer(random_values<double>(kCount, id, g_rank), Memory::device);
  check_mpi(MPI_Win_post(from, 0, win), what);
  check_mpi(MPI_Win_start(to, 0, win), what);
  check_mpi(MPI_Put(mine.data(), kCount, MPI_DOUBLE, next, 0, kCount, MPI_DOUBLE, win), what);
  check_mpi(MPI_Win_complete(win), what);
  check_mpi(MPI_Win_wait(win), what);
  expect_buffer(what, exposed, random_values<double>(kCount, id, prev));
  MPI_Group_free(&world);
  MPI_Group_free(&to);
  MPI_Group_free(&from);
  check_mpi(MPI_Win_free(&win), what);
}

// Passive target into an allocated window: rank 0 puts into every other
// rank under an exclusive lock; each target then locks itself to see it.
void passive_target_allocated() {
  const uint64_t id = next_case_id();
  const Case what{"MPI_Win_allocate (cuda:device), lock/put/unlock", "MPI_INT64_T", "", kCount, "device"};
  MPI_Info info;
  MPI_Info_create(&info);
  MPI_Info_set(info, "mpi_memory_alloc_kinds", "cuda:device");
  void* base = nullptr;
  MPI_Win win;
  check_mpi(MPI_Win_allocate(kCount * sizeof(int64_t), sizeof(int64_t), info, MPI_COMM_WORLD, &base, &win), what);
  MPI_Info_free(&info);
  check_attributes(win, base, MPI_WIN_FLAVOR_ALLOCATE, what);
  expect(suite_is_device_memory(base), what, "the allocated window memory is not device memory");
  if (g_rank == 0) {
    for (int target = 1; target < g_size; ++target) {
      Buffer mine = make_buffer(random_values<int64_t>(kCount, id, target), Memory::device);
      check_mpi(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, target, 0, win), what);
      check_mpi(MPI_Put(mine.data(), kCount, MPI_INT64_T, target, 0, kCount, MPI_INT64_T, win), what);
      check_mpi(MPI_Win_unlock(target, win), what);
    }
  }
  check_mpi(MPI_Barrier(MPI_COMM_WORLD), what);
  if (g_rank != 0) {
    check_mpi(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, g_rank, 0, win), what);
    check_mpi(MPI_Win_unlock(g_rank, win), what);
    std::vector<int64_t> seen(kCount);
    suite_memcpy(seen.data(), base, kCount * sizeof(int64_t));
    expect_values(what, random_values<int64_t>(kCount, id, g_rank), seen);
  }
  check_mpi(MPI_Barrier(MPI_COMM_WORLD), what);
  check_mpi(MPI_Win_free(&win), what);
}

}  // namespace

int main(int argc, char** argv) {
  init(&argc, &argv);
  g_rank = world_rank();
  g_size = world_size();
  fence_epochs(false);
  fence_epochs(true);
  general_active_target();
  passive_target_allocated();
  return finish();
}

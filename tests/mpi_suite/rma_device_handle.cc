// ferry_win_device_handle, the host half of the device API: on a device
// window every rank gets a handle whose device-resident tables name each
// rank's window memory (the addresses MPI_Win_shared_query returns), window
// sizes and sync blocks; a second call returns the same handle without
// communicating; a host window has none (MPI_ERR_WIN through its handler).
// The kernels that use the handle run in tests/gpu on a real GPU.
#include <dlfcn.h>

#include <string>
#include <vector>

#include "ferry/device_handle.h"
#include "suite.h"

namespace {

using namespace suite;

using HandleFunction = int (*)(MPI_Win, ferry_window_device_t*);

void device_window_handle(HandleFunction get_handle, bool allocate) {
  const int rank = world_rank(), ranks = world_size();
  Case what{allocate ? "ferry_win_device_handle (MPI_Win_allocate)" : "ferry_win_device_handle (MPI_Win_create)",
            "MPI_BYTE"};
  // Sizes differ per rank; rank 1 offers none.
  const MPI_Aint bytes = rank == 1 ? 0 : 1000 + 24 * rank;
  MPI_Info info;
  MPI_Info_create(&info);
  MPI_Info_set(info, "mpi_memory_alloc_kinds", "cuda:device");
  void* base = nullptr;
  void* owned = nullptr;
  MPI_Win win;
  if (allocate) {
    check_mpi(MPI_Win_allocate(bytes, 1, info, MPI_COMM_WORLD, &base, &win), what);
  } else {
    owned = suite_device_malloc(bytes + 8);
    base = bytes ? owned : nullptr;
    check_mpi(MPI_Win_create(base, bytes, 1, info, MPI_COMM_WORLD, &win), what);
  }
  MPI_Info_free(&info);

  ferry_window_device_t handle{};
  check_mpi(get_handle(win, &handle), what);
  expect(handle.rank == rank && handle.size == ranks && handle.bytes == static_cast<unsigned long long>(bytes),
         what, "handle says rank " + std::to_string(handle.rank) + " of " + std::to_string(handle.size) + ", " +
                   std::to_string(handle.bytes) + " bytes");
  std::vector<void*> peers(ranks), sync(ranks);
  std::vector<unsigned long long> peer_bytes(ranks);
  suite_memcpy(peers.data(), handle.peers, ranks * sizeof(void*));
  suite_memcpy(peer_bytes.data(), handle.peer_bytes, ranks * sizeof(unsigned long long));
  suite_memcpy(sync.data(), handle.sync, ranks * sizeof(void*));
  for (int r = 0; r < ranks; ++r) {
    MPI_Aint size = -1;
    int unit = 0;
    void* address = nullptr;
    check_mpi(MPI_Win_shared_query(win, r, &size, &unit, &address), what);
    const std::string who = "rank " + std::to_string(r);
    expect(peers[r] == address, what, who + ": window memory differs from MPI_Win_shared_query's");
    expect(peer_bytes[r] == static_cast<unsigned long long>(size), what, who + ": window size differs");
    expect(sync[r] != nullptr, what, who + ": no sync block");
    // The sync blocks start zeroed: the device barrier counts from there.
    std::vector<unsigned long long> words(FERRY_DEVICE_SYNC_WORDS, 1);
    if (sync[r]) suite_memcpy(words.data(), sync[r], sizeof(unsigned long long) * words.size());
    for (unsigned long long word : words) expect(word == 0, what, who + ": sync block not zeroed");
  }
  ferry_window_device_t again{};
  check_mpi(get_handle(win, &again), what);
  expect(again.peers == handle.peers && again.sync == handle.sync, what, "a second call built new tables");
  MPI_Win_free(&win);
  if (owned) suite_device_free(owned);
}

void host_window_has_no_handle(HandleFunction get_handle) {
  Case what{"ferry_win_device_handle on a host window", "MPI_INT"};
  std::vector<int> memory(16);
  MPI_Win win;
  check_mpi(MPI_Win_create(memory.data(), MPI_Aint(memory.size() * sizeof(int)), sizeof(int), MPI_INFO_NULL,
                           MPI_COMM_WORLD, &win),
            what);
  MPI_Win_set_errhandler(win, MPI_ERRORS_RETURN);
  ferry_window_device_t handle{};
  int error_class = MPI_SUCCESS;
  MPI_Error_class(get_handle(win, &handle), &error_class);
  expect(error_class == MPI_ERR_WIN, what, "error class " + std::to_string(error_class) + ", expected MPI_ERR_WIN");
  MPI_Win_free(&win);
}

}  // namespace

int main(int argc, char** argv) {
  init(&argc, &argv);
  // Only Ferry has the call; the host baseline has nothing to check.
  auto get_handle = reinterpret_cast<HandleFunction>(dlsym(RTLD_DEFAULT, "ferry_win_device_handle"));
  if (get_handle) {
    device_window_handle(get_handle, true);
    device_window_handle(get_handle, false);
    host_window_has_no_handle(get_handle);
  } else {
    expect(suite_ferry_backend() == nullptr, Case{"ferry_win_device_handle", ""},
           "libferry.so is loaded but does not export ferry_win_device_handle");
  }
  return finish();
}

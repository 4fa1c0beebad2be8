// Synchronization on Ferry's windows (rma_window.h): fence, general active
// target (post, start, complete, wait, test), passive target (lock, unlock,
// lock_all, unlock_all), flush and sync.
//
// When the real MPI's window holds memory too (real_memory), fence and
// general active target run on both windows; a passive-target epoch opens
// on the real MPI's only with the first operation to host memory
// (to_real_window in rma.cc), so epochs that reach device memory alone cost
// what they cost on device windows. Engine locks come first, real ones
// second, on every rank, and ranks waiting for an engine lock drive the real
// MPI's progress, so neither order can wait on the other. The calls that
// complete operations on the real MPI's windows deliver staged results
// (complete_host_staged). On windows across machines (rma_across.h) this
// rank's synchronizations reconcile its device memory with its host copy.
#include <algorithm>
#include <atomic>
#include <vector>

#include "handlers.h"
#include "mpi_shim/rma_across.h"
#include "mpi_shim/rma_host.h"
#include "mpi_shim/rma_internal.h"
#include "mpi_shim/rma_window.h"

namespace ferry::shim {
namespace {

// Translates a group's ranks into the window's.
int window_ranks(const DeviceWindow& dw, MPI_Group group, std::vector<int>* ranks) {
  int n = 0;
  if (group == MPI_GROUP_NULL || PMPI_Group_size(group, &n) != MPI_SUCCESS) return MPI_ERR_GROUP;
  std::vector<int> in(n);
  for (int i = 0; i < n; ++i) in[i] = i;
  ranks->assign(n, MPI_UNDEFINED);
  if (n && PMPI_Group_translate_ranks(group, n, in.data(), dw.group, ranks->data()) != MPI_SUCCESS)
    return MPI_ERR_GROUP;
  for (int r : *ranks)
    if (r == MPI_UNDEFINED) return MPI_ERR_GROUP;
  return MPI_SUCCESS;
}


// The real MPI's half of a synchronization, where its window holds memory.
template <typename Pmpi>
int real_half(const DeviceWindow& dw, int rc, Pmpi pmpi) {
  return rc == MPI_SUCCESS && dw.real_memory ? pmpi() : rc;
}

void clear_real_pending(DeviceWindow& dw, int target) {
  if (target == kEveryTarget)
    std::fill(dw.real_pending.begin(), dw.real_pending.end(), 0);
  else if (dw.real_memory)
    dw.real_pending[static_cast<std::size_t>(target)] = 0;
}


}  // namespace

int handle_Win_fence(int assert, MPI_Win win) {
  return on_window(FunctionId::kWin_fence, win, [&](DeviceWindow& dw) -> int {
    Window& w = *dw.window;
    if (w.any_lock_held() || w.access_group_open() || w.exposure_open()) return fail(win, MPI_ERR_RMA_SYNC);
    // The real MPI's first: its fence may need every rank's progress, which
    // a rank waiting in the engine's barrier would not make.
    const int rc = real_half(dw, MPI_SUCCESS, [&] {
      return complete_host_staged(win, kEveryTarget, PMPI_Win_fence(assert, win));
    });
    clear_real_pending(dw, kEveryTarget);
    if (rc != MPI_SUCCESS) return rc;
    return engine_result(win, FunctionId::kWin_fence, w.fence(!(assert & MPI_MODE_NOSUCCEED)));
  }, [&]() -> int {
    return sync_across(win, [&] { return complete_host_staged(win, kEveryTarget, PMPI_Win_fence(assert, win)); });
  });
}

int handle_Win_post(MPI_Group group, int assert, MPI_Win win) {
  return on_window(FunctionId::kWin_post, win, [&](DeviceWindow& dw) -> int {
    if (dw.window->exposure_open() || dw.engine_exposure_done) return fail(win, MPI_ERR_RMA_SYNC);
    std::vector<int> origins;
    if (int rc = window_ranks(dw, group, &origins); rc != MPI_SUCCESS) return fail(win, rc);
    const int rc = engine_result(win, FunctionId::kWin_post, dw.window->post(origins));
    return real_half(dw, rc, [&] { return PMPI_Win_post(group, assert, win); });
  }, [&]() -> int { return sync_across(win, [&] { return PMPI_Win_post(group, assert, win); }); });
}

int handle_Win_start(MPI_Group group, int assert, MPI_Win win) {
  return on_window(FunctionId::kWin_start, win, [&](DeviceWindow& dw) -> int {
    if (dw.window->access_group_open() || dw.window->any_lock_held()) return fail(win, MPI_ERR_RMA_SYNC);
    std::vector<int> targets;
    if (int rc = window_ranks(dw, group, &targets); rc != MPI_SUCCESS) return fail(win, rc);
    const int rc = engine_result(win, FunctionId::kWin_start, dw.window->start(targets));
    return real_half(dw, rc, [&] { return PMPI_Win_start(group, assert, win); });
  }, [&]() -> int { return sync_across(win, [&] { return PMPI_Win_start(group, assert, win); }); });
}

int handle_Win_complete(MPI_Win win) {
  return on_window(FunctionId::kWin_complete, win, [&](DeviceWindow& dw) -> int {
    if (!dw.window->access_group_open()) return fail(win, MPI_ERR_RMA_SYNC);
    const int rc = engine_result(win, FunctionId::kWin_complete, dw.window->complete());
    clear_real_pending(dw, kEveryTarget);
    return real_half(dw, rc, [&] { return complete_host_staged(win, kEveryTarget, PMPI_Win_complete(win)); });
  }, [&]() -> int { return sync_across(win, [&] { return complete_host_staged(win, kEveryTarget, PMPI_Win_complete(win)); }); });
}

int handle_Win_wait(MPI_Win win) {
  return on_window(FunctionId::kWin_wait, win, [&](DeviceWindow& dw) -> int {
    int rc = MPI_SUCCESS;
    if (!dw.engine_exposure_done) {
      if (!dw.window->exposure_open()) return fail(win, MPI_ERR_RMA_SYNC);
      rc = engine_result(win, FunctionId::kWin_wait, dw.window->wait());
    }
    dw.engine_exposure_done = false;
    return real_half(dw, rc, [&] { return PMPI_Win_wait(win); });
  }, [&]() -> int { return sync_across(win, [&] { return PMPI_Win_wait(win); }); });
}

// The engine's epoch may end at one test and the real MPI's at a later one.
int handle_Win_test(MPI_Win win, int* flag) {
  return on_window(FunctionId::kWin_test, win, [&](DeviceWindow& dw) -> int {
    if (!dw.engine_exposure_done) {
      if (!dw.window->exposure_open()) return fail(win, MPI_ERR_RMA_SYNC);
      bool done = false;
      if (int rc = engine_result(win, FunctionId::kWin_test, dw.window->test(&done)); rc != MPI_SUCCESS) return rc;
      *flag = done;
      if (!done || !dw.real_memory) return MPI_SUCCESS;
      dw.engine_exposure_done = true;
    }
    const int rc = PMPI_Win_test(win, flag);
    if (rc == MPI_SUCCESS && *flag) dw.engine_exposure_done = false;
    return rc;
  }, [&]() -> int {
    // Reconciled only once the epoch ended.
    const int rc = PMPI_Win_test(win, flag);
    if (rc != MPI_SUCCESS || !*flag) return rc;
    return sync_across(win, [] { return MPI_SUCCESS; }, true);
  });
}

int handle_Win_lock(int lock_type, int rank, int assert, MPI_Win win) {
  return on_window(FunctionId::kWin_lock, win, [&](DeviceWindow& dw) -> int {
    Window& w = *dw.window;
    if (lock_type != MPI_LOCK_EXCLUSIVE && lock_type != MPI_LOCK_SHARED) return fail(win, MPI_ERR_LOCKTYPE);
    if (rank == MPI_PROC_NULL) return MPI_SUCCESS;
    if (rank < 0 || rank >= w.size()) return fail(win, MPI_ERR_RANK);
    if (w.locked(rank) || w.access_group_open()) return fail(win, MPI_ERR_RMA_SYNC);
    return engine_result(win, FunctionId::kWin_lock, w.lock(rank, lock_type == MPI_LOCK_EXCLUSIVE));
  }, [&]() -> int {
    if (rank != rank_in_window(win)) return PMPI_Win_lock(lock_type, rank, assert, win);
    return sync_across(win, [&] { return PMPI_Win_lock(lock_type, rank, assert, win); }, true);
  });
}

int handle_Win_unlock(int rank, MPI_Win win) {
  return on_window(FunctionId::kWin_unlock, win, [&](DeviceWindow& dw) -> int {
    Window& w = *dw.window;
    if (rank == MPI_PROC_NULL) return MPI_SUCCESS;
    if (rank < 0 || rank >= w.size()) return fail(win, MPI_ERR_RANK);
    if (!w.locked(rank) || w.lock_all_held()) return fail(win, MPI_ERR_RMA_SYNC);
    const int rc = engine_result(win, FunctionId::kWin_unlock, w.unlock(rank));
    if (!dw.real_memory) return rc;
    const auto t = static_cast<std::size_t>(rank);
    clear_real_pending(dw, rank);
    if (!dw.real_locked[t]) return rc;
    dw.real_locked[t] = 0;
    const int real_rc = complete_host_staged(win, rank, PMPI_Win_unlock(rank, win));
    return rc != MPI_SUCCESS ? rc : real_rc;
  }, [&]() -> int {
    auto unlock = [&] { return complete_host_staged(win, rank, PMPI_Win_unlock(rank, win)); };
    // Its own rank: the window's copies reconciled, or its queue quieted.
    if (rank == rank_in_window(win)) return sync_across(win, unlock);
    if (const int rc = quiet_across(win); rc != MPI_SUCCESS) return rc;
    return unlock();
  });
}

int handle_Win_lock_all(int assert, MPI_Win win) {
  return on_window(FunctionId::kWin_lock_all, win, [&](DeviceWindow& dw) -> int {
    if (dw.window->any_lock_held() || dw.window->access_group_open()) return fail(win, MPI_ERR_RMA_SYNC);
    return engine_result(win, FunctionId::kWin_lock_all, dw.window->lock_all());
  }, [&]() -> int { return sync_across(win, [&] { return PMPI_Win_lock_all(assert, win); }, true); });
}

int handle_Win_unlock_all(MPI_Win win) {
  return on_window(FunctionId::kWin_unlock_all, win, [&](DeviceWindow& dw) -> int {
    if (!dw.window->lock_all_held()) return fail(win, MPI_ERR_RMA_SYNC);
    const int rc = engine_result(win, FunctionId::kWin_unlock_all, dw.window->unlock_all());
    if (!dw.real_memory) return rc;
    clear_real_pending(dw, kEveryTarget);
    if (!dw.real_lock_all) return rc;
    dw.real_lock_all = false;
    const int real_rc = complete_host_staged(win, kEveryTarget, PMPI_Win_unlock_all(win));
    return rc != MPI_SUCCESS ? rc : real_rc;
  }, [&]() -> int {
    return sync_across(win, [&] { return complete_host_staged(win, kEveryTarget, PMPI_Win_unlock_all(win)); });
  });
}

namespace {

// Flush and flush_local: this engine completes operations at the target and
// at the origin together, so both are the same; the real MPI's window is
// flushed only where operations went through it.
int flush_one(MPI_Win win, FunctionId id, int rank) {
  auto pmpi = [&] {
    if (const int rc = quiet_across(win); rc != MPI_SUCCESS) return rc;
    return complete_host_staged(
        win, rank, id == FunctionId::kWin_flush ? PMPI_Win_flush(rank, win) : PMPI_Win_flush_local(rank, win));
  };
  return on_window(id, win, [&](DeviceWindow& dw) -> int {
    Window& w = *dw.window;
    if (rank == MPI_PROC_NULL) return MPI_SUCCESS;
    if (rank < 0 || rank >= w.size()) return fail(win, MPI_ERR_RANK);
    if (!w.passive_access(rank)) return fail(win, MPI_ERR_RMA_SYNC);
    const int rc = engine_result(win, id, w.flush());
    if (rc != MPI_SUCCESS || !dw.real_memory || !dw.real_pending[static_cast<std::size_t>(rank)]) return rc;
    clear_real_pending(dw, rank);
    return pmpi();
  }, pmpi);
}

int flush_every(MPI_Win win, FunctionId id) {
  auto pmpi = [&] {
    if (const int rc = quiet_across(win); rc != MPI_SUCCESS) return rc;
    return complete_host_staged(
        win, kEveryTarget, id == FunctionId::kWin_flush_all ? PMPI_Win_flush_all(win) : PMPI_Win_flush_local_all(win));
  };
  return on_window(id, win, [&](DeviceWindow& dw) -> int {
    if (!dw.window->any_lock_held()) return fail(win, MPI_ERR_RMA_SYNC);
    const int rc = engine_result(win, id, dw.window->flush());
    const bool pending = std::find(dw.real_pending.begin(), dw.real_pending.end(), 1) != dw.real_pending.end();
    if (rc != MPI_SUCCESS || !pending) return rc;
    clear_real_pending(dw, kEveryTarget);
    return pmpi();
  }, pmpi);
}

}  // namespace

int handle_Win_flush(int rank, MPI_Win win) { return flush_one(win, FunctionId::kWin_flush, rank); }
int handle_Win_flush_local(int rank, MPI_Win win) { return flush_one(win, FunctionId::kWin_flush_local, rank); }
int handle_Win_flush_all(MPI_Win win) { return flush_every(win, FunctionId::kWin_flush_all); }
int handle_Win_flush_local_all(MPI_Win win) { return flush_every(win, FunctionId::kWin_flush_local_all); }

int handle_Win_sync(MPI_Win win) {
  return on_window(FunctionId::kWin_sync, win, [&](DeviceWindow& dw) -> int {
    std::atomic_thread_fence(std::memory_order_seq_cst);
    // The real MPI's only inside an epoch open there.
    const bool real_epoch = dw.real_lock_all || std::find(dw.real_locked.begin(), dw.real_locked.end(), 1) !=
                                                    dw.real_locked.end();
    return real_epoch ? PMPI_Win_sync(win) : MPI_SUCCESS;
  }, [&]() -> int { return sync_across(win, [&] { return PMPI_Win_sync(win); }); });
}

}  // namespace ferry::shim

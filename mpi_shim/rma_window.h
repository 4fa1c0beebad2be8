// Ferry's record of one of its windows, shared by the creation calls
// (rma_create.cc) and the data-movement and synchronization calls (rma.cc).
//
// A window is Ferry's when device memory may be in it: some rank's memory
// of MPI_Win_create or MPI_Win_allocate(_shared) is device memory, or it is
// a dynamic window in a job where a device runtime is in use. Its engine
// window (engine/pgas/window.h) lists every rank's memory and moves the
// bytes of device memory. The application's MPI_Win is a real MPI window
// that carries the handle, group, name, info and error handler, and, when
// some rank's memory (or attached region) is host memory, that memory: then
// every synchronization runs on both windows, and operations whose target
// bytes lie in host memory are the real MPI's.
#pragma once

#include <mpi.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <vector>

#include "engine/core/peer_group.h"
#include "engine/pgas/symmetric_heap.h"
#include "engine/pgas/window.h"

namespace ferry::shim {

struct DeviceWindow {
  // The window's own engine peer group, over a private duplicate of the
  // application's: MPI lets the application free its communicator before
  // the window. Declared first, so the window goes first.
  std::unique_ptr<PeerGroup> engine;
  // The memory of MPI_Win_allocate(_shared) when every rank's is device
  // memory: at the same offset on every rank, every rank's copy mapped here
  // (no IPC handles).
  std::unique_ptr<SymmetricHeap> heap;
  std::unique_ptr<Window> window;
  MPI_Group group = MPI_GROUP_NULL;  // the window's ranks, for PSCW groups
  void* allocated = nullptr;         // Ferry's device memory behind Win_allocate(_shared)
  // What MPI_Win_get_attr reports.
  void* base = nullptr;
  MPI_Aint size = 0;
  int disp_unit = 1;
  int flavor = MPI_WIN_FLAVOR_CREATE;
  int model = MPI_WIN_UNIFIED;
  // The real MPI's window holds memory too (mixed and dynamic windows).
  bool real_memory = false;
  // Per target: operations issued through the real MPI's window since the
  // last flush of that target (a flush with none skips the real MPI).
  std::vector<char> real_pending;
  // MPI_Win_test: the engine's exposure epoch ended, the real MPI's not yet.
  bool engine_exposure_done = false;
  // Passive-target epochs reach the real MPI's window only when an
  // operation to host memory needs them (with the type of the engine's
  // lock): per target, whether the real MPI's lock is taken; the same for
  // lock_all.
  std::vector<char> real_locked;
  bool real_lock_all = false;
  std::mutex mutex;  // one call at a time per window (MPI_THREAD_MULTIPLE)
};

extern std::atomic<int> device_window_count;
DeviceWindow* look_up_window(MPI_Win win);

// Ferry's record of win, or nullptr when win is the real MPI's alone.
inline DeviceWindow* find_window(MPI_Win win) {
  if (device_window_count.load(std::memory_order_acquire) == 0 || win == MPI_WIN_NULL) return nullptr;
  return look_up_window(win);
}

}  // namespace ferry::shim

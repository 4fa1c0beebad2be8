#include "mpi_shim/rma_across.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include "engine/bootstrap/mpi_bootstrap.h"
#include "engine/common/log.h"
#include "engine/common/params.h"
#include "engine/gpu/gpu.h"
#include "engine/pgas/remote_access.h"
#include "handlers.h"
#include "mpi_shim/rma_host.h"
#include "mpi_shim/rma_queue.h"
#include "mpi_shim/route.h"
#include "mpi_shim/wrapper_support.h"

namespace ferry::shim {
namespace {

struct AcrossWindow {
  gpu::Backend* backend = nullptr;
  char* device = nullptr;  // this rank's device memory (private copy); null: host memory or none
  char* shadow = nullptr;  // its host copy in the real MPI's window (public copy)
  std::size_t bytes = 0;
  std::vector<char> synced;  // both copies' bytes at the last reconciliation
  std::vector<char> piece;   // the device memory brought over, a piece at a time
  void* base = nullptr;      // what MPI_WIN_BASE reports
  int flavor = MPI_WIN_FLAVOR_CREATE;
  int model = MPI_WIN_SEPARATE;
  int rank = 0;
  // Every rank's window bytes and displacement unit, for range checks.
  std::vector<MPI_Aint> sizes;
  std::vector<int> disp_units;
  void* allocated = nullptr;       // Ferry's device memory
  void* host_allocated = nullptr;  // MPI_Alloc_mem's
  // FERRY_RMA_ACROSS=queue: every operation through it, into the memory
  // itself (no host copy is reconciled).
  std::unique_ptr<RemoteAccess> queue;
  std::mutex mutex;
};

std::atomic<int> g_count{0};
std::shared_mutex g_mutex;
std::unordered_map<MPI_Win, std::unique_ptr<AcrossWindow>>& windows() {
  static auto* table = new std::unordered_map<MPI_Win, std::unique_ptr<AcrossWindow>>;
  return *table;
}

AcrossWindow* find(MPI_Win win) {
  if (g_count.load(std::memory_order_acquire) == 0 || win == MPI_WIN_NULL) return nullptr;
  std::shared_lock<std::shared_mutex> lock(g_mutex);
  auto it = windows().find(win);
  return it == windows().end() ? nullptr : it->second.get();
}

constexpr std::size_t kPiece = std::size_t{8} << 20;

// Bytes this rank changed in its device memory since the last
// reconciliation go to the host copy.
Status publish(AcrossWindow& w) {
  if (!w.device) return Status::kOk;
  w.piece.resize(std::min(w.bytes, kPiece));
  for (std::size_t at = 0; at < w.bytes; at += kPiece) {
    const std::size_t length = std::min(kPiece, w.bytes - at);
    FERRY_CHECK(gpu::copy(w.piece.data(), w.device + at, length));
    const char* now = w.piece.data();
    char* was = w.synced.data() + at;
    if (std::memcmp(now, was, length) == 0) continue;
    // Byte by byte only within the blocks that differ: a byte this rank did
    // not store may hold another rank's update in the host copy.
    for (std::size_t block = 0; block < length; block += 64) {
      const std::size_t end = std::min(length, block + 64);
      if (std::memcmp(now + block, was + block, end - block) == 0) continue;
      for (std::size_t i = block; i < end; ++i) {
        if (now[i] == was[i]) continue;
        was[i] = now[i];
        w.shadow[at + i] = now[i];
      }
    }
  }
  return Status::kOk;
}

// Bytes other ranks changed in the host copy go to the device memory: the
// span from the first to the last changed byte, taken into the snapshot
// first (the device then equals the snapshot, as the bytes between were
// unchanged on both sides).
Status absorb(AcrossWindow& w) {
  if (!w.device) return Status::kOk;
  std::size_t first = w.bytes, last = 0;
  for (std::size_t at = 0; at < w.bytes; at += 4096) {
    const std::size_t length = std::min<std::size_t>(4096, w.bytes - at);
    if (std::memcmp(w.shadow + at, w.synced.data() + at, length) == 0) continue;
    first = std::min(first, at);
    last = at + length;
  }
  if (first >= last) return Status::kOk;
  std::memcpy(w.synced.data() + first, w.shadow + first, last - first);
  return gpu::copy(w.device + first, w.synced.data() + first, last - first);
}

int reconciled(MPI_Win win, Status status) {
  if (ok(status)) return MPI_SUCCESS;
  FERRY_WARN(Pgas, "a window across machines: copying between device memory and its host copy failed: %s",
             status_name(status));
  return raise_win_error(win, MPI_ERR_OTHER);
}

}  // namespace

int create_window_across(FunctionId id, void* memory, bool device_here, MPI_Aint size, int disp_unit, MPI_Info info,
                         MPI_Comm comm, MPI_Win* win, int flavor, void* allocated, void* host_allocated) {
  auto w = std::make_unique<AcrossWindow>();
  w->base = memory;
  w->flavor = flavor;
  w->allocated = allocated;
  w->host_allocated = host_allocated;
  void* exposed = memory;
  // With the queue the host copy only stands in for the memory in the real
  // MPI's window (which then serves synchronization alone): no snapshot.
  const bool queued = params().rma_across == "queue";
  // Every rank learns whether every rank has its host copy, so that none is
  // left in the real MPI's collective call alone.
  int ready = 1;
  if (device_here && size > 0) {
    w->backend = gpu::owner_backend(gpu::classify(memory));
    w->device = static_cast<char*>(memory);
    w->bytes = static_cast<std::size_t>(size);
    void* shadow = nullptr;
    ready = w->backend && ok(w->backend->pinned_alloc(w->bytes, &shadow));
    w->shadow = static_cast<char*>(shadow);
    if (ready && !queued) {
      w->synced.resize(w->bytes);
      ready = ok(gpu::copy(w->synced.data(), w->device, w->bytes));
      if (ready) std::memcpy(w->shadow, w->synced.data(), w->bytes);
    }
    exposed = shadow;
  }
  int everyone = 0;
  PMPI_Allreduce(&ready, &everyone, 1, MPI_INT, MPI_MIN, comm);
  if (!everyone) {
    if (w->shadow) FERRY_LOG_IF_FAILED(w->backend->pinned_free(w->shadow));
    FERRY_WARN(Pgas, "%s: a rank could not make the host copy of its device memory", function_name(id));
    return raise_error(comm, MPI_ERR_NO_MEM);
  }
  const int rc = PMPI_Win_create(size > 0 ? exposed : nullptr, size, disp_unit, info, comm, win);
  if (rc != MPI_SUCCESS) {
    if (w->shadow) FERRY_LOG_IF_FAILED(w->backend->pinned_free(w->shadow));
    return rc;
  }
  MPI_Group group = MPI_GROUP_NULL;
  PMPI_Win_get_group(*win, &group);
  PMPI_Group_rank(group, &w->rank);
  PMPI_Group_free(&group);
  int ranks = 0;
  PMPI_Comm_size(comm, &ranks);
  const MPI_Aint mine[2] = {size, disp_unit};
  std::vector<MPI_Aint> all(2 * static_cast<std::size_t>(ranks));
  PMPI_Allgather(mine, 2, MPI_AINT, all.data(), 2, MPI_AINT, comm);
  for (int r = 0; r < ranks; ++r) {
    w->sizes.push_back(all[2 * r]);
    w->disp_units.push_back(static_cast<int>(all[2 * r + 1]));
  }
  if (queued) {
    // Collective; the real MPI's window stays for synchronization.
    const Status status = RemoteAccess::create(make_mpi_bootstrap(comm), gpu::active_backend(),
                                               {memory, static_cast<std::size_t>(std::max<MPI_Aint>(size, 0)),
                                                device_here},
                                               queue_combiner(), &w->queue);
    if (!ok(status)) {
      FERRY_WARN(Pgas, "%s: the GDA queue of a window across machines could not be set up: %s", function_name(id),
                 status_name(status));
      PMPI_Win_free(win);
      if (w->shadow) FERRY_LOG_IF_FAILED(w->backend->pinned_free(w->shadow));
      return raise_error(comm, MPI_ERR_WIN);
    }
    w->model = MPI_WIN_UNIFIED;
    FERRY_INFO(Pgas, "%s: ranks cannot map each other's device memory; one-sided calls through the GDA queue "
               "(unified memory model)", function_name(id));
  } else {
    FERRY_INFO(Pgas, "%s: ranks cannot map each other's device memory; the real MPI's window over host copies "
               "(separate memory model)", function_name(id));
  }
  gpu::g_device_runtime_seen.store(true, std::memory_order_relaxed);
  std::unique_lock<std::shared_mutex> lock(g_mutex);
  windows()[*win] = std::move(w);
  g_count.fetch_add(1, std::memory_order_release);
  return MPI_SUCCESS;
}

bool is_window_across(MPI_Win win) { return find(win) != nullptr; }

bool device_memory_across(MPI_Win win, void** memory, std::size_t* bytes) {
  AcrossWindow* w = find(win);
  if (!w) return false;
  *memory = w->device;
  *bytes = w->device ? w->bytes : 0;
  return true;
}

int rank_in_window(MPI_Win win) {
  const AcrossWindow* w = find(win);
  return w ? w->rank : MPI_UNDEFINED;
}

RemoteAccess* queue_of(MPI_Win win) {
  AcrossWindow* w = find(win);
  return w ? w->queue.get() : nullptr;
}

bool target_disp_unit(MPI_Win win, int target, int* disp_unit) {
  const AcrossWindow* w = find(win);
  if (!w || target < 0 || target >= static_cast<int>(w->disp_units.size())) return false;
  *disp_unit = w->disp_units[static_cast<std::size_t>(target)];
  return true;
}

int quiet_across(MPI_Win win) {
  RemoteAccess* queue = queue_of(win);
  if (!queue) return MPI_SUCCESS;
  const Status status = queue->quiet_host();
  return ok(status) ? MPI_SUCCESS : queue_failure(win, status);
}

int sync_across(MPI_Win win, const std::function<int()>& pmpi, bool after_only) {
  AcrossWindow* w = find(win);
  if (!w) return pmpi();
  if (w->queue) {
    // Operations complete at their targets before the real synchronization
    // tells anyone; the memory is the window's only copy.
    if (const int rc = quiet_across(win); rc != MPI_SUCCESS) return rc;
    return pmpi();
  }
  if (const int lost = remote_access_error(win); lost != MPI_SUCCESS) return raise_win_error(win, lost);
  std::lock_guard<std::mutex> lock(w->mutex);
  if (!after_only)
    if (int rc = reconciled(win, publish(*w)); rc != MPI_SUCCESS) return rc;
  const int rc = pmpi();
  if (rc != MPI_SUCCESS) return rc;
  if (after_only)
    if (int published = reconciled(win, publish(*w)); published != MPI_SUCCESS) return published;
  return reconciled(win, absorb(*w));
}

int get_attr_across(MPI_Win win, int keyval, void* attribute_val, int* flag, bool* handled) {
  AcrossWindow* w = find(win);
  *handled = w && attribute_val && flag &&
             (keyval == MPI_WIN_BASE || keyval == MPI_WIN_MODEL || keyval == MPI_WIN_CREATE_FLAVOR);
  if (!*handled) return MPI_SUCCESS;
  void* value = keyval == MPI_WIN_BASE ? w->base : keyval == MPI_WIN_MODEL ? static_cast<void*>(&w->model)
                                                                            : static_cast<void*>(&w->flavor);
  *static_cast<void**>(attribute_val) = value;
  *flag = 1;
  return MPI_SUCCESS;
}

int free_window_across(MPI_Win* win, bool* handled) {
  AcrossWindow* across = win ? find(*win) : nullptr;
  *handled = across != nullptr;
  if (!*handled) return MPI_SUCCESS;
  const MPI_Win freed = *win;
  // Collective, as the free: every rank's operations finish first.
  across->queue.reset();
  const int rc = PMPI_Win_free(win);
  if (rc != MPI_SUCCESS) return rc;
  release_host_staged(freed);
  std::unique_ptr<AcrossWindow> w;
  {
    std::unique_lock<std::shared_mutex> lock(g_mutex);
    auto it = windows().find(freed);
    w = std::move(it->second);
    windows().erase(it);
    g_count.fetch_sub(1, std::memory_order_release);
  }
  if (w->shadow) FERRY_LOG_IF_FAILED(w->backend->pinned_free(w->shadow));
  if (w->allocated && w->backend) FERRY_LOG_IF_FAILED(w->backend->device_free(w->allocated));
  if (w->host_allocated) PMPI_Free_mem(w->host_allocated);
  return MPI_SUCCESS;
}

int check_target_range(MPI_Win win, int target_rank, MPI_Aint target_disp, int target_count,
                       MPI_Datatype target_datatype) {
  const AcrossWindow* w = find(win);
  if (!w || target_rank < 0 || target_rank >= static_cast<int>(w->sizes.size()) || target_count <= 0)
    return MPI_SUCCESS;
  MPI_Aint lb = 0, extent = 0, true_lb = 0, true_extent = 0;
  if (PMPI_Type_get_extent(target_datatype, &lb, &extent) != MPI_SUCCESS ||
      PMPI_Type_get_true_extent(target_datatype, &true_lb, &true_extent) != MPI_SUCCESS)
    return MPI_SUCCESS;  // the real MPI reports the type
  const auto t = static_cast<std::size_t>(target_rank);
  const MPI_Aint base = target_disp * w->disp_units[t];
  const MPI_Aint last = static_cast<MPI_Aint>(target_count - 1) * extent;
  const MPI_Aint low = base + true_lb + std::min<MPI_Aint>(0, last);
  const MPI_Aint high = base + true_lb + std::max<MPI_Aint>(0, last) + true_extent;
  if (low >= 0 && high <= w->sizes[t]) return MPI_SUCCESS;
  FERRY_WARN(Pgas, "a window across machines: bytes [%lld, %lld) of rank %d's %lld-byte window",
             static_cast<long long>(low), static_cast<long long>(high), target_rank,
             static_cast<long long>(w->sizes[t]));
  return raise_win_error(win, MPI_ERR_RMA_RANGE);
}

int handle_Barrier(MPI_Comm comm) {
  if (g_count.load(std::memory_order_acquire) == 0) {
    record_route(FunctionId::kBarrier, {Route::kPmpi, "no window across machines"});
    return PMPI_Barrier(comm);
  }
  record_route(FunctionId::kBarrier, {Route::kEngine, "windows across machines reconciled"});
  std::vector<std::pair<MPI_Win, AcrossWindow*>> all;
  {
    std::shared_lock<std::shared_mutex> lock(g_mutex);
    for (const auto& [win, w] : windows()) all.emplace_back(win, w.get());
  }
  int rc = MPI_SUCCESS;
  for (auto& [win, w] : all) {
    std::lock_guard<std::mutex> lock(w->mutex);
    if (rc == MPI_SUCCESS && !w->queue) rc = reconciled(win, publish(*w));
  }
  const int barrier = PMPI_Barrier(comm);
  for (auto& [win, w] : all) {
    std::lock_guard<std::mutex> lock(w->mutex);
    if (rc == MPI_SUCCESS && !w->queue) rc = reconciled(win, absorb(*w));
  }
  return barrier != MPI_SUCCESS ? barrier : rc;
}

}  // namespace ferry::shim

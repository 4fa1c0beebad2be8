#include "mpi_shim/rma_host.h"

#include <unordered_map>
#include <vector>

namespace ferry::shim {
namespace {

std::mutex host_staged_mutex;
std::unordered_map<MPI_Win, std::vector<std::shared_ptr<HostStaged>>>& host_staged() {
  static auto* table = new std::unordered_map<MPI_Win, std::vector<std::shared_ptr<HostStaged>>>;
  return *table;
}
// Lets synchronizations skip the table while nothing is staged.
std::atomic<int> host_staged_count{0};

}  // namespace

void keep_host_staged(MPI_Win win, std::shared_ptr<HostStaged> staged) {
  std::lock_guard<std::mutex> lock(host_staged_mutex);
  host_staged()[win].push_back(std::move(staged));
  host_staged_count.fetch_add(1, std::memory_order_release);
}

int complete_host_staged(MPI_Win win, int target, int mpi_result) {
  if (mpi_result != MPI_SUCCESS || host_staged_count.load(std::memory_order_acquire) == 0) return mpi_result;
  std::vector<std::shared_ptr<HostStaged>> done;
  {
    std::lock_guard<std::mutex> lock(host_staged_mutex);
    auto it = host_staged().find(win);
    if (it == host_staged().end()) return mpi_result;
    auto& pending = it->second;
    // Issue order is kept: overlapping results land as the operations did.
    auto kept = std::stable_partition(pending.begin(), pending.end(), [&](const std::shared_ptr<HostStaged>& s) {
      return target != kEveryTarget && s->target != target;
    });
    done.assign(std::make_move_iterator(kept), std::make_move_iterator(pending.end()));
    pending.erase(kept, pending.end());
    if (pending.empty()) host_staged().erase(it);
    host_staged_count.fetch_sub(static_cast<int>(done.size()), std::memory_order_release);
  }
  int first_error = MPI_SUCCESS;
  for (const auto& s : done) {
    const int rc = s->deliver();
    if (first_error == MPI_SUCCESS) first_error = rc;
  }
  return first_error;
}

void release_host_staged(MPI_Win win) {
  if (host_staged_count.load(std::memory_order_acquire) == 0) return;
  std::lock_guard<std::mutex> lock(host_staged_mutex);
  auto it = host_staged().find(win);
  if (it == host_staged().end()) return;
  host_staged_count.fetch_sub(static_cast<int>(it->second.size()), std::memory_order_release);
  host_staged().erase(it);
}
}  // namespace ferry::shim

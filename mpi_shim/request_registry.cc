// The registry of tracked requests (request_registry.h): their objects by
// handle, what moves them between the registry and a completion call
// (request_calls.h), and MPI_Start(all), the one call that starts them.
#include "mpi_shim/request_registry.h"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <utility>

#include "handlers.h"
#include "mpi_shim/request_calls.h"
#include "mpi_shim/staging.h"

namespace ferry::shim {
namespace {

std::mutex registry_mutex;
RequestTable& registry() {
  static auto* table = new RequestTable;
  return *table;
}

// Lets completion calls skip the registry while nothing is tracked.
std::atomic<int> outstanding{0};

// Requests freed by the application while active whose memory the real MPI
// may still be using: kept until MPI_Finalize.
std::vector<std::unique_ptr<TrackedRequest>>& orphans() {
  static auto* list = new std::vector<std::unique_ptr<TrackedRequest>>;
  return *list;
}

// Call with registry_mutex held.
void insert_locked(MPI_Request request, std::unique_ptr<TrackedRequest> tracked) {
  if (registry().insert_or_assign(request, std::move(tracked)).second)
    outstanding.fetch_add(1, std::memory_order_release);
}

// A request whose outputs one function delivers (track_request).
class CompletionHook final : public TrackedRequest {
 public:
  explicit CompletionHook(std::function<int()> deliver) : deliver_(std::move(deliver)) {}

 private:
  int complete(MPI_Status&) override { return deliver_(); }
  std::function<int()> deliver_;
};

constexpr int kMaxProgress = 4;
std::atomic<void (*)()> progress_hooks[kMaxProgress];
std::atomic<int> progress_count{0};

}  // namespace

// --- the object's state ---

int TrackedRequest::finish(MPI_Status& status) {
  if (!active_) return MPI_SUCCESS;
  if (persistent_) active_ = false;
  return complete(status);
}

int TrackedRequest::get_status(MPI_Request handle, int* flag, MPI_Status* status) {
  MPI_Status local;
  MPI_Status* st = status == MPI_STATUS_IGNORE ? &local : status;
  const int result = PMPI_Request_get_status(handle, flag, st);
  if (result != MPI_SUCCESS || !*flag || !active_ || delivered_) return result;
  delivered_ = true;
  return early_complete(*st);
}

int TrackedRequest::start(MPI_Request* handle) {
  return start_tracked(1, handle, [](int, MPI_Request* requests) { return PMPI_Start(requests); });
}

void TrackedRequest::started() {
  active_ = true;
  delivered_ = false;
  on_started();
}

// --- registering ---

void track(MPI_Request request, std::unique_ptr<TrackedRequest> tracked) {
  std::lock_guard<std::mutex> lock(registry_mutex);
  insert_locked(request, std::move(tracked));
}

void track_request(MPI_Request request, std::function<int()> complete) {
  track(request, std::make_unique<CompletionHook>(std::move(complete)));
}

void track_uncancellable(MPI_Request request) {
  std::lock_guard<std::mutex> lock(registry_mutex);
  auto it = registry().find(request);
  if (it != registry().end()) {
    it->second->make_uncancellable();
    return;
  }
  auto tracked = std::make_unique<TrackedRequest>();
  tracked->make_uncancellable();
  insert_locked(request, std::move(tracked));
}

void add_completion_progress(void (*progress)()) {
  std::lock_guard<std::mutex> lock(registry_mutex);
  const int n = progress_count.load(std::memory_order_relaxed);
  for (int i = 0; i < n; ++i)
    if (progress_hooks[i].load(std::memory_order_relaxed) == progress) return;
  if (n == kMaxProgress) return;
  progress_hooks[n].store(progress, std::memory_order_relaxed);
  progress_count.store(n + 1, std::memory_order_release);
}

void run_completion_progress() {
  const int n = progress_count.load(std::memory_order_acquire);
  for (int i = 0; i < n; ++i) progress_hooks[i].load(std::memory_order_relaxed)();
}

// --- looking up ---

TrackedRequest* tracked(MPI_Request request) {
  if (outstanding.load(std::memory_order_acquire) == 0 || request == MPI_REQUEST_NULL) return nullptr;
  std::lock_guard<std::mutex> lock(registry_mutex);
  auto it = registry().find(request);
  // Only this thread completes or frees it: the object stays where it is.
  return it == registry().end() ? nullptr : it->second.get();
}

bool any_tracked(int count, const MPI_Request* requests) {
  if (outstanding.load(std::memory_order_acquire) == 0 || !requests || count < 0) return false;
  std::lock_guard<std::mutex> lock(registry_mutex);
  for (int i = 0; i < count; ++i)
    if (requests[i] != MPI_REQUEST_NULL && registry().count(requests[i]) != 0) return true;
  return false;
}

bool any_tracked(int count, const MPI_Request* requests, RequestQuestion asks) {
  if (outstanding.load(std::memory_order_acquire) == 0 || !requests) return false;
  for (int i = 0; i < count; ++i) {
    TrackedRequest* t = tracked(requests[i]);
    if (t && (t->*asks)(requests[i])) return true;
  }
  return false;
}

// --- settling and delivering early ---

Settled settle_requests(int count, MPI_Request* requests, bool wait) {
  if (outstanding.load(std::memory_order_acquire) == 0 || !requests) return {};
  auto each = [&](bool wait_now) {
    Settled found;
    for (int i = 0; i < count; ++i) {
      TrackedRequest* t = tracked(requests[i]);
      if (!t) continue;
      const Settled settled = t->settle(requests[i], wait_now);
      if (found.error == MPI_SUCCESS) found.error = settled.error;
      found.running = found.running || settled.running;
    }
    return found;
  };
  if (!wait) return each(false);
  // Every one looks before any waits: an offer's claim time runs from the
  // first completion call that looks at it (peer_pt2pt.h).
  const Settled looked = count > 1 ? each(false) : Settled{};
  Settled waited = each(true);
  if (looked.error != MPI_SUCCESS) waited.error = looked.error;
  waited.running = false;
  return waited;
}

int get_status_of(MPI_Request request, TrackedRequest& object, int* flag, MPI_Status* status) {
  const Settled settled = object.settle(request, false);
  if (settled.running || settled.error != MPI_SUCCESS) {
    *flag = 0;
    return settled.error;
  }
  return object.get_status(request, flag, status);
}

void deliver_receives_posted_before(std::uint64_t posted) {
  if (CallFinish* call = CallFinish::current()) call->finish_posted_before(posted);
  int provided = MPI_THREAD_SINGLE;
  PMPI_Query_thread(&provided);
  if (provided == MPI_THREAD_MULTIPLE) return;
  // The others: still active, their handles still the application's.
  std::vector<std::pair<std::uint64_t, MPI_Request>> earlier;
  {
    std::lock_guard<std::mutex> lock(registry_mutex);
    for (const auto& [request, t] : registry())
      if (t->posted() && t->posted() < posted && t->active() && !t->delivered()) earlier.emplace_back(t->posted(), request);
  }
  std::sort(earlier.begin(), earlier.end());
  for (const auto& [place, request] : earlier) {
    int done = 0;
    if (TrackedRequest* t = tracked(request)) {
      get_status_of(request, *t, &done, MPI_STATUS_IGNORE);
    } else {
      PMPI_Request_get_status(request, &done, MPI_STATUS_IGNORE);
    }
  }
}

// --- one call's requests ---

thread_local CallFinish* CallFinish::current_ = nullptr;

CallFinish::CallFinish(int n, MPI_Request* requests)
    : handles_(n), entries_(n), statuses_(n), finished_(n), results_(n), requests_(requests), n_(n),
      enclosing_(current_) {
  std::lock_guard<std::mutex> lock(registry_mutex);
  for (int i = 0; i < n; ++i) {
    handles_[i] = requests[i];
    statuses_[i] = nullptr;
    finished_[i] = 0;
    results_[i] = MPI_SUCCESS;
    if (requests[i] != MPI_REQUEST_NULL) entries_[i] = registry().extract(requests[i]);
  }
  current_ = this;
}

CallFinish::~CallFinish() {
  current_ = enclosing_;
  std::vector<std::unique_ptr<TrackedRequest>> released;
  std::lock_guard<std::mutex> lock(registry_mutex);
  for (int i = 0; i < n_; ++i) {
    if (entries_[i].empty()) continue;
    if (requests_[i] == handles_[i]) {
      registry().insert(std::move(entries_[i]));
      continue;
    }
    // Released by the real MPI without being finished: failed, or freed.
    std::unique_ptr<TrackedRequest>& t = entries_[i].mapped();
    if (t->active() && !t->delivered() && t->holds_memory_in_flight()) {
      orphans().push_back(std::move(t));
    } else {
      released.push_back(std::move(t));
    }
    outstanding.fetch_sub(1, std::memory_order_release);
  }
}

int CallFinish::finish(int i) {
  if (finished_[i] || !statuses_[i]) return results_[i];
  finished_[i] = 1;
  TrackedRequest* t = object(i);
  if (!t) return MPI_SUCCESS;
  results_[i] = t->finish(*statuses_[i]);
  if (!t->persistent()) {
    entries_[i] = RequestTable::node_type();
    outstanding.fetch_sub(1, std::memory_order_release);
  }
  return results_[i];
}

void CallFinish::finish_posted_before(std::uint64_t posted) {
  std::vector<std::pair<std::uint64_t, int>> earlier;
  for (int i = 0; i < n_; ++i) {
    if (finished_[i] || entries_[i].empty()) continue;
    const TrackedRequest& t = *entries_[i].mapped();
    if (t.posted() && t.posted() < posted && t.active()) earlier.emplace_back(t.posted(), i);
  }
  std::sort(earlier.begin(), earlier.end());
  for (const auto& [place, i] : earlier) {
    if (statuses_[i]) {
      finish(i);
    } else if (TrackedRequest* t = object(i)) {
      int done = 0;
      get_status_of(handles_[i], *t, &done, MPI_STATUS_IGNORE);
    }
  }
}

// --- starting ---

namespace {

// Only once the real MPI started them: a request that failed to start must
// not copy anything back at its next (empty) completion. Open MPI may hand
// back a new handle for a persistent request whose previous operation is
// still in flight (a buffered send), so the object follows the handle.
void mark_started(const std::vector<MPI_Request>& before, const MPI_Request* after,
                  const std::vector<int>& restarted) {
  std::lock_guard<std::mutex> lock(registry_mutex);
  for (int i : restarted) {
    auto it = registry().find(before[i]);
    if (it == registry().end()) continue;
    it->second->started();
    if (after[i] != before[i]) {
      std::unique_ptr<TrackedRequest> moved = std::move(it->second);
      registry().erase(it);
      registry()[after[i]] = std::move(moved);
    }
  }
}

}  // namespace

int start_tracked(int count, MPI_Request* requests, int (*pmpi)(int, MPI_Request*)) {
  const std::vector<MPI_Request> before(requests, requests + count);
  std::vector<int> restarted;
  for (int i = 0; i < count; ++i) {
    TrackedRequest* t = tracked(requests[i]);
    if (!t || t->active()) continue;
    const int result = t->restart();
    if (result != MPI_SUCCESS) return result;
    restarted.push_back(i);
  }
  const int result = pmpi(count, requests);
  if (result == MPI_SUCCESS) mark_started(before, requests, restarted);
  return result;
}

int handle_Start(MPI_Request* request) {
  TrackedRequest* t = request ? tracked(*request) : nullptr;
  return t ? t->start(request) : PMPI_Start(request);
}

int handle_Startall(int count, MPI_Request* requests) {
  if (!any_tracked(count, requests)) return PMPI_Startall(count, requests);
  bool alone = false;
  for (int i = 0; i < count && !alone; ++i) {
    const TrackedRequest* t = tracked(requests[i]);
    alone = t && t->starts_alone();
  }
  if (!alone) return start_tracked(count, requests, PMPI_Startall);
  // Messages keep the order of the array, as in the real MPI_Startall.
  for (int i = 0; i < count; ++i) {
    const int result = handle_Start(&requests[i]);
    if (result != MPI_SUCCESS) return result;
  }
  return MPI_SUCCESS;
}

void release_tracked_requests() {
  std::lock_guard<std::mutex> lock(registry_mutex);
  orphans().clear();
  registry().clear();
  outstanding.store(0, std::memory_order_release);
}

}  // namespace ferry::shim

// Staged requests and the calls that make, start, complete and free them.
// A device send buffer is copied to a pooled host buffer when the call is
// made, or at every MPI_Start of a persistent request (MPI lets the user
// reuse it only after completion, so the copy taken then is the message); a
// device receive buffer gets the host copy when the request completes, in
// whichever Wait or Test call completes it, or in MPI_Request_get_status.
// Host buffers and requests Ferry did not stage go to the real MPI as they are.
#include "mpi_shim/requests.h"

#include <algorithm>
#include <atomic>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "handlers.h"
#include "mpi_shim/nonblocking_engine.h"
#include "mpi_shim/peer_pt2pt.h"
#include "mpi_shim/point_to_point.h"

namespace ferry::shim {
namespace {

// count elements, on the stack up to kInline (the usual few requests of a
// halo exchange), else on the heap: completion calls run on every exchange.
template <typename T>
class CallArray {
 public:
  static constexpr int kInline = 16;
  explicit CallArray(int count) {
    if (count > kInline) heap_.resize(count);
    data_ = count > kInline ? heap_.data() : inline_;
  }
  CallArray(const CallArray&) = delete;
  CallArray& operator=(const CallArray&) = delete;
  T* data() { return data_; }
  T& operator[](int i) { return data_[i]; }

 private:
  T inline_[kInline];
  std::vector<T> heap_;
  T* data_;
};

struct StagedRequest {
  std::unique_ptr<Staging> staging;
  bool receive = false;     // a point-to-point receive: copies back only what arrived
  bool persistent = false;
  bool active = true;       // started and not yet completed
  bool delivered = false;   // outputs already copied back by MPI_Request_get_status
  std::function<int()> complete;  // instead of staging: track_request
  bool uncancellable = false;     // a send with an envelope (track_uncancellable)
  CheckedReceive checked;         // may receive a marker (peer_pt2pt.h)
  MPI_Count checked_bytes = 0;    // what MPI_Request_get_status delivered, for the Wait
  int checked_error = MPI_SUCCESS;
  std::function<int()> on_start;  // before every MPI_Start (a persistent send's envelope or offer)
  std::uint64_t posted = 0;       // a checked receive's number in the order receives were posted
};

using RequestTable = std::unordered_map<MPI_Request, StagedRequest>;

std::mutex requests_mutex;
RequestTable& staged_requests() {
  static auto* table = new RequestTable;
  return *table;
}

// Checked receives are numbered in the order they were posted (or
// started). A receive that got a marker (an empty message) takes the first
// envelope of its sender's queue for the communicator and tag, and the
// real MPI matches receives to messages in the order they were posted: so
// such receives must take their envelopes in that order too, whatever
// order the application completes them in. Receives of data never look.
std::uint64_t receives_posted = 0;

// Call with requests_mutex held.
void note_posted_locked(StagedRequest& staged) { staged.posted = ++receives_posted; }

// Lets completion calls skip the table while nothing is staged.
std::atomic<int> outstanding{0};
// Requests freed by the user while active: their staging stays alive, since
// the real MPI may still be using it, until MPI_Finalize.
std::vector<std::unique_ptr<Staging>>& orphans() {
  static auto* list = new std::vector<std::unique_ptr<Staging>>;
  return *list;
}

int deliver_early(MPI_Request request, StagedRequest& staged, int* flag, MPI_Status* status);
int finish_entry(StagedRequest& staged, MPI_Status& status);

// The requests of one completion call (or MPI_Request_free). Their entries
// leave the table before the real MPI completes them: it frees a completed
// request's handle, and under MPI_THREAD_MULTIPLE another thread's next
// request may get that handle, and an entry of its own, before this call
// has finished the old one. Each request the real call completed is
// finished once from its entry; the others go back to the table while the
// application still holds their handles (a persistent request's stays).
//
// While it runs, a receive among them that takes a marker's envelope first
// finishes those posted before it (deliver_receives_posted_before): in
// whatever order the call lists them, receives take envelopes in the order
// they were posted. Receives of data never look.
class CallFinish {
 public:
  // requests[0..n): the application's array, which the real call updates.
  CallFinish(int n, MPI_Request* requests)
      : handles_(n), entries_(n), statuses_(n), finished_(n), results_(n), requests_(requests), n_(n),
        enclosing_(current_) {
    std::lock_guard<std::mutex> lock(requests_mutex);
    for (int i = 0; i < n; ++i) {
      handles_[i] = requests[i];
      statuses_[i] = nullptr;
      finished_[i] = 0;
      results_[i] = MPI_SUCCESS;
      if (requests[i] != MPI_REQUEST_NULL) entries_[i] = staged_requests().extract(requests[i]);
    }
    current_ = this;
  }
  ~CallFinish() {
    current_ = enclosing_;
    std::vector<std::unique_ptr<Staging>> released;
    std::lock_guard<std::mutex> lock(requests_mutex);
    for (int i = 0; i < n_; ++i) {
      if (entries_[i].empty()) continue;
      if (requests_[i] == handles_[i]) {
        staged_requests().insert(std::move(entries_[i]));
        continue;
      }
      // Released by the real MPI without being finished: failed, or freed.
      StagedRequest& staged = entries_[i].mapped();
      // The real MPI may still be using a freed active request's host copies.
      if (staged.active && !staged.delivered && staged.staging) {
        orphans().push_back(std::move(staged.staging));
      } else {
        released.push_back(std::move(staged.staging));
      }
      outstanding.fetch_sub(1, std::memory_order_release);
    }
  }
  CallFinish(const CallFinish&) = delete;
  CallFinish& operator=(const CallFinish&) = delete;

  static CallFinish* current() { return current_; }

  // After the real call: request i completed with *status.
  void completed(int i, MPI_Status* status) { statuses_[i] = status; }
  // After the real call: request i completed with an error; nothing to finish.
  void failed(int i) {
    if (!entries_[i].empty()) entries_[i].mapped().active = false;
  }

  // Finishes completed request i, once; its completion's error class.
  int finish(int i) {
    if (finished_[i] || !statuses_[i]) return results_[i];
    finished_[i] = 1;
    if (entries_[i].empty()) return MPI_SUCCESS;
    StagedRequest& staged = entries_[i].mapped();
    results_[i] = finish_entry(staged, *statuses_[i]);
    if (!staged.persistent) {
      entries_[i] = RequestTable::node_type();
      outstanding.fetch_sub(1, std::memory_order_release);
    }
    return results_[i];
  }

  // The checked receives among them posted before posted, in posting
  // order: finished if completed, else delivered if complete by now.
  void finish_posted_before(std::uint64_t posted) {
    std::vector<std::pair<std::uint64_t, int>> earlier;
    for (int i = 0; i < n_; ++i) {
      if (finished_[i] || entries_[i].empty()) continue;
      const StagedRequest& staged = entries_[i].mapped();
      if (staged.posted && staged.posted < posted && staged.active) earlier.emplace_back(staged.posted, i);
    }
    std::sort(earlier.begin(), earlier.end());
    for (const auto& [place, i] : earlier) {
      if (statuses_[i]) {
        finish(i);
      } else if (!entries_[i].empty()) {
        int done = 0;
        deliver_early(handles_[i], entries_[i].mapped(), &done, MPI_STATUS_IGNORE);
      }
    }
  }

 private:
  CallArray<MPI_Request> handles_;
  CallArray<RequestTable::node_type> entries_;
  CallArray<MPI_Status*> statuses_;  // null: not completed
  CallArray<char> finished_;
  CallArray<int> results_;
  const MPI_Request* requests_;
  int n_;
  CallFinish* enclosing_;
  static thread_local CallFinish* current_;
};
thread_local CallFinish* CallFinish::current_ = nullptr;

// deliver_early of request's entry in the table; of a request without
// one, just MPI_Request_get_status.
int deliver_early(MPI_Request request, int* flag, MPI_Status* status) {
  StagedRequest* staged = nullptr;
  {
    std::lock_guard<std::mutex> lock(requests_mutex);
    auto it = staged_requests().find(request);
    // Only this thread completes or frees it: the element stays where it is.
    if (it != staged_requests().end()) staged = &it->second;
  }
  if (staged) return deliver_early(request, *staged, flag, status);
  peer::settle_offers(1, &request, false);
  return PMPI_Request_get_status(request, flag, status);
}

}  // namespace

void deliver_receives_posted_before(std::uint64_t posted) {
  if (CallFinish* call = CallFinish::current()) call->finish_posted_before(posted);
  int provided = MPI_THREAD_SINGLE;
  PMPI_Query_thread(&provided);
  if (provided == MPI_THREAD_MULTIPLE) return;
  // The others: still active, their handles still the application's.
  std::vector<std::pair<std::uint64_t, MPI_Request>> earlier;
  {
    std::lock_guard<std::mutex> lock(requests_mutex);
    for (const auto& [request, staged] : staged_requests())
      if (staged.posted && staged.posted < posted && staged.active && !staged.delivered)
        earlier.emplace_back(staged.posted, request);
  }
  std::sort(earlier.begin(), earlier.end());
  for (const auto& [place, request] : earlier) {
    int done = 0;
    deliver_early(request, &done, MPI_STATUS_IGNORE);
  }
}

namespace {

bool is_staged(MPI_Request request) {
  if (outstanding.load(std::memory_order_acquire) == 0 || request == MPI_REQUEST_NULL) return false;
  std::lock_guard<std::mutex> lock(requests_mutex);
  return staged_requests().count(request) != 0;
}

// Whether a persistent collective (nonblocking_engine.h) is among requests.
bool any_persistent(int count, const MPI_Request* requests) {
  if (!nbc::persistent_live() || !requests) return false;
  for (int i = 0; i < count; ++i)
    if (nbc::is_persistent(requests[i])) return true;
  return false;
}

bool any_staged(int count, const MPI_Request* requests) {
  if (outstanding.load(std::memory_order_acquire) == 0 || !requests || count < 0) return false;
  std::lock_guard<std::mutex> lock(requests_mutex);
  for (int i = 0; i < count; ++i)
    if (requests[i] != MPI_REQUEST_NULL && staged_requests().count(requests[i]) != 0) return true;
  return false;
}

// The bytes a status counts.
MPI_Count count_of(const MPI_Status& status) {
  MPI_Count bytes = 0;
  PMPI_Get_elements_x(&status, MPI_BYTE, &bytes);
  return bytes;
}

// Copies the outputs of a request that completed with status to the user's
// buffers; a cancelled one leaves them alone, since nothing arrived.
int deliver(Staging& staging, bool receive, const MPI_Status& status) {
  int cancelled = 0;
  PMPI_Test_cancelled(&status, &cancelled);
  if (cancelled) return MPI_SUCCESS;
  if (receive) staging.received(status);
  return staging.finish(MPI_SUCCESS);
}

// The request of staged completed with status in a Wait or Test call:
// deliver its outputs unless MPI_Request_get_status did; a persistent one
// turns inactive. An inactive request has nothing to finish. Returns the
// completion's error class.
int finish_entry(StagedRequest& staged, MPI_Status& status) {
  if (!staged.active) return MPI_SUCCESS;
  if (staged.persistent) staged.active = false;
  if (staged.complete) return staged.complete();
  const CheckedReceive& checked = staged.checked;
  Staging* staging = staged.delivered ? nullptr : staged.staging.get();
  int result = staging ? deliver(*staging, staged.receive, status) : MPI_SUCCESS;
  if (result != MPI_SUCCESS || !checked.on()) return result;
  if (staged.delivered) {
    // MPI_Request_get_status received the marker's data already.
    PMPI_Status_set_elements_x(&status, MPI_BYTE, staged.checked_bytes);
    if (staged.checked_error != MPI_SUCCESS) status.MPI_ERROR = staged.checked_error;
    return staged.checked_error;
  }
  result = peer::after_receive(checked.comm, checked.buf, checked.count, checked.type, &status, staged.posted);
  return result == MPI_SUCCESS ? result : raise_error(checked.comm, result);
}

// MPI_Request_get_status of the request of staged: when it reports the
// request complete, its outputs are delivered now, once.
int deliver_early(MPI_Request request, StagedRequest& staged, int* flag, MPI_Status* status) {
  peer::settle_offers(1, &request, false);
  MPI_Status local;
  MPI_Status* st = status == MPI_STATUS_IGNORE ? &local : status;
  const int result = PMPI_Request_get_status(request, flag, st);
  if (result != MPI_SUCCESS || !*flag || !staged.active || staged.delivered) return result;
  staged.delivered = true;
  if (staged.complete) return staged.complete();
  const CheckedReceive& checked = staged.checked;
  int delivered = staged.staging ? deliver(*staged.staging, staged.receive, *st) : MPI_SUCCESS;
  if (delivered != MPI_SUCCESS || !checked.on()) return delivered;
  delivered = peer::after_receive(checked.comm, checked.buf, checked.count, checked.type, st, staged.posted);
  staged.checked_bytes = count_of(*st);
  staged.checked_error = delivered;
  return delivered == MPI_SUCCESS ? delivered : raise_error(checked.comm, delivered);
}

}  // namespace

int end_staged(Staging& staging, int mpi_result, MPI_Request* request, Lifetime lifetime, bool receive,
               const CheckedReceive& checked) {
  if (!request) return staging.finish(mpi_result);
  if (mpi_result != MPI_SUCCESS) return mpi_result;
  if (!staging.staged_any()) {
    if (checked.on()) track_checked_receive(*request, checked, lifetime);
    return mpi_result;
  }
  // Done already, as Open MPI's collectives on one rank are: it hands every
  // such call one shared, completed request, so the outputs go back now.
  int done = 0;
  MPI_Status status;
  // A checked receive is finished at its completion (never one from
  // MPI_PROC_NULL, whose request Open MPI shares among all such receives).
  if (lifetime == Lifetime::kOnce && !checked.on() &&
      PMPI_Request_get_status(*request, &done, &status) == MPI_SUCCESS && done)
    return deliver(staging, receive, status);
  StagedRequest staged;
  staged.staging = std::make_unique<Staging>(std::move(staging));
  staged.receive = receive;
  staged.checked = checked;
  staged.persistent = lifetime == Lifetime::kPersistent;
  staged.active = !staged.persistent;
  std::lock_guard<std::mutex> lock(requests_mutex);
  StagedRequest& entry = staged_requests()[*request] = std::move(staged);
  if (entry.active && checked.on()) note_posted_locked(entry);
  outstanding.fetch_add(1, std::memory_order_release);
  return mpi_result;
}

void track_request(MPI_Request request, std::function<int()> complete) {
  StagedRequest tracked;
  tracked.complete = std::move(complete);
  std::lock_guard<std::mutex> lock(requests_mutex);
  staged_requests()[request] = std::move(tracked);
  outstanding.fetch_add(1, std::memory_order_release);
}

void track_uncancellable(MPI_Request request) {
  std::lock_guard<std::mutex> lock(requests_mutex);
  auto it = staged_requests().find(request);
  if (it != staged_requests().end()) {
    it->second.uncancellable = true;
    return;
  }
  StagedRequest tracked;
  tracked.uncancellable = true;
  staged_requests()[request] = std::move(tracked);
  outstanding.fetch_add(1, std::memory_order_release);
}

void track_checked_receive(MPI_Request request, const CheckedReceive& checked, Lifetime lifetime) {
  StagedRequest tracked;
  tracked.receive = true;
  tracked.checked = checked;
  tracked.persistent = lifetime == Lifetime::kPersistent;
  tracked.active = !tracked.persistent;
  std::lock_guard<std::mutex> lock(requests_mutex);
  StagedRequest& entry = staged_requests()[request] = std::move(tracked);
  if (entry.active) note_posted_locked(entry);
  outstanding.fetch_add(1, std::memory_order_release);
}

void track_persistent_send(MPI_Request request, std::function<int()> on_start, std::function<int()> complete) {
  StagedRequest tracked;
  tracked.persistent = true;
  tracked.active = false;
  tracked.on_start = std::move(on_start);
  tracked.complete = std::move(complete);
  tracked.uncancellable = true;
  std::lock_guard<std::mutex> lock(requests_mutex);
  staged_requests()[request] = std::move(tracked);
  outstanding.fetch_add(1, std::memory_order_release);
}

void track_empty_persistent_send(MPI_Request request, std::function<int()> on_start) {
  StagedRequest tracked;
  tracked.persistent = true;
  tracked.active = false;
  tracked.on_start = std::move(on_start);
  tracked.uncancellable = true;
  std::lock_guard<std::mutex> lock(requests_mutex);
  staged_requests()[request] = std::move(tracked);
  outstanding.fetch_add(1, std::memory_order_release);
}

namespace {

// A persistent send of an empty message to a peer of this machine sends its
// envelope at every MPI_Start.
int announce_at_every_start(int result, MPI_Request* request, int count, MPI_Datatype type, int dest, int tag,
                            MPI_Comm comm) {
  if (result != MPI_SUCCESS || !peer::active() || !peer::checks_receives(comm)) return result;
  int size = 0;
  if (PMPI_Type_size(type, &size) != MPI_SUCCESS || static_cast<std::int64_t>(count) * size != 0) return result;
  track_empty_persistent_send(*request, [=] { return peer::before_send(count, type, dest, tag, comm); });
  return result;
}

using PmpiSendInit = int (*)(const void*, int, MPI_Datatype, int, int, MPI_Comm, MPI_Request*);

// MPI_Send_init and its kin: through peer memory where the send can go
// there (peer::send_init), else staged by the real call pmpi_init.
int persistent_send(FunctionId id, peer::Mode mode, PmpiSendInit pmpi_init, const void* buf, int count,
                    MPI_Datatype datatype, int dest, int tag, MPI_Comm comm, MPI_Request* request) {
  bool handled = false;
  const int through_peer =
      peer::active() ? peer::send_init(id, mode, buf, count, datatype, dest, tag, comm, request, &handled) : MPI_SUCCESS;
  if (handled) {
    count_bytes(id, count, datatype);
    return through_peer;
  }
  const int result = post_staged(id, const_cast<void*>(buf), count, datatype, comm, request, false,
                                 Lifetime::kPersistent,
                                 [&](void* b) { return pmpi_init(b, count, datatype, dest, tag, comm, request); });
  return announce_at_every_start(result, request, count, datatype, dest, tag, comm);
}

}  // namespace

int handle_Isend(const void* buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm,
                 MPI_Request* request) {
  return send_through(FunctionId::kIsend, peer::Mode::kStandard, buf, count, datatype, dest, tag, comm, request, [&] {
    return post_staged(FunctionId::kIsend, const_cast<void*>(buf), count, datatype, comm, request, false,
                       Lifetime::kOnce,
                       [&](void* b) { return PMPI_Isend(b, count, datatype, dest, tag, comm, request); });
  });
}

int handle_Issend(const void* buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm,
                  MPI_Request* request) {
  return send_through(FunctionId::kIssend, peer::Mode::kSynchronous, buf, count, datatype, dest, tag, comm, request, [&] {
    return post_staged(FunctionId::kIssend, const_cast<void*>(buf), count, datatype, comm, request, false,
                       Lifetime::kOnce,
                       [&](void* b) { return PMPI_Issend(b, count, datatype, dest, tag, comm, request); });
  });
}

int handle_Ibsend(const void* buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm,
                  MPI_Request* request) {
  return send_through(FunctionId::kIbsend, peer::Mode::kNone, buf, count, datatype, dest, tag, comm, request, [&] {
    return post_staged(FunctionId::kIbsend, const_cast<void*>(buf), count, datatype, comm, request, false,
                       Lifetime::kOnce,
                       [&](void* b) { return PMPI_Ibsend(b, count, datatype, dest, tag, comm, request); });
  });
}

int handle_Irsend(const void* buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm,
                  MPI_Request* request) {
  return send_through(FunctionId::kIrsend, peer::Mode::kReady, buf, count, datatype, dest, tag, comm, request, [&] {
    return post_staged(FunctionId::kIrsend, const_cast<void*>(buf), count, datatype, comm, request, false,
                       Lifetime::kOnce,
                       [&](void* b) { return PMPI_Irsend(b, count, datatype, dest, tag, comm, request); });
  });
}

int handle_Irecv(void* buf, int count, MPI_Datatype datatype, int source, int tag, MPI_Comm comm,
                 MPI_Request* request) {
  return post_staged(
      FunctionId::kIrecv, buf, count, datatype, comm, request, true, Lifetime::kOnce,
      [&](void* b) { return PMPI_Irecv(b, count, datatype, source, tag, comm, request); }, source != MPI_PROC_NULL);
}

int handle_Send_init(const void* buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm,
                     MPI_Request* request) {
  return persistent_send(FunctionId::kSend_init, peer::Mode::kStandard, PMPI_Send_init, buf, count, datatype, dest,
                         tag, comm, request);
}

int handle_Ssend_init(const void* buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm,
                      MPI_Request* request) {
  return persistent_send(FunctionId::kSsend_init, peer::Mode::kSynchronous, PMPI_Ssend_init, buf, count, datatype,
                         dest, tag, comm, request);
}

int handle_Bsend_init(const void* buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm,
                      MPI_Request* request) {
  return persistent_send(FunctionId::kBsend_init, peer::Mode::kNone, PMPI_Bsend_init, buf, count, datatype, dest,
                         tag, comm, request);
}

int handle_Rsend_init(const void* buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm,
                      MPI_Request* request) {
  return persistent_send(FunctionId::kRsend_init, peer::Mode::kReady, PMPI_Rsend_init, buf, count, datatype, dest,
                         tag, comm, request);
}

int handle_Recv_init(void* buf, int count, MPI_Datatype datatype, int source, int tag, MPI_Comm comm,
                     MPI_Request* request) {
  return post_staged(
      FunctionId::kRecv_init, buf, count, datatype, comm, request, true, Lifetime::kPersistent,
      [&](void* b) { return PMPI_Recv_init(b, count, datatype, source, tag, comm, request); },
      source != MPI_PROC_NULL);
}

namespace {

// Before MPI_Start(all): refreshes the staging of each inactive staged
// request among requests, and notes its index. An active one is left for
// the real MPI to reject.
int restart_staged(int count, const MPI_Request* requests, std::vector<int>* restarted) {
  for (int i = 0; i < count; ++i) {
    Staging* staging = nullptr;
    std::function<int()> on_start;
    {
      std::lock_guard<std::mutex> lock(requests_mutex);
      auto it = staged_requests().find(requests[i]);
      if (it == staged_requests().end() || it->second.active) continue;
      staging = it->second.staging.get();
      on_start = it->second.on_start;
    }
    const int result = staging ? staging->restart() : on_start ? on_start() : MPI_SUCCESS;
    if (result != MPI_SUCCESS) return result;
    restarted->push_back(i);
  }
  return MPI_SUCCESS;
}

// Only once the real MPI started them: a request that failed to start must
// not copy anything back at its next (empty) completion. Open MPI may hand
// back a new handle for a persistent request whose previous operation is
// still in flight (a buffered send), so the entry follows the handle.
void mark_started(const std::vector<MPI_Request>& before, const MPI_Request* after,
                  const std::vector<int>& restarted) {
  std::lock_guard<std::mutex> lock(requests_mutex);
  for (int i : restarted) {
    auto it = staged_requests().find(before[i]);
    if (it == staged_requests().end()) continue;
    it->second.active = true;
    it->second.delivered = false;
    StagedRequest* entry = &it->second;
    if (after[i] != before[i]) {
      StagedRequest moved = std::move(it->second);
      staged_requests().erase(it);
      entry = &(staged_requests()[after[i]] = std::move(moved));
    }
    if (entry->checked.on()) note_posted_locked(*entry);
  }
}

template <typename PmpiCall>
int start_staged(int count, MPI_Request* requests, PmpiCall pmpi) {
  const std::vector<MPI_Request> before(requests, requests + count);
  std::vector<int> restarted;
  const int restaged = restart_staged(count, requests, &restarted);
  if (restaged != MPI_SUCCESS) return restaged;
  const int result = pmpi();
  if (result == MPI_SUCCESS) mark_started(before, requests, restarted);
  return result;
}

}  // namespace

int handle_Start(MPI_Request* request) {
  if (request && nbc::is_persistent(*request)) return nbc::start_persistent(request);
  if (!request || !is_staged(*request)) return PMPI_Start(request);
  return start_staged(1, request, [&] { return PMPI_Start(request); });
}

int handle_Startall(int count, MPI_Request* requests) {
  if (any_persistent(count, requests) || peer::any_persistent_send(count, requests)) {
    // Persistent collectives start one by one, each as its nonblocking call;
    // so do the requests beside a persistent send through peer memory,
    // whose marker goes in its MPI_Start: messages keep the order of the
    // array, as they would in the real MPI_Startall.
    for (int i = 0; i < count; ++i) {
      const int result = handle_Start(&requests[i]);
      if (result != MPI_SUCCESS) return result;
    }
    return MPI_SUCCESS;
  }
  if (!any_staged(count, requests)) return PMPI_Startall(count, requests);
  return start_staged(count, requests, [&] { return PMPI_Startall(count, requests); });
}

// The nonblocking collectives on the engine (nonblocking_engine.h) hold
// generalized requests, which the real MPI completes only once Ferry has
// called MPI_Grequest_complete, and a started persistent collective's
// handle must not complete before the call behind it: each completion call
// settles them first.
int handle_Wait(MPI_Request* request, MPI_Status* status) {
  nbc::progress();
  if (request && nbc::is_persistent(*request)) {
    bool running = false;
    const int error = nbc::settle_persistent(1, request, true, &running);
    const int result = PMPI_Wait(request, status);
    return result != MPI_SUCCESS ? result : error;
  }
  if (request && nbc::owns(*request)) {
    nbc::settle(1, request, true);
    return PMPI_Wait(request, status);
  }
  if (!request || !is_staged(*request)) return PMPI_Wait(request, status);
  peer::settle_offers(1, request, true);
  CallFinish call(1, request);
  MPI_Status local;
  MPI_Status* st = status == MPI_STATUS_IGNORE ? &local : status;
  const int result = PMPI_Wait(request, st);
  if (result != MPI_SUCCESS) return result;
  call.completed(0, st);
  return call.finish(0);
}

int handle_Test(MPI_Request* request, int* flag, MPI_Status* status) {
  nbc::progress();
  if (request && nbc::is_persistent(*request)) {
    bool running = false;
    const int error = nbc::settle_persistent(1, request, false, &running);
    if (running) {
      *flag = 0;
      return MPI_SUCCESS;
    }
    const int result = PMPI_Test(request, flag, status);
    return result != MPI_SUCCESS ? result : error;
  }
  if (request && nbc::owns(*request)) {
    nbc::settle(1, request, false);
    return PMPI_Test(request, flag, status);
  }
  if (!request || !is_staged(*request)) return PMPI_Test(request, flag, status);
  peer::settle_offers(1, request, false);
  CallFinish call(1, request);
  MPI_Status local;
  MPI_Status* st = status == MPI_STATUS_IGNORE ? &local : status;
  const int result = PMPI_Test(request, flag, st);
  if (result != MPI_SUCCESS || !*flag) return result;
  call.completed(0, st);
  return call.finish(0);
}

namespace {

// Where the real MPI writes an array completion call's statuses: the
// user's array, or one of the call's own when the user ignores them.
class CallStatuses {
 public:
  CallStatuses(int count, MPI_Status* user) : local_(user == MPI_STATUSES_IGNORE ? count : 0) {
    statuses_ = user == MPI_STATUSES_IGNORE ? local_.data() : user;
  }
  MPI_Status* data() { return statuses_; }

 private:
  CallArray<MPI_Status> local_;
  MPI_Status* statuses_;
};

// After an all-or-none call returned result. MPI_ERR_IN_STATUS: only the
// requests whose own status says success completed; MPI_ERR_PENDING's are
// still active, and the others failed.
int finish_all(CallFinish& call, MPI_Status* statuses, int count, int result) {
  if (result != MPI_SUCCESS && result != MPI_ERR_IN_STATUS) return result;
  for (int i = 0; i < count; ++i) {
    const int error = result == MPI_ERR_IN_STATUS ? statuses[i].MPI_ERROR : MPI_SUCCESS;
    if (error == MPI_SUCCESS) {
      call.completed(i, &statuses[i]);
    } else if (error != MPI_ERR_PENDING) {
      call.failed(i);
    }
  }
  int first_error = MPI_SUCCESS;
  for (int i = 0; i < count; ++i) {
    const int finished = call.finish(i);
    if (first_error == MPI_SUCCESS) first_error = finished;
  }
  return result != MPI_SUCCESS ? result : first_error;
}

int waitall_now(int count, MPI_Request* requests, MPI_Status* statuses) {
  nbc::progress();
  bool running = false;
  const int persistent_error = nbc::settle_persistent(count, requests, true, &running);
  if (nbc::owns_any(count, requests)) nbc::settle(count, requests, true);
  const int result = [&] {
    if (!any_staged(count, requests)) return PMPI_Waitall(count, requests, statuses);
    peer::settle_offers(count, requests, true);
    CallFinish call(count, requests);
    CallStatuses st(count, statuses);
    return finish_all(call, st.data(), count, PMPI_Waitall(count, requests, st.data()));
  }();
  return result != MPI_SUCCESS ? result : persistent_error;
}

// Nonblocking sends' offers (peer_pt2pt.h) last: a receive among the other
// requests may be what its sender's offer waits for, as this rank's offers
// wait for their receives, so those complete first (receives claim the
// offers they match); then this rank's offers are settled and completed.
int waitall_offers_last(int count, MPI_Request* requests, MPI_Status* statuses) {
  CallArray<MPI_Request> others(count), offers(count);
  CallArray<char> offered(count);
  CallArray<MPI_Status> other_statuses(count), offer_statuses(count);
  for (int i = 0; i < count; ++i) {
    offered[i] = peer::is_offer(requests[i]);
    others[i] = offered[i] ? MPI_REQUEST_NULL : requests[i];
    offers[i] = offered[i] ? requests[i] : MPI_REQUEST_NULL;
  }
  const int others_result = waitall_now(count, others.data(), other_statuses.data());
  for (int i = 0; i < count; ++i)
    if (!offered[i]) requests[i] = others[i];
  if (others_result != MPI_SUCCESS && others_result != MPI_ERR_IN_STATUS) return others_result;
  const bool others_failed = others_result == MPI_ERR_IN_STATUS;
  // After a failure the offers are still pending, as MPI_ERR_IN_STATUS says.
  const int offers_result = others_failed ? MPI_ERR_IN_STATUS : waitall_now(count, offers.data(), offer_statuses.data());
  if (offers_result != MPI_SUCCESS && offers_result != MPI_ERR_IN_STATUS) return offers_result;
  for (int i = 0; i < count; ++i) {
    if (offered[i] && !others_failed) requests[i] = offers[i];
    if (statuses == MPI_STATUSES_IGNORE) continue;
    statuses[i] = offered[i] ? offer_statuses[i] : other_statuses[i];
    if (offered[i] && others_failed) statuses[i].MPI_ERROR = MPI_ERR_PENDING;
    // Each half's statuses carry their errors only when that half failed.
    const bool half_failed = offered[i] ? offers_result != MPI_SUCCESS : others_failed;
    if (offers_result == MPI_ERR_IN_STATUS && !half_failed) statuses[i].MPI_ERROR = MPI_SUCCESS;
  }
  return offers_result;
}

}  // namespace

int handle_Waitall(int count, MPI_Request* requests, MPI_Status* statuses) {
  if (peer::any_offer(count, requests)) return waitall_offers_last(count, requests, statuses);
  return waitall_now(count, requests, statuses);
}

int handle_Testall(int count, MPI_Request* requests, int* flag, MPI_Status* statuses) {
  nbc::progress();
  // All or none complete here, so a receive among them that a peer's offer
  // waits for delivers as soon as it is complete, as MPI_Request_get_status
  // would: else both ranks of an exchange would wait out their offers. In
  // order, up to the first one still pending: receives take their
  // messages' envelopes in the order they matched.
  if (peer::any_offer(count, requests)) {
    for (int i = 0; i < count; ++i) {
      if (!is_staged(requests[i]) || peer::is_offer(requests[i])) continue;
      int done = 0;
      if (deliver_early(requests[i], &done, MPI_STATUS_IGNORE) != MPI_SUCCESS || !done) break;
    }
  }
  // A persistent collective still running: not all are complete.
  bool running = false;
  const int persistent_error = nbc::settle_persistent(count, requests, false, &running);
  if (running || persistent_error != MPI_SUCCESS) {
    *flag = 0;
    return persistent_error;
  }
  if (nbc::owns_any(count, requests)) nbc::settle(count, requests, false);
  if (!any_staged(count, requests)) return PMPI_Testall(count, requests, flag, statuses);
  peer::settle_offers(count, requests, false);
  CallFinish call(count, requests);
  CallStatuses st(count, statuses);
  const int result = PMPI_Testall(count, requests, flag, st.data());
  return *flag || result == MPI_ERR_IN_STATUS ? finish_all(call, st.data(), count, result) : result;
}

int handle_Waitany(int count, MPI_Request* requests, int* index, MPI_Status* status) {
  nbc::progress();
  // With work of Ferry's among them, whichever finishes first: by testing.
  if (nbc::owns_any(count, requests) || any_persistent(count, requests) || peer::any_offer(count, requests)) {
    for (int flag = 0;;) {
      const int result = handle_Testany(count, requests, index, &flag, status);
      if (result != MPI_SUCCESS || flag) return result;
      std::this_thread::yield();
    }
  }
  if (!any_staged(count, requests)) return PMPI_Waitany(count, requests, index, status);
  CallFinish call(count, requests);
  MPI_Status local;
  MPI_Status* st = status == MPI_STATUS_IGNORE ? &local : status;
  const int result = PMPI_Waitany(count, requests, index, st);
  if (result != MPI_SUCCESS || *index == MPI_UNDEFINED) return result;
  call.completed(*index, st);
  return call.finish(*index);
}

namespace {

int testany_now(int count, MPI_Request* requests, int* index, int* flag, MPI_Status* status) {
  if (nbc::owns_any(count, requests)) nbc::settle(count, requests, false);
  if (!any_staged(count, requests)) return PMPI_Testany(count, requests, index, flag, status);
  peer::settle_offers(count, requests, false);
  CallFinish call(count, requests);
  MPI_Status local;
  MPI_Status* st = status == MPI_STATUS_IGNORE ? &local : status;
  const int result = PMPI_Testany(count, requests, index, flag, st);
  if (result != MPI_SUCCESS || !*flag || *index == MPI_UNDEFINED) return result;
  call.completed(*index, st);
  return call.finish(*index);
}

}  // namespace

// Persistent collectives still running are held back from the real MPI,
// which would report them complete.
int handle_Testany(int count, MPI_Request* requests, int* index, int* flag, MPI_Status* status) {
  nbc::progress();
  std::vector<std::pair<int, MPI_Request>> held;
  nbc::hold_running(count, requests, &held);
  const int result = testany_now(count, requests, index, flag, status);
  for (const auto& [i, handle] : held) requests[i] = handle;
  if (!held.empty() && *flag && *index == MPI_UNDEFINED) *flag = 0;
  return result;
}

namespace {

template <typename PmpiCall>
int some_like(int incount, MPI_Request* requests, int* outcount, int* indices, MPI_Status* statuses,
              PmpiCall pmpi) {
  CallFinish call(incount, requests);
  // Statuses are filled for the completed requests only, in completion order.
  CallStatuses statuses_of(incount, statuses);
  MPI_Status* st = statuses_of.data();
  const int result = pmpi(st);
  if ((result != MPI_SUCCESS && result != MPI_ERR_IN_STATUS) || *outcount == MPI_UNDEFINED) return result;
  // By position k in indices and st.
  for (int k = 0; k < *outcount; ++k) {
    if (result != MPI_ERR_IN_STATUS || st[k].MPI_ERROR == MPI_SUCCESS) {
      call.completed(indices[k], &st[k]);
    } else {
      call.failed(indices[k]);
    }
  }
  int first_error = MPI_SUCCESS;
  for (int k = 0; k < *outcount; ++k) {
    const int finished = call.finish(indices[k]);
    if (first_error == MPI_SUCCESS) first_error = finished;
  }
  return result != MPI_SUCCESS ? result : first_error;
}

}  // namespace

int handle_Waitsome(int incount, MPI_Request* requests, int* outcount, int* indices, MPI_Status* statuses) {
  nbc::progress();
  if (nbc::owns_any(incount, requests) || any_persistent(incount, requests) || peer::any_offer(incount, requests)) {
    for (;;) {
      const int result = handle_Testsome(incount, requests, outcount, indices, statuses);
      if (result != MPI_SUCCESS || *outcount != 0) return result;
      std::this_thread::yield();
    }
  }
  if (!any_staged(incount, requests)) return PMPI_Waitsome(incount, requests, outcount, indices, statuses);
  return some_like(incount, requests, outcount, indices, statuses,
                   [&](MPI_Status* st) { return PMPI_Waitsome(incount, requests, outcount, indices, st); });
}

namespace {

int testsome_now(int incount, MPI_Request* requests, int* outcount, int* indices, MPI_Status* statuses) {
  if (nbc::owns_any(incount, requests)) nbc::settle(incount, requests, false);
  if (!any_staged(incount, requests)) return PMPI_Testsome(incount, requests, outcount, indices, statuses);
  peer::settle_offers(incount, requests, false);
  return some_like(incount, requests, outcount, indices, statuses,
                   [&](MPI_Status* st) { return PMPI_Testsome(incount, requests, outcount, indices, st); });
}

}  // namespace

int handle_Testsome(int incount, MPI_Request* requests, int* outcount, int* indices, MPI_Status* statuses) {
  nbc::progress();
  std::vector<std::pair<int, MPI_Request>> held;
  nbc::hold_running(incount, requests, &held);
  const int result = testsome_now(incount, requests, outcount, indices, statuses);
  for (const auto& [i, handle] : held) requests[i] = handle;
  if (!held.empty() && *outcount == MPI_UNDEFINED) *outcount = 0;
  return result;
}

int handle_Request_free(MPI_Request* request) {
  if (request && nbc::is_persistent(*request)) return nbc::free_persistent(request);
  if (request && nbc::owns(*request)) return nbc::refuse_free(*request);
  if (!request || !is_staged(*request)) return PMPI_Request_free(request);
  const int offered = peer::free_offer(*request);
  // Its entry goes with the handle (an active one's host copies to the orphans).
  CallFinish call(1, request);
  const int result = PMPI_Request_free(request);
  return result != MPI_SUCCESS ? result : offered;
}

// Leaves the request alone, but when it reports the request complete the
// outputs are delivered now, once: a program may read them before it calls
// the Wait or Test that frees the request.
int handle_Request_get_status(MPI_Request request, int* flag, MPI_Status* status) {
  if (nbc::is_persistent(request)) {
    bool running = false;
    const int error = nbc::settle_persistent(1, &request, false, &running);
    if (running || error != MPI_SUCCESS) {
      *flag = 0;
      return error;
    }
    return PMPI_Request_get_status(request, flag, status);
  }
  if (nbc::owns(request)) {
    nbc::settle(1, &request, false);
    return PMPI_Request_get_status(request, flag, status);
  }
  if (!is_staged(request)) return PMPI_Request_get_status(request, flag, status);
  return deliver_early(request, flag, status);
}

// A send with an envelope is past cancelling once it is posted (the
// envelope would be left over for a later message): MPI lets a cancel of a
// send fail, and the send then completes as usual.
int handle_Cancel(MPI_Request* request) {
  if (request && is_staged(*request)) {
    std::lock_guard<std::mutex> lock(requests_mutex);
    auto it = staged_requests().find(*request);
    if (it != staged_requests().end() && it->second.uncancellable) return MPI_SUCCESS;
  }
  return PMPI_Cancel(request);
}


void release_staged_requests() {
  std::lock_guard<std::mutex> lock(requests_mutex);
  orphans().clear();
  staged_requests().clear();
  outstanding.store(0, std::memory_order_release);
}

}  // namespace ferry::shim

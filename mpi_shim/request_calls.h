// What the calls that complete, start and free requests use of the
// registry (request_registry.h): the lookup, the settling of a call's
// requests, and CallFinish, which carries their objects across the real
// MPI's call.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "mpi_shim/request_registry.h"

namespace ferry::shim {

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

// Runs what add_completion_progress registered.
void run_completion_progress();

// request's object; nullptr when it has none (one load while nothing is
// tracked). Only the thread that completes or frees the request may use it.
TrackedRequest* tracked(MPI_Request request);
bool any_tracked(int count, const MPI_Request* requests);
// Whether (object->*asks)(handle) holds for one of requests.
using RequestQuestion = bool (TrackedRequest::*)(MPI_Request) const;
bool any_tracked(int count, const MPI_Request* requests, RequestQuestion asks);

// Settles the tracked requests among requests[0..count) (the others are
// left alone): each looks once, then with wait each waits in turn. Returns
// the first error; running says whether any is still running (only
// without wait).
Settled settle_requests(int count, MPI_Request* requests, bool wait);

// MPI_Request_get_status of request through its object: settled once
// first; one still running, or whose work failed, is not complete.
int get_status_of(MPI_Request request, TrackedRequest& object, int* flag, MPI_Status* status);

// MPI_Start(all) of requests through the real call pmpi: each inactive
// tracked one among them restarts first, and is marked started once the
// real MPI started it (its object follows the handle if the real MPI
// changed it). An active one is left for the real MPI to reject.
int start_tracked(int count, MPI_Request* requests, int (*pmpi)(int, MPI_Request*));

using RequestTable = std::unordered_map<MPI_Request, std::unique_ptr<TrackedRequest>>;

// The requests of one completion call (or MPI_Request_free). Their objects
// leave the registry before the real MPI completes them: it frees a
// completed request's handle, and under MPI_THREAD_MULTIPLE another
// thread's next request may get that handle, and an object of its own,
// before this call has finished the old one. Each request the real call
// completed is finished once from its object; the others go back to the
// registry while the application still holds their handles (a persistent
// request's stays).
//
// While it runs, a receive among them that takes a marker's envelope first
// finishes those posted before it (deliver_receives_posted_before): in
// whatever order the call lists them, receives take envelopes in the order
// they were posted. Receives of data never look.
class CallFinish {
 public:
  // requests[0..n): the application's array, which the real call updates.
  CallFinish(int n, MPI_Request* requests);
  ~CallFinish();
  CallFinish(const CallFinish&) = delete;
  CallFinish& operator=(const CallFinish&) = delete;

  static CallFinish* current() { return current_; }

  // Request i's object while the call holds it; nullptr when it has none.
  TrackedRequest* object(int i) { return entries_[i].empty() ? nullptr : entries_[i].mapped().get(); }

  // After the real call: request i completed with *status.
  void completed(int i, MPI_Status* status) { statuses_[i] = status; }
  // After the real call: request i completed with an error; nothing to finish.
  void failed(int i) {
    if (TrackedRequest* t = object(i)) t->fail();
  }

  // Finishes completed request i, once; its completion's error class.
  int finish(int i);

  // The checked receives among them posted before posted, in posting
  // order: finished if completed, else delivered if complete by now.
  void finish_posted_before(std::uint64_t posted);

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

}  // namespace ferry::shim

// The calls that complete, look at, free or cancel requests. A request
// with no object in the registry (request_registry.h) goes to the real MPI
// as it is. One with an object is settled first (Ferry's work behind it
// moved on, or waited for), then completed by the real MPI, then finished
// from its object (its outputs delivered); a request whose work is still
// running after a test is held back from the real MPI, which would report
// it complete.
#include <thread>
#include <utility>
#include <vector>

#include "handlers.h"
#include "mpi_shim/request_calls.h"

namespace ferry::shim {
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

// Finishes the request at index, which the real call completed with
// *status; its completion's error class.
int finish_one(CallFinish& call, int index, MPI_Status* status) {
  call.completed(index, status);
  return call.finish(index);
}

// Holds back from the real MPI the requests among requests[0..count) whose
// work is still running after one look (replaced by MPI_REQUEST_NULL, with
// their indices in *held); their errors are left for a later call.
void hold_running(int count, MPI_Request* requests, std::vector<std::pair<int, MPI_Request>>* held) {
  if (!requests) return;
  for (int i = 0; i < count; ++i) {
    TrackedRequest* t = tracked(requests[i]);
    if (!t || !t->settle(requests[i], false).running) continue;
    held->push_back({i, requests[i]});
    requests[i] = MPI_REQUEST_NULL;
  }
}

}  // namespace

int handle_Wait(MPI_Request* request, MPI_Status* status) {
  run_completion_progress();
  TrackedRequest* t = request ? tracked(*request) : nullptr;
  if (!t) return PMPI_Wait(request, status);
  const Settled settled = t->settle(*request, true);
  CallFinish call(1, request);
  MPI_Status local;
  MPI_Status* st = status == MPI_STATUS_IGNORE ? &local : status;
  const int result = PMPI_Wait(request, st);
  if (result != MPI_SUCCESS) return result;
  const int finished = finish_one(call, 0, st);
  return settled.error != MPI_SUCCESS ? settled.error : finished;
}

int handle_Test(MPI_Request* request, int* flag, MPI_Status* status) {
  run_completion_progress();
  TrackedRequest* t = request ? tracked(*request) : nullptr;
  if (!t) return PMPI_Test(request, flag, status);
  const Settled settled = t->settle(*request, false);
  if (settled.running) {
    *flag = 0;
    return MPI_SUCCESS;
  }
  CallFinish call(1, request);
  MPI_Status local;
  MPI_Status* st = status == MPI_STATUS_IGNORE ? &local : status;
  const int result = PMPI_Test(request, flag, st);
  if (result != MPI_SUCCESS) return result;
  const int finished = *flag ? finish_one(call, 0, st) : MPI_SUCCESS;
  return settled.error != MPI_SUCCESS ? settled.error : finished;
}

namespace {

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
  run_completion_progress();
  const Settled settled = settle_requests(count, requests, true);
  const int result = [&] {
    if (!any_tracked(count, requests)) return PMPI_Waitall(count, requests, statuses);
    CallFinish call(count, requests);
    CallStatuses st(count, statuses);
    return finish_all(call, st.data(), count, PMPI_Waitall(count, requests, st.data()));
  }();
  return result != MPI_SUCCESS ? result : settled.error;
}

// The requests that complete last (nonblocking sends' offers, peer_pt2pt.h)
// after the others: a receive among the others may be what its sender's
// offer waits for, as this rank's offers wait for their receives, so those
// complete first (receives claim the offers they match); then this rank's
// offers are settled and completed.
int waitall_offers_last(int count, MPI_Request* requests, MPI_Status* statuses) {
  CallArray<MPI_Request> others(count), offers(count);
  CallArray<char> offered(count);
  CallArray<MPI_Status> other_statuses(count), offer_statuses(count);
  for (int i = 0; i < count; ++i) {
    const TrackedRequest* t = tracked(requests[i]);
    offered[i] = t && t->completes_last(requests[i]);
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
  if (any_tracked(count, requests, &TrackedRequest::completes_last))
    return waitall_offers_last(count, requests, statuses);
  return waitall_now(count, requests, statuses);
}

int handle_Testall(int count, MPI_Request* requests, int* flag, MPI_Status* statuses) {
  run_completion_progress();
  // All or none complete here, so a receive among them that a peer's offer
  // waits for delivers as soon as it is complete, as MPI_Request_get_status
  // would: else both ranks of an exchange would wait out their offers. In
  // order, up to the first one still pending: receives take their
  // messages' envelopes in the order they matched. Requests with work of
  // Ferry's to settle are passed over.
  if (any_tracked(count, requests, &TrackedRequest::completes_last)) {
    for (int i = 0; i < count; ++i) {
      TrackedRequest* t = tracked(requests[i]);
      if (!t || t->settles(requests[i])) continue;
      int done = 0;
      if (get_status_of(requests[i], *t, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS || !done) break;
    }
  }
  // Work still running, or failed: not all are complete.
  const Settled settled = settle_requests(count, requests, false);
  if (settled.running || settled.error != MPI_SUCCESS) {
    *flag = 0;
    return settled.error;
  }
  if (!any_tracked(count, requests)) return PMPI_Testall(count, requests, flag, statuses);
  CallFinish call(count, requests);
  CallStatuses st(count, statuses);
  const int result = PMPI_Testall(count, requests, flag, st.data());
  return *flag || result == MPI_ERR_IN_STATUS ? finish_all(call, st.data(), count, result) : result;
}

int handle_Waitany(int count, MPI_Request* requests, int* index, MPI_Status* status) {
  run_completion_progress();
  // With work of Ferry's among them, whichever finishes first: by testing.
  if (any_tracked(count, requests, &TrackedRequest::settles)) {
    for (int flag = 0;;) {
      const int result = handle_Testany(count, requests, index, &flag, status);
      if (result != MPI_SUCCESS || flag) return result;
      std::this_thread::yield();
    }
  }
  if (!any_tracked(count, requests)) return PMPI_Waitany(count, requests, index, status);
  CallFinish call(count, requests);
  MPI_Status local;
  MPI_Status* st = status == MPI_STATUS_IGNORE ? &local : status;
  const int result = PMPI_Waitany(count, requests, index, st);
  if (result != MPI_SUCCESS || *index == MPI_UNDEFINED) return result;
  return finish_one(call, *index, st);
}

namespace {

int testany_now(int count, MPI_Request* requests, int* index, int* flag, MPI_Status* status) {
  if (!any_tracked(count, requests)) return PMPI_Testany(count, requests, index, flag, status);
  CallFinish call(count, requests);
  MPI_Status local;
  MPI_Status* st = status == MPI_STATUS_IGNORE ? &local : status;
  const int result = PMPI_Testany(count, requests, index, flag, st);
  if (result != MPI_SUCCESS || !*flag || *index == MPI_UNDEFINED) return result;
  return finish_one(call, *index, st);
}

}  // namespace

int handle_Testany(int count, MPI_Request* requests, int* index, int* flag, MPI_Status* status) {
  run_completion_progress();
  std::vector<std::pair<int, MPI_Request>> held;
  hold_running(count, requests, &held);
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

int testsome_now(int incount, MPI_Request* requests, int* outcount, int* indices, MPI_Status* statuses) {
  if (!any_tracked(incount, requests)) return PMPI_Testsome(incount, requests, outcount, indices, statuses);
  return some_like(incount, requests, outcount, indices, statuses,
                   [&](MPI_Status* st) { return PMPI_Testsome(incount, requests, outcount, indices, st); });
}

}  // namespace

int handle_Waitsome(int incount, MPI_Request* requests, int* outcount, int* indices, MPI_Status* statuses) {
  run_completion_progress();
  if (any_tracked(incount, requests, &TrackedRequest::settles)) {
    for (;;) {
      const int result = handle_Testsome(incount, requests, outcount, indices, statuses);
      if (result != MPI_SUCCESS || *outcount != 0) return result;
      std::this_thread::yield();
    }
  }
  if (!any_tracked(incount, requests)) return PMPI_Waitsome(incount, requests, outcount, indices, statuses);
  return some_like(incount, requests, outcount, indices, statuses,
                   [&](MPI_Status* st) { return PMPI_Waitsome(incount, requests, outcount, indices, st); });
}

int handle_Testsome(int incount, MPI_Request* requests, int* outcount, int* indices, MPI_Status* statuses) {
  run_completion_progress();
  std::vector<std::pair<int, MPI_Request>> held;
  hold_running(incount, requests, &held);
  const int result = testsome_now(incount, requests, outcount, indices, statuses);
  for (const auto& [i, handle] : held) requests[i] = handle;
  if (!held.empty() && *outcount == MPI_UNDEFINED) *outcount = 0;
  return result;
}

int handle_Request_free(MPI_Request* request) {
  TrackedRequest* t = request ? tracked(*request) : nullptr;
  if (!t) return PMPI_Request_free(request);
  // Its object goes with the handle (to the orphans while the real MPI may
  // still use its memory); stays when the free is refused.
  CallFinish call(1, request);
  return t->free(request);
}

// Leaves the request alone, but when it reports the request complete the
// outputs are delivered now, once: a program may read them before it calls
// the Wait or Test that frees the request.
int handle_Request_get_status(MPI_Request request, int* flag, MPI_Status* status) {
  TrackedRequest* t = tracked(request);
  return t ? get_status_of(request, *t, flag, status) : PMPI_Request_get_status(request, flag, status);
}

// MPI lets a cancel of a send fail, and the send then completes as usual.
int handle_Cancel(MPI_Request* request) {
  const TrackedRequest* t = request ? tracked(*request) : nullptr;
  if (t && !t->cancellable()) return MPI_SUCCESS;
  return PMPI_Cancel(request);
}

}  // namespace ferry::shim

// Nonblocking point-to-point on the staged route, and the completion calls
// that finish it. A device send buffer is copied to a pooled host buffer when
// the call is made (MPI lets the user reuse it only after completion, so the
// copy taken now is the message); a device receive buffer gets the host copy
// when the request completes, in whichever Wait or Test call completes it.
// Host buffers and requests Ferry did not stage go to the real MPI as they are.
#include <atomic>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "handlers.h"
#include "mpi_shim/route.h"
#include "mpi_shim/staging.h"
#include "mpi_shim/stats.h"

namespace ferry::shim {
namespace {

struct StagedRequest {
  std::unique_ptr<Staging> staging;
  bool receive;
};

std::mutex requests_mutex;
std::unordered_map<MPI_Request, StagedRequest>& staged_requests() {
  static auto* table = new std::unordered_map<MPI_Request, StagedRequest>;
  return *table;
}
// Lets completion calls skip the table while nothing is staged.
std::atomic<int> outstanding{0};
// Requests freed by the user before completion: their staging stays alive,
// since the real MPI may still be using it, until MPI_Finalize.
std::vector<std::unique_ptr<Staging>>& orphans() {
  static auto* list = new std::vector<std::unique_ptr<Staging>>;
  return *list;
}

bool is_staged(MPI_Request request) {
  if (outstanding.load(std::memory_order_acquire) == 0 || request == MPI_REQUEST_NULL) return false;
  std::lock_guard<std::mutex> lock(requests_mutex);
  return staged_requests().count(request) != 0;
}

bool any_staged(int count, const MPI_Request* requests) {
  if (outstanding.load(std::memory_order_acquire) == 0 || !requests || count < 0) return false;
  for (int i = 0; i < count; ++i)
    if (is_staged(requests[i])) return true;
  return false;
}

// The request completed with status: copy a receive back, release the
// staging. Returns the completion's error class.
int finish_request(MPI_Request request, const MPI_Status& status) {
  StagedRequest staged;
  {
    std::lock_guard<std::mutex> lock(requests_mutex);
    auto it = staged_requests().find(request);
    if (it == staged_requests().end()) return MPI_SUCCESS;
    staged = std::move(it->second);
    staged_requests().erase(it);
    outstanding.fetch_sub(1, std::memory_order_release);
  }
  int cancelled = 0;
  PMPI_Test_cancelled(&status, &cancelled);
  if (cancelled) return MPI_SUCCESS;  // nothing arrived: leave the buffer alone
  if (staged.receive) staged.staging->received(status);
  return staged.staging->finish(MPI_SUCCESS);
}

template <typename PmpiCall>
int post(FunctionId id, void* buf, int count, MPI_Datatype datatype, MPI_Comm comm, MPI_Request* request,
         bool receive, PmpiCall pmpi) {
  count_bytes(id, count, datatype);
  if (route_call(id, {buf}).route == Route::kPmpi) return pmpi(buf);
  Extent extent;
  if (comm == MPI_COMM_NULL || !request || !extent_of(count, datatype, &extent)) return pmpi(buf);
  auto staging = std::make_unique<Staging>(id, comm);
  void* staged = receive ? staging->receive(buf, extent, datatype) : const_cast<void*>(staging->in(buf, extent));
  if (staging->failed()) return staging->raise();
  const int result = pmpi(staged);
  if (result != MPI_SUCCESS || !staging->staged_any()) return result;
  std::lock_guard<std::mutex> lock(requests_mutex);
  staged_requests()[*request] = StagedRequest{std::move(staging), receive};
  outstanding.fetch_add(1, std::memory_order_release);
  return result;
}

}  // namespace

int handle_Isend(const void* buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm,
                 MPI_Request* request) {
  return post(FunctionId::kIsend, const_cast<void*>(buf), count, datatype, comm, request, false,
              [&](void* b) { return PMPI_Isend(b, count, datatype, dest, tag, comm, request); });
}

int handle_Issend(const void* buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm,
                  MPI_Request* request) {
  return post(FunctionId::kIssend, const_cast<void*>(buf), count, datatype, comm, request, false,
              [&](void* b) { return PMPI_Issend(b, count, datatype, dest, tag, comm, request); });
}

int handle_Ibsend(const void* buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm,
                  MPI_Request* request) {
  return post(FunctionId::kIbsend, const_cast<void*>(buf), count, datatype, comm, request, false,
              [&](void* b) { return PMPI_Ibsend(b, count, datatype, dest, tag, comm, request); });
}

int handle_Irsend(const void* buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm,
                  MPI_Request* request) {
  return post(FunctionId::kIrsend, const_cast<void*>(buf), count, datatype, comm, request, false,
              [&](void* b) { return PMPI_Irsend(b, count, datatype, dest, tag, comm, request); });
}

int handle_Irecv(void* buf, int count, MPI_Datatype datatype, int source, int tag, MPI_Comm comm,
                 MPI_Request* request) {
  return post(FunctionId::kIrecv, buf, count, datatype, comm, request, true,
              [&](void* b) { return PMPI_Irecv(b, count, datatype, source, tag, comm, request); });
}

int handle_Wait(MPI_Request* request, MPI_Status* status) {
  if (!request || !is_staged(*request)) return PMPI_Wait(request, status);
  const MPI_Request staged = *request;
  MPI_Status local;
  MPI_Status* st = status == MPI_STATUS_IGNORE ? &local : status;
  const int result = PMPI_Wait(request, st);
  return result == MPI_SUCCESS ? finish_request(staged, *st) : result;
}

int handle_Test(MPI_Request* request, int* flag, MPI_Status* status) {
  if (!request || !is_staged(*request)) return PMPI_Test(request, flag, status);
  const MPI_Request staged = *request;
  MPI_Status local;
  MPI_Status* st = status == MPI_STATUS_IGNORE ? &local : status;
  const int result = PMPI_Test(request, flag, st);
  return result == MPI_SUCCESS && *flag ? finish_request(staged, *st) : result;
}

namespace {

// The array completion calls: keep the handles and real statuses, call the
// real MPI, then finish each staged request it reports complete.
struct CompletionArrays {
  std::vector<MPI_Request> handles;
  std::vector<MPI_Status> local_statuses;
  MPI_Status* statuses;

  CompletionArrays(int count, const MPI_Request* requests, MPI_Status* user_statuses)
      : handles(requests, requests + count) {
    if (user_statuses == MPI_STATUSES_IGNORE) {
      local_statuses.resize(count);
      statuses = local_statuses.data();
    } else {
      statuses = user_statuses;
    }
  }

  int finish(int index) { return finish_request(handles[index], statuses[index]); }
};

// MPI_ERR_IN_STATUS: only the requests whose own status says success completed.
int finish_all(CompletionArrays& arrays, int count, int result) {
  if (result != MPI_SUCCESS && result != MPI_ERR_IN_STATUS) return result;
  int first_error = MPI_SUCCESS;
  for (int i = 0; i < count; ++i) {
    if (result == MPI_ERR_IN_STATUS && arrays.statuses[i].MPI_ERROR != MPI_SUCCESS) continue;
    const int finished = arrays.finish(i);
    if (first_error == MPI_SUCCESS) first_error = finished;
  }
  return result != MPI_SUCCESS ? result : first_error;
}

}  // namespace

int handle_Waitall(int count, MPI_Request* requests, MPI_Status* statuses) {
  if (!any_staged(count, requests)) return PMPI_Waitall(count, requests, statuses);
  CompletionArrays arrays(count, requests, statuses);
  return finish_all(arrays, count, PMPI_Waitall(count, requests, arrays.statuses));
}

int handle_Testall(int count, MPI_Request* requests, int* flag, MPI_Status* statuses) {
  if (!any_staged(count, requests)) return PMPI_Testall(count, requests, flag, statuses);
  CompletionArrays arrays(count, requests, statuses);
  const int result = PMPI_Testall(count, requests, flag, arrays.statuses);
  return *flag || result == MPI_ERR_IN_STATUS ? finish_all(arrays, count, result) : result;
}

int handle_Waitany(int count, MPI_Request* requests, int* index, MPI_Status* status) {
  if (!any_staged(count, requests)) return PMPI_Waitany(count, requests, index, status);
  const std::vector<MPI_Request> handles(requests, requests + count);
  MPI_Status local;
  MPI_Status* st = status == MPI_STATUS_IGNORE ? &local : status;
  const int result = PMPI_Waitany(count, requests, index, st);
  if (result != MPI_SUCCESS || *index == MPI_UNDEFINED) return result;
  return finish_request(handles[*index], *st);
}

int handle_Testany(int count, MPI_Request* requests, int* index, int* flag, MPI_Status* status) {
  if (!any_staged(count, requests)) return PMPI_Testany(count, requests, index, flag, status);
  const std::vector<MPI_Request> handles(requests, requests + count);
  MPI_Status local;
  MPI_Status* st = status == MPI_STATUS_IGNORE ? &local : status;
  const int result = PMPI_Testany(count, requests, index, flag, st);
  if (result != MPI_SUCCESS || !*flag || *index == MPI_UNDEFINED) return result;
  return finish_request(handles[*index], *st);
}

namespace {

template <typename PmpiCall>
int some_like(int incount, MPI_Request* requests, int* outcount, int* indices, MPI_Status* statuses,
              PmpiCall pmpi) {
  const std::vector<MPI_Request> handles(requests, requests + incount);
  // Statuses are filled for the completed requests only, in completion order.
  std::vector<MPI_Status> local(statuses == MPI_STATUSES_IGNORE ? incount : 0);
  MPI_Status* st = statuses == MPI_STATUSES_IGNORE ? local.data() : statuses;
  const int result = pmpi(st);
  if ((result != MPI_SUCCESS && result != MPI_ERR_IN_STATUS) || *outcount == MPI_UNDEFINED) return result;
  int first_error = MPI_SUCCESS;
  for (int k = 0; k < *outcount; ++k) {
    if (result == MPI_ERR_IN_STATUS && st[k].MPI_ERROR != MPI_SUCCESS) continue;
    const int finished = finish_request(handles[indices[k]], st[k]);
    if (first_error == MPI_SUCCESS) first_error = finished;
  }
  return result != MPI_SUCCESS ? result : first_error;
}

}  // namespace

int handle_Waitsome(int incount, MPI_Request* requests, int* outcount, int* indices, MPI_Status* statuses) {
  if (!any_staged(incount, requests)) return PMPI_Waitsome(incount, requests, outcount, indices, statuses);
  return some_like(incount, requests, outcount, indices, statuses,
                   [&](MPI_Status* st) { return PMPI_Waitsome(incount, requests, outcount, indices, st); });
}

int handle_Testsome(int incount, MPI_Request* requests, int* outcount, int* indices, MPI_Status* statuses) {
  if (!any_staged(incount, requests)) return PMPI_Testsome(incount, requests, outcount, indices, statuses);
  return some_like(incount, requests, outcount, indices, statuses,
                   [&](MPI_Status* st) { return PMPI_Testsome(incount, requests, outcount, indices, st); });
}

int handle_Request_free(MPI_Request* request) {
  if (!request || !is_staged(*request)) return PMPI_Request_free(request);
  const MPI_Request staged = *request;
  const int result = PMPI_Request_free(request);
  if (result != MPI_SUCCESS) return result;
  std::lock_guard<std::mutex> lock(requests_mutex);
  auto it = staged_requests().find(staged);
  orphans().push_back(std::move(it->second.staging));
  staged_requests().erase(it);
  outstanding.fetch_sub(1, std::memory_order_release);
  return MPI_SUCCESS;
}

void release_staged_requests() {
  std::lock_guard<std::mutex> lock(requests_mutex);
  orphans().clear();
}

}  // namespace ferry::shim

// Staged requests (staged_requests.h). A device send buffer is copied to a
// pooled host buffer when the call is made, or at every MPI_Start of a
// persistent request (MPI lets the user reuse it only after completion, so
// the copy taken then is the message); a device receive buffer gets the
// host copy when the request completes, in whichever Wait or Test call
// completes it, or in MPI_Request_get_status. A receive that may match a
// marker (peer_pt2pt.h) is checked then too.
#include "mpi_shim/staged_requests.h"

#include <atomic>
#include <cstddef>
#include <memory>
#include <utility>
#include <vector>

#include "mpi_shim/wrapper_support.h"

namespace ferry::shim {
namespace {

// Checked receives are numbered in the order they were posted (or
// started). A receive that got a marker (an empty message) takes the first
// envelope of its sender's queue for the communicator and tag, and the
// real MPI matches receives to messages in the order they were posted: so
// such receives must take their envelopes in that order too, whatever
// order the application completes them in. Receives of data never look.
std::atomic<std::uint64_t> receives_posted{0};

// The bytes a status counts.
MPI_Count count_of(const MPI_Status& status) {
  MPI_Count bytes = 0;
  PMPI_Get_elements_x(&status, MPI_BYTE, &bytes);
  return bytes;
}

// Copies the outputs of a request that completed with status to the user's
// buffers; a cancelled one leaves them alone, since nothing arrived. One
// that cannot be cancelled never asks the status (MPICH leaves an
// MPI_Isendrecv's status unwritten).
int deliver(Staging& staging, bool receive, const MPI_Status& status, bool cancellable) {
  int cancelled = 0;
  if (cancellable) PMPI_Test_cancelled(&status, &cancelled);
  if (cancelled) return MPI_SUCCESS;
  if (receive) staging.received(status);
  return staging.finish(MPI_SUCCESS);
}

// A request with host copies (staging) to deliver, or a checked receive,
// or both.
class StagedRequest final : public TrackedRequest {
 public:
  StagedRequest(std::unique_ptr<Staging> staging, bool receive, const CheckedReceive& checked, Lifetime lifetime)
      : TrackedRequest(lifetime), staging_(std::move(staging)), receive_(receive), checked_(checked) {
    if (active()) on_started();
  }
  // The handle is a receive's, and send (reading send_copy when not empty)
  // must complete before it does.
  void send_apart(MPI_Request send, std::vector<std::byte> send_copy) {
    send_ = send;
    send_copy_ = std::move(send_copy);
  }
  std::uint64_t posted() const override { return posted_; }
  bool holds_memory_in_flight() const override {
    return staging_ != nullptr || send_ != MPI_REQUEST_NULL || !send_copy_.empty();
  }
  bool settles(MPI_Request) const override { return send_ != MPI_REQUEST_NULL; }
  Settled settle(MPI_Request, bool wait) override {
    if (send_ == MPI_REQUEST_NULL) return {};
    int done = 1;
    const int result = wait ? PMPI_Wait(&send_, MPI_STATUS_IGNORE) : PMPI_Test(&send_, &done, MPI_STATUS_IGNORE);
    if (result != MPI_SUCCESS) send_ = MPI_REQUEST_NULL;
    if (send_ == MPI_REQUEST_NULL) send_copy_.clear();
    return {result, result == MPI_SUCCESS && !done};
  }
  // The send goes on to completion by itself, as the real MPI's would.
  int free(MPI_Request* handle) override {
    if (send_ != MPI_REQUEST_NULL) PMPI_Request_free(&send_);
    return PMPI_Request_free(handle);
  }

 private:
  int complete(MPI_Status& status) override {
    Staging* staging = delivered() ? nullptr : staging_.get();
    int result = staging ? deliver(*staging, receive_, status, cancellable()) : MPI_SUCCESS;
    if (result != MPI_SUCCESS || !checked_.on()) return result;
    if (delivered()) {
      // MPI_Request_get_status received the marker's data already.
      PMPI_Status_set_elements_x(&status, MPI_BYTE, checked_bytes_);
      if (checked_error_ != MPI_SUCCESS) status.MPI_ERROR = checked_error_;
      return checked_error_;
    }
    result = peer::after_receive(checked_.comm, checked_.buf, checked_.count, checked_.type, &status, posted_);
    return result == MPI_SUCCESS ? result : raise_error(checked_.comm, result);
  }

  int early_complete(MPI_Status& status) override {
    int result = staging_ ? deliver(*staging_, receive_, status, cancellable()) : MPI_SUCCESS;
    if (result != MPI_SUCCESS || !checked_.on()) return result;
    result = peer::after_receive(checked_.comm, checked_.buf, checked_.count, checked_.type, &status, posted_);
    checked_bytes_ = count_of(status);
    checked_error_ = result;
    return result == MPI_SUCCESS ? result : raise_error(checked_.comm, result);
  }

  // A persistent send copies its buffer again.
  int on_restart() override { return staging_ ? staging_->restart() : MPI_SUCCESS; }
  void on_started() override {
    if (checked_.on()) posted_ = receives_posted.fetch_add(1, std::memory_order_relaxed) + 1;
  }

  std::unique_ptr<Staging> staging_;
  bool receive_;               // a point-to-point receive: copies back only what arrived
  CheckedReceive checked_;     // may receive a marker
  std::uint64_t posted_ = 0;   // a checked receive's number in the order receives were posted
  MPI_Count checked_bytes_ = 0;  // what MPI_Request_get_status delivered, for the Wait
  int checked_error_ = MPI_SUCCESS;
  MPI_Request send_ = MPI_REQUEST_NULL;  // posted apart, still to complete
  std::vector<std::byte> send_copy_;     // what it sends, when a copy
};

}  // namespace

int end_staged(Staging& staging, int mpi_result, MPI_Request* request, Lifetime lifetime, bool receive,
               const CheckedReceive& checked, bool cancellable) {
  if (!request) return staging.finish(mpi_result);
  if (mpi_result != MPI_SUCCESS) return mpi_result;
  if (!staging.staged_any()) return unstaged_result(mpi_result, request, checked, lifetime);
  // Done already, as Open MPI's collectives on one rank are: it hands every
  // such call one shared, completed request, so the outputs go back now.
  int done = 0;
  MPI_Status status{};
  // A checked receive is finished at its completion (never one from
  // MPI_PROC_NULL, whose request Open MPI shares among all such receives).
  if (lifetime == Lifetime::kOnce && !checked.on() &&
      PMPI_Request_get_status(*request, &done, &status) == MPI_SUCCESS && done)
    return deliver(staging, receive, status, cancellable);
  auto tracked = std::make_unique<StagedRequest>(std::make_unique<Staging>(std::move(staging)), receive, checked,
                                                 lifetime);
  if (!cancellable) tracked->make_uncancellable();
  track(*request, std::move(tracked));
  return mpi_result;
}

void track_checked_receive(MPI_Request request, const CheckedReceive& checked, Lifetime lifetime) {
  track(request, std::make_unique<StagedRequest>(nullptr, true, checked, lifetime));
}

void track_apart(MPI_Request receive, MPI_Request send, std::unique_ptr<Staging> staging,
                 std::vector<std::byte> send_copy, const CheckedReceive& checked) {
  const bool staged = staging && staging->staged_any();
  auto tracked = std::make_unique<StagedRequest>(staged ? std::move(staging) : nullptr, false, checked,
                                                 Lifetime::kOnce);
  tracked->send_apart(send, std::move(send_copy));
  tracked->make_uncancellable();
  track(receive, std::move(tracked));
}

}  // namespace ferry::shim

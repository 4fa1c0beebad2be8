// The requests Ferry tracks, by MPI handle. Every kind of request that has
// work of Ferry's behind it -- staged copies to deliver, a send's offer of
// peer memory, a collective on the engine, an RMA result -- registers an
// object with one interface, TrackedRequest; the completion calls
// (request_completion.cc) look each handle up here and ask its object.
// A handle with no object is the real MPI's alone. The handle itself is
// always one the real MPI knows.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <functional>
#include <memory>

namespace ferry::shim {

enum class Lifetime {
  kOnce,        // finished, and released, by the call that completes it
  kPersistent,  // made inactive; restarted by MPI_Start, released by MPI_Request_free
};

// What settling a request before a completion call found.
struct Settled {
  int error = MPI_SUCCESS;  // the first error of Ferry's work behind it
  bool running = false;     // still running: hold the handle back from the real MPI
};

// One request Ferry tracks. Its state: a persistent one is active from its
// MPI_Start to the completion call that ends it; delivered says that
// MPI_Request_get_status already delivered its outputs.
class TrackedRequest {
 public:
  explicit TrackedRequest(Lifetime lifetime = Lifetime::kOnce)
      : persistent_(lifetime == Lifetime::kPersistent), active_(!persistent_) {}
  virtual ~TrackedRequest() = default;
  TrackedRequest(const TrackedRequest&) = delete;
  TrackedRequest& operator=(const TrackedRequest&) = delete;

  // --- before the real MPI sees the handle ---

  // Whether work of Ferry's behind handle moves only while a completion call
  // settles it: MPI_Waitany and MPI_Waitsome then test instead of blocking
  // in the real MPI.
  virtual bool settles(MPI_Request /*handle*/) const { return false; }
  // Moves that work on; wait: until the real MPI may complete the handle.
  virtual Settled settle(MPI_Request /*handle*/, bool /*wait*/) { return {}; }
  // Whether it may wait for a receive among the requests of the same call
  // (a send's offer of peer memory): MPI_Waitall completes it after them.
  virtual bool completes_last(MPI_Request /*handle*/) const { return false; }

  // --- completion ---

  // The real MPI completed the handle with status in a Wait or Test: its
  // outputs are delivered (unless early_complete did) and a persistent one
  // turns inactive. Returns the completion's error class.
  int finish(MPI_Status& status);
  // MPI_Request_get_status on the handle (after settle): when it reports the
  // request complete, its outputs are delivered now, once.
  int get_status(MPI_Request handle, int* flag, MPI_Status* status);
  // The real MPI reported the request failed: nothing to deliver.
  void fail() { active_ = false; }

  // --- MPI_Start, MPI_Request_free, MPI_Cancel ---

  // Whether MPI_Startall starts it on its own, each request of the array
  // in turn: its start() does work before the real one, whose order among
  // the array's messages must hold.
  virtual bool starts_alone() const { return false; }
  // MPI_Start of it. The default is restart(), the real MPI_Start, then
  // started(); a kind that overrides it starts alone.
  virtual int start(MPI_Request* handle);
  // Before the real MPI starts an inactive persistent request.
  int restart() { return active_ ? MPI_SUCCESS : on_restart(); }
  // The real MPI started it.
  void started();
  // MPI_Request_free of it: by default, the real one.
  virtual int free(MPI_Request* handle) { return PMPI_Request_free(handle); }
  bool cancellable() const { return cancellable_; }
  // A send whose message has an envelope (peer_pt2pt.h): MPI_Cancel of it
  // does nothing.
  void make_uncancellable() { cancellable_ = false; }

  // --- what the registry looks at ---

  bool persistent() const { return persistent_; }
  bool active() const { return active_; }
  bool delivered() const { return delivered_; }
  // A checked receive's place in the order receives were posted; 0: none.
  virtual std::uint64_t posted() const { return 0; }
  // Whether the real MPI may still use memory it holds, after the
  // application freed it while active: then it is kept until MPI_Finalize.
  virtual bool holds_memory_in_flight() const { return false; }

 protected:
  // Delivers the outputs once the request completed with status, in the
  // completion call (early_complete: in MPI_Request_get_status, which
  // leaves the handle alive; status is then the status it reports).
  virtual int complete(MPI_Status& /*status*/) { return MPI_SUCCESS; }
  virtual int early_complete(MPI_Status& status) { return complete(status); }
  virtual int on_restart() { return MPI_SUCCESS; }
  virtual void on_started() {}

 private:
  bool persistent_;
  bool active_;
  bool delivered_ = false;
  bool cancellable_ = true;
};

// Registers request's object (replacing one left under the same handle).
void track(MPI_Request request, std::unique_ptr<TrackedRequest> tracked);

// A request whose outputs are delivered by complete(), which runs in the
// Wait or Test that completes it and in MPI_Request_get_status when it
// reports completion; it must be idempotent (an RMA R-call's results are
// also due at the epoch's synchronization, whichever comes first).
void track_request(MPI_Request request, std::function<int()> complete);

// A send whose message has an envelope (peer_pt2pt.h): not cancellable.
void track_uncancellable(MPI_Request request);

// Before a receive numbered posted (peer::kPostedNow: posted as it
// completes) takes a marker's envelope: the tracked receives posted before
// it that are complete take theirs, in order, as MPI_Request_get_status
// would deliver them (they matched earlier messages). Not under
// MPI_THREAD_MULTIPLE, where the application's threads may be completing
// those requests at the same time.
void deliver_receives_posted_before(std::uint64_t posted);

// Work that waits for an MPI call to move (a nonblocking collective's
// fallback to post): run at the start of every completion call.
void add_completion_progress(void (*progress)());

// At MPI_Finalize: drops every object, those of requests freed while
// active and persistent ones never freed too.
void release_tracked_requests();

}  // namespace ferry::shim

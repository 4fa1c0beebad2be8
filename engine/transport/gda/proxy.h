// The proxy GDA's host side: a thread that plays the NIC for GPU threads.
// It drains every ring (gda_ring.h) it serves in ticket order and hands each
// descriptor to an executor, which carries the operation out (over the net
// transport to a rank on another machine, gda_net.h). The executor starts
// a ring's descriptors in ticket order and makes their effects visible at
// each target in that order, so a producer's puts land in the order it
// posted them and a signal after the data it follows. Operations may finish
// out of order (different targets); a ring's `completed` advances over
// those finished without a gap, which is what quiet() waits for.
//
// An operation that returns a value (gda_ring.h: returns_value) is started
// with its source pointing at 8 bytes of the proxy's, where the executor
// leaves the value; once it finishes the proxy copies the value into the
// ticket's result slot as soon as the slot is free.
//
// With FERRY_TRACE, each operation is a span of the trace (gda <op>, from
// its post, by the producer's clock, to its completion), its arguments the
// target, bytes, ring, ticket and producer, and when the proxy took it and
// started it.
//
// A failed operation, or a ring whose producers wait while the proxy stops,
// marks every ring failed: producers waiting for room or completion return
// instead of spinning, and status() says why. So does a stall: a watchdog
// thread fails the rings (kTimeout, with a WARN) when the proxy's thread
// has been held in one call of its executor, or operations it started have
// not advanced, for the stall limit (FERRY_HANDSHAKE_TIMEOUT).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "engine/common/status.h"
#include "engine/gpu/gpu.h"
#include "ferry/gda_ring.h"

namespace ferry::gda {

// Carries out what descriptors ask. Called from the proxy's thread only.
class GdaExecutor {
 public:
  virtual ~GdaExecutor() = default;
  // Starts d, posted with ticket on ring `ring` (tickets of a ring come in
  // order). It may read d's source as late as the next read_sources(). Its
  // effects at the target follow those of the ring's earlier descriptors to
  // the same target.
  virtual Status start(const GdaDescriptor& d, int ring, std::uint64_t ticket) = 0;
  // Returns once the sources of every descriptor started so far are read:
  // their producers may then reuse them. The proxy calls it once for all it
  // started in a turn, so an executor may read many sources at once.
  virtual Status read_sources() { return Status::kOk; }
  // Moves started operations along; calls finished(ring, ticket) for each
  // whose data and signal are now visible at its target.
  virtual Status progress(const std::function<void(int ring, std::uint64_t ticket)>& finished) = 0;
  // Whether it still owes peers what a later progress() sends them (an
  // acknowledgement): the proxy calls progress again at once (it does not
  // sleep meanwhile), and a stopping proxy until it owes nothing.
  virtual bool owes_peers() const { return false; }
};

// Who takes tickets on a ring: GPU threads (the counter in device memory)
// or host threads (in host memory).
enum class Producers { kDevice, kHost };

// Where GPU producers read the consumer's words and returned values
// (gda_ring.h): the pinned host memory the proxy writes, or a copy in
// device memory that the proxy keeps current with copies.
enum class Polls { kHostMemory, kDeviceCopy };
// FERRY_GDA_POLL's choice.
Polls default_polls();

class GdaProxy {
 public:
  // Rings' memory comes from backend (pinned host memory the GPU maps, and
  // device memory for device producers' counters). stall_limit: how long
  // the watchdog lets the proxy's thread stay in one executor call, or its
  // started operations go without one finishing (zero: no watchdog).
  GdaProxy(gpu::Backend* backend, GdaExecutor* executor);
  GdaProxy(gpu::Backend* backend, GdaExecutor* executor, std::chrono::milliseconds stall_limit);
  // Stops the thread (as stop()) and frees the rings.
  ~GdaProxy();
  GdaProxy(const GdaProxy&) = delete;
  GdaProxy& operator=(const GdaProxy&) = delete;

  // A ring of capacity descriptors (a power of two), before start(); polls
  // matters for device producers only.
  Status add_ring(std::uint32_t capacity, Producers producers, GdaRing* ring, Polls polls = default_polls());
  // Starts draining on a thread of its own; once only.
  void start();
  // Drains what is published and waits (until FERRY_HANDSHAKE_TIMEOUT) for
  // what it started to finish, then stops; every ring is then marked failed
  // (a producer still waiting on one returns).
  void stop();
  // Gives up at once: every ring is marked failed (producers waiting on one
  // return) and the thread ends without waiting for what it started; for a
  // caller whose producers can no longer be waited for.
  void abandon(Status why) { fail(why); }
  // kOk, or the first failure (after which every ring is marked failed).
  Status status() const { return status_.load(std::memory_order_acquire); }
  // Descriptors finished so far, over all rings.
  std::uint64_t executed() const { return executed_.load(std::memory_order_relaxed); }

 private:
  // A started ticket. A deque keeps each one's address while others come
  // and go, so `value` can be an executor's destination.
  struct Started {
    bool finished = false;
    bool returns_value = false;
    std::uint64_t value = 0;
    // With FERRY_TRACE: the descriptor, and when it was posted, taken by
    // the proxy and started (its source read).
    GdaDescriptor traced{};
    std::int64_t posted_us = 0, taken_us = 0, started_us = 0;
  };
  struct Ring {
    GdaRing view;
    Producers producers;
    std::uint64_t next = 0;  // the ticket expected next
    std::uint64_t announced = 0;  // tickets before it are in words->started
    // Tickets from `completed` on, as started.
    std::uint64_t completed = 0;
    std::deque<Started> started;
    // Values whose result slot was still taken: (ticket, value).
    std::vector<std::pair<std::uint64_t, std::uint64_t>> unreturned;
    // GPU producers' copy of the words and results (gda_ring.h), in device
    // memory, and the words' values last copied there; null: none.
    GdaRingWords* device_words = nullptr;
    GdaResult* device_results = nullptr;
    std::uint64_t copied_consumed = 0, copied_started = 0, copied_completed = 0;
  };

  void run();
  // Takes what ring holds now and starts it; the descriptors it started.
  std::uint64_t drain(int index, Ring& ring);
  // Once the executor has read what the drains started: tells producers.
  void announce_started();
  void finish(int ring, std::uint64_t ticket);
  // The trace's span of a finished operation (FERRY_TRACE).
  void trace_operation(int ring, std::uint64_t ticket, const Started& started);
  // Writes values into their result slots where those are free now.
  void return_values(Ring& ring);
  // Device memory for ring's producers' copy, zeroed; none where that
  // fails (producers then read host memory).
  void add_device_copy(Ring& ring);
  // Queues a copy of ring's words where they changed since the last call.
  Status update_device_copy(Ring& ring);
  // Queues a copy of the `failed` mark into every ring's copy (best effort).
  void fail_device_copies();
  bool idle() const;
  void fail(Status why);
  // The watchdog's thread: fails the rings once the proxy stalls.
  void watch();

  gpu::Backend* backend_;
  GdaExecutor* executor_;
  // Asked once, here: asking the driver from the watchdog could wait on the
  // very lock a lazy load holds.
  const bool modules_load_lazily_;
  std::vector<Ring> rings_;
  // Where the rings' device copies are written, in order (made with the
  // first device copy).
  gpu::Stream copy_stream_ = nullptr;
  int copy_device_ = -1;  // the stream's device, made current on the proxy's thread
  std::thread thread_;
  std::atomic<bool> stopping_{false};
  std::atomic<Status> status_{Status::kOk};
  std::atomic<std::uint64_t> executed_{0};
  // For the watchdog: the proxy thread's turns of its loop, operations
  // started or finished, and those started and not finished.
  std::chrono::milliseconds stall_limit_;
  std::atomic<std::uint64_t> polls_{0};
  std::atomic<std::uint64_t> advances_{0};
  std::atomic<std::uint64_t> outstanding_{0};
  std::thread watchdog_;
  std::mutex watchdog_mutex_;
  std::condition_variable watchdog_wake_;
};

}  // namespace ferry::gda

#include "engine/transport/gda/proxy.h"

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstring>

#include "engine/common/liveness.h"
#include "engine/common/log.h"
#include "engine/common/params.h"
#include "engine/common/trace.h"

namespace ferry::gda {
namespace {

// Polls with nothing found before the thread starts yielding its core, and
// before it sleeps between polls: a GPU that posts again soon is served
// within a poll, a quiet proxy costs little.
constexpr int kSpinsBeforeYield = 2000;
constexpr int kSpinsBeforeSleep = 20000;

bool is_power_of_two(std::uint32_t n) { return n != 0 && (n & (n - 1)) == 0; }

void store_word(std::uint64_t* word, std::uint64_t value) { __atomic_store_n(word, value, __ATOMIC_RELEASE); }

const char* op_name(GdaOp op) {
  switch (op) {
    case GdaOp::kPut: return "gda put";
    case GdaOp::kPutSignal: return "gda put_signal";
    case GdaOp::kSignal: return "gda signal";
    case GdaOp::kAtomicAdd: return "gda atomic_add";
    case GdaOp::kPutInline: return "gda p";
    case GdaOp::kGet: return "gda get";
    case GdaOp::kGetValue: return "gda g";
    case GdaOp::kFetchAdd: return "gda fetch_add";
    case GdaOp::kCompareSwap: return "gda compare_swap";
    case GdaOp::kPutFlagged: return "gda ll_put";
    case GdaOp::kAccumulate: return "gda accumulate";
    case GdaOp::kGetAccumulate: return "gda get_accumulate";
    case GdaOp::kPutInlineSignal: return "gda put_signal";
  }
  return "gda";
}

// FERRY_HANDSHAKE_TIMEOUT, as the watchdog's limit (0: none).
std::chrono::milliseconds default_stall_limit() {
  const auto deadline = handshake_deadline();
  if (deadline == std::chrono::steady_clock::time_point::max()) return std::chrono::milliseconds(0);
  return std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
}

}  // namespace

GdaProxy::GdaProxy(gpu::Backend* backend, GdaExecutor* executor)
    : GdaProxy(backend, executor, default_stall_limit()) {}

GdaProxy::GdaProxy(gpu::Backend* backend, GdaExecutor* executor, std::chrono::milliseconds stall_limit)
    : backend_(backend),
      executor_(executor),
      modules_load_lazily_(backend && backend->loads_modules_lazily()),
      stall_limit_(stall_limit) {}

GdaProxy::~GdaProxy() {
  stop();
  // The device copies' last writes land before their memory goes.
  if (copy_stream_) {
    FERRY_LOG_IF_FAILED(backend_->stream_synchronize(copy_stream_));
    FERRY_LOG_IF_FAILED(backend_->stream_destroy(copy_stream_));
  }
  for (Ring& ring : rings_) {
    if (ring.device_words) FERRY_LOG_IF_FAILED(backend_->device_free(ring.device_words));
    if (ring.device_results) FERRY_LOG_IF_FAILED(backend_->device_free(ring.device_results));
    FERRY_LOG_IF_FAILED(backend_->pinned_free(ring.view.slots));
    FERRY_LOG_IF_FAILED(backend_->pinned_free(ring.view.words));
    FERRY_LOG_IF_FAILED(backend_->pinned_free(ring.view.results));
    if (ring.view.posted_ns) FERRY_LOG_IF_FAILED(backend_->pinned_free(ring.view.posted_ns));
    if (ring.producers == Producers::kDevice)
      FERRY_LOG_IF_FAILED(backend_->device_free(ring.view.tickets));
    else
      FERRY_LOG_IF_FAILED(backend_->pinned_free(ring.view.tickets));
  }
}

Polls default_polls() { return params().gda_poll == "device" ? Polls::kDeviceCopy : Polls::kHostMemory; }

Status GdaProxy::add_ring(std::uint32_t capacity, Producers producers, GdaRing* out, Polls polls) {
  if (!is_power_of_two(capacity) || thread_.joinable()) return Status::kInvalidArgument;
  Ring ring;
  ring.producers = producers;
  ring.view.capacity = capacity;
  void* slots = nullptr;
  void* words = nullptr;
  void* results = nullptr;
  void* posted = nullptr;
  void* tickets = nullptr;
  const std::uint64_t zero = 0;
  Status status = backend_->pinned_alloc(sizeof(GdaDescriptor) * capacity, &slots);
  if (ok(status)) status = backend_->pinned_alloc(sizeof(GdaRingWords), &words);
  if (ok(status)) status = backend_->pinned_alloc(sizeof(GdaResult) * capacity, &results);
  if (ok(status) && trace_enabled()) {
    status = backend_->pinned_alloc(sizeof(std::uint64_t) * capacity, &posted);
    if (ok(status)) std::memset(posted, 0, sizeof(std::uint64_t) * capacity);
  }
  if (ok(status)) {
    std::memset(slots, 0, sizeof(GdaDescriptor) * capacity);
    std::memset(words, 0, sizeof(GdaRingWords));
    std::memset(results, 0, sizeof(GdaResult) * capacity);
    if (producers == Producers::kDevice) {
      status = backend_->device_alloc(sizeof(std::uint64_t), &tickets);
      if (ok(status)) status = backend_->copy(tickets, &zero, sizeof zero);
    } else {
      status = backend_->pinned_alloc(sizeof(std::uint64_t), &tickets);
      if (ok(status)) std::memset(tickets, 0, sizeof(std::uint64_t));
    }
  }
  if (!ok(status)) {
    if (slots) FERRY_LOG_IF_FAILED(backend_->pinned_free(slots));
    if (words) FERRY_LOG_IF_FAILED(backend_->pinned_free(words));
    if (results) FERRY_LOG_IF_FAILED(backend_->pinned_free(results));
    if (posted) FERRY_LOG_IF_FAILED(backend_->pinned_free(posted));
    if (tickets && producers == Producers::kDevice) FERRY_LOG_IF_FAILED(backend_->device_free(tickets));
    if (tickets && producers == Producers::kHost) FERRY_LOG_IF_FAILED(backend_->pinned_free(tickets));
    return status;
  }
  ring.view.slots = static_cast<GdaDescriptor*>(slots);
  ring.view.words = static_cast<GdaRingWords*>(words);
  ring.view.results = static_cast<GdaResult*>(results);
  ring.view.posted_ns = static_cast<std::uint64_t*>(posted);
  ring.view.tickets = static_cast<std::uint64_t*>(tickets);
  ring.view.seen_words = ring.view.words;
  ring.view.seen_results = ring.view.results;
  if (producers == Producers::kDevice && polls == Polls::kDeviceCopy) add_device_copy(ring);
  rings_.push_back(ring);
  *out = ring.view;
  return Status::kOk;
}

void GdaProxy::add_device_copy(Ring& ring) {
  const std::size_t result_bytes = sizeof(GdaResult) * ring.view.capacity;
  void* words = nullptr;
  void* results = nullptr;
  const std::vector<char> zeros(std::max(sizeof(GdaRingWords), result_bytes), 0);
  Status status = backend_->device_alloc(sizeof(GdaRingWords), &words);
  if (ok(status)) status = backend_->device_alloc(result_bytes, &results);
  if (ok(status)) status = backend_->copy(words, zeros.data(), sizeof(GdaRingWords));
  if (ok(status)) status = backend_->copy(results, zeros.data(), result_bytes);
  if (ok(status) && !copy_stream_) {
    if (!backend_->chosen_device(&copy_device_)) copy_device_ = -1;
    status = backend_->stream_create_independent(&copy_stream_);
  }
  if (!ok(status)) {
    FERRY_INFO(Transport, "gda proxy: GPU producers read the ring's words in host memory (no device copy: %s)",
               status_name(status));
    if (words) FERRY_LOG_IF_FAILED(backend_->device_free(words));
    if (results) FERRY_LOG_IF_FAILED(backend_->device_free(results));
    return;
  }
  ring.device_words = static_cast<GdaRingWords*>(words);
  ring.device_results = static_cast<GdaResult*>(results);
  ring.view.seen_words = ring.device_words;
  ring.view.seen_results = ring.device_results;
}

// Copies run on the device's copy engines, whose queues no kernel holds
// (a stream's memory operations may wait behind a kernel that waits for
// them). A copy reads its source when it runs: the counters, each word
// whole and never going back, at least as far as when it was queued.
Status GdaProxy::update_device_copy(Ring& ring) {
  const GdaRingWords* host = ring.view.words;
  const std::uint64_t consumed = __atomic_load_n(&host->consumed, __ATOMIC_ACQUIRE);
  const std::uint64_t started = __atomic_load_n(&host->started, __ATOMIC_ACQUIRE);
  const std::uint64_t completed = __atomic_load_n(&host->completed, __ATOMIC_ACQUIRE);
  if (consumed == ring.copied_consumed && started == ring.copied_started && completed == ring.copied_completed)
    return Status::kOk;
  ring.copied_consumed = consumed;
  ring.copied_started = started;
  ring.copied_completed = completed;
  return backend_->copy_async(ring.device_words, host, offsetof(GdaRingWords, failed), copy_stream_);
}

void GdaProxy::fail_device_copies() {
  for (Ring& ring : rings_)
    if (ring.device_words)
      FERRY_LOG_IF_FAILED(backend_->copy_async(&ring.device_words->failed, &ring.view.words->failed,
                                               sizeof(ring.view.words->failed), copy_stream_));
}

void GdaProxy::start() {
  if (thread_.joinable() || stopping_.load(std::memory_order_acquire)) return;
  thread_ = std::thread([this] { run(); });
  if (stall_limit_.count() > 0) watchdog_ = std::thread([this] { watch(); });
}

void GdaProxy::stop() {
  {
    std::lock_guard<std::mutex> lock(watchdog_mutex_);
    stopping_.store(true, std::memory_order_release);
  }
  watchdog_wake_.notify_all();
  if (watchdog_.joinable()) watchdog_.join();
  const bool was_running = thread_.joinable();
  if (was_running) thread_.join();
  // Producers still waiting for room or completion return.
  for (Ring& ring : rings_) __atomic_store_n(&ring.view.words->failed, 1u, __ATOMIC_RELEASE);
  if (was_running && copy_stream_) {
    fail_device_copies();
    FERRY_LOG_IF_FAILED(backend_->stream_synchronize(copy_stream_));
  }
}

void GdaProxy::watch() {
  // The proxy's thread only counts; the times are the watchdog's own: when
  // each count last changed.
  using Clock = std::chrono::steady_clock;
  const auto period =
      std::min<std::chrono::milliseconds>(std::chrono::seconds(1), stall_limit_ / 4 + std::chrono::milliseconds(1));
  std::uint64_t polls = polls_.load(std::memory_order_relaxed), advances = advances_.load(std::memory_order_relaxed);
  Clock::time_point polled = Clock::now(), advanced = polled;
  std::unique_lock<std::mutex> lock(watchdog_mutex_);
  while (!stopping_.load(std::memory_order_acquire) && ok(status())) {
    watchdog_wake_.wait_for(lock, period);
    const Clock::time_point now = Clock::now();
    const auto changed = [&](const std::atomic<std::uint64_t>& count, std::uint64_t* last, Clock::time_point* when) {
      const std::uint64_t seen = count.load(std::memory_order_relaxed);
      if (seen == *last) return;
      *last = seen;
      *when = now;
    };
    changed(polls_, &polls, &polled);
    changed(advances_, &advances, &advanced);
    const std::uint64_t outstanding = outstanding_.load(std::memory_order_relaxed);
    // Held: neither a turn of the loop nor an operation started or finished.
    const bool held = now - std::max(polled, advanced) > stall_limit_;
    const bool stuck = outstanding != 0 && now - advanced > stall_limit_;
    if (!held && !stuck) continue;
    if (held)
      FERRY_WARN(Transport, "gda proxy: its thread has been held in one call for %lld ms%s",
                 static_cast<long long>(stall_limit_.count()),
                 modules_load_lazily_
                     ? " (CUDA loads modules lazily here: a kernel's first launch waits for the device to be idle; "
                       "CUDA_MODULE_LOADING=EAGER avoids it)"
                     : "");
    else
      FERRY_WARN(Transport, "gda proxy: %llu operations started, none finished for %lld ms",
                 static_cast<unsigned long long>(outstanding), static_cast<long long>(stall_limit_.count()));
    fail(Status::kTimeout);
    return;
  }
}

void GdaProxy::fail(Status why) {
  Status expected = Status::kOk;
  if (status_.compare_exchange_strong(expected, why))
    FERRY_WARN(Transport, "gda proxy: an operation failed (%s); its rings are marked failed", status_name(why));
  for (Ring& ring : rings_) __atomic_store_n(&ring.view.words->failed, 1u, __ATOMIC_RELEASE);
}

std::uint64_t GdaProxy::drain(int index, Ring& ring) {
  std::uint64_t started = 0;
  for (;;) {
    GdaDescriptor* slot = &ring.view.slots[ring.next & (ring.view.capacity - 1)];
    if (__atomic_load_n(&slot->published, __ATOMIC_ACQUIRE) != ring.next + 1) return started;
    GdaDescriptor d = *slot;
    const std::uint64_t posted_ns = ring.view.posted_ns ? ring.view.posted_ns[slot - ring.view.slots] : 0;
    const std::uint64_t ticket = ring.next++;
    // The slot is free once copied: a producer waiting for room may write it.
    store_word(&ring.view.words->consumed, ring.next);
    Started& entry = ring.started.emplace_back();
    if (ring.view.posted_ns) {
      entry.traced = d;
      entry.taken_us = trace_now_us();
      entry.posted_us = posted_ns ? static_cast<std::int64_t>(posted_ns / 1000) : entry.taken_us;
    }
    if (returns_value(static_cast<GdaOp>(d.op))) {
      entry.returns_value = true;
      d.source = reinterpret_cast<std::uintptr_t>(&entry.value);
    }
    const Status status = executor_->start(d, index, ticket);
    if (!ok(status)) {
      fail(status);
      return started;
    }
    outstanding_.fetch_add(1, std::memory_order_relaxed);
    advances_.fetch_add(1, std::memory_order_relaxed);
    ++started;
  }
}

void GdaProxy::announce_started() {
  const Status read = executor_->read_sources();
  if (!ok(read)) {
    fail(read);
    return;
  }
  for (Ring& ring : rings_) {
    if (ring.announced == ring.next) continue;
    if (ring.view.posted_ns) {
      const std::int64_t now = trace_now_us();
      // The tickets from `announced` on are the deque's last (none has finished yet).
      const std::size_t fresh = std::min<std::size_t>(ring.next - ring.announced, ring.started.size());
      for (std::size_t i = ring.started.size() - fresh; i < ring.started.size(); ++i) ring.started[i].started_us = now;
    }
    ring.announced = ring.next;
    store_word(&ring.view.words->started, ring.next);
  }
}

void GdaProxy::finish(int index, std::uint64_t ticket) {
  Ring& ring = rings_[index];
  if (ticket < ring.completed || ticket - ring.completed >= ring.started.size()) {
    fail(Status::kInternal);  // an executor that reports what it was not given
    return;
  }
  Started& done = ring.started[ticket - ring.completed];
  done.finished = true;
  outstanding_.fetch_sub(1, std::memory_order_relaxed);
  advances_.fetch_add(1, std::memory_order_relaxed);
  if (ring.view.posted_ns) trace_operation(index, ticket, done);
  if (done.returns_value) {
    ring.unreturned.emplace_back(ticket, done.value);
    return_values(ring);
  }
  const std::uint64_t before = ring.completed;
  while (!ring.started.empty() && ring.started.front().finished) {
    ring.started.pop_front();
    ++ring.completed;
  }
  if (ring.completed != before) {
    store_word(&ring.view.words->completed, ring.completed);
    executed_.fetch_add(ring.completed - before, std::memory_order_relaxed);
  }
}

void GdaProxy::trace_operation(int ring, std::uint64_t ticket, const Started& started) {
  const GdaDescriptor& d = started.traced;
  char args[320];
  std::snprintf(args, sizeof args,
                "\"target\":%d,\"bytes\":%llu,\"ring\":%d,\"ticket\":%llu,\"producer\":%u,\"taken_us\":%lld,"
                "\"started_us\":%lld",
                d.target, static_cast<unsigned long long>(d.bytes), ring, static_cast<unsigned long long>(ticket),
                d.producer, static_cast<long long>(started.taken_us), static_cast<long long>(started.started_us));
  trace_async_span(op_name(static_cast<GdaOp>(d.op)), "gda", trace_new_flow_id(), started.posted_us, trace_now_us(),
                   args);
}

void GdaProxy::return_values(Ring& ring) {
  auto& pending = ring.unreturned;
  for (std::size_t i = 0; i < pending.size();) {
    const auto [ticket, value] = pending[i];
    GdaResult* slot = &ring.view.results[ticket & (ring.view.capacity - 1)];
    if (__atomic_load_n(&slot->ready, __ATOMIC_ACQUIRE) != 0) {
      ++i;  // its producer of one pass earlier has not taken its value yet
      continue;
    }
    slot->value = value;
    store_word(&slot->ready, ticket + 1);
    if (ring.device_results) {
      // Value and mark in one copy of the slot, which stays as written
      // until its producer has seen the copy.
      const Status status =
          backend_->copy_async(&ring.device_results[slot - ring.view.results], slot, sizeof *slot, copy_stream_);
      if (!ok(status)) fail(status);
    }
    pending[i] = pending.back();
    pending.pop_back();
  }
}

bool GdaProxy::idle() const {
  for (const Ring& ring : rings_)
    if (!ring.started.empty()) return false;
  return true;
}

void GdaProxy::run() {
  const auto finished = [this](int ring, std::uint64_t ticket) { finish(ring, ticket); };
  if (copy_stream_ && copy_device_ >= 0) {
    const Status bound = backend_->set_device(copy_device_);
    if (!ok(bound)) fail(bound);
  }
  std::chrono::steady_clock::time_point deadline{};
  int idle_polls = 0;
  for (;;) {
    polls_.fetch_add(1, std::memory_order_relaxed);
    const bool stopping = stopping_.load(std::memory_order_acquire);
    const std::uint64_t done_before = executed();
    std::uint64_t started = 0;
    for (std::size_t i = 0; i < rings_.size() && ok(status()); ++i)
      started += drain(static_cast<int>(i), rings_[i]);
    if (started != 0 && ok(status())) announce_started();
    // Also after a failed start: what finished before it is reported.
    const Status progressed = executor_->progress(finished);
    if (!ok(progressed)) fail(progressed);
    bool values_waiting = false;
    for (Ring& ring : rings_) {
      if (!ring.unreturned.empty()) return_values(ring);
      values_waiting = values_waiting || !ring.unreturned.empty();
      if (ring.device_words && ok(status())) {
        const Status copied = update_device_copy(ring);
        if (!ok(copied)) fail(copied);
      }
    }
    if (!ok(status())) {
      fail_device_copies();
      return;
    }
    // Once stopping: what was published is started; wait for it to finish.
    if (stopping) {
      if (idle() && !executor_->owes_peers()) return;
      if (deadline == std::chrono::steady_clock::time_point{}) deadline = handshake_deadline();
      if (std::chrono::steady_clock::now() > deadline) {
        fail(Status::kTimeout);
        return;
      }
    }
    // Busy while peers wait for this proxy too (an acknowledgement owed).
    if (started != 0 || executed() != done_before || values_waiting || executor_->owes_peers()) {
      idle_polls = 0;
    } else if (++idle_polls > kSpinsBeforeSleep) {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    } else if (idle_polls > kSpinsBeforeYield) {
      std::this_thread::yield();
    }
  }
}

}  // namespace ferry::gda

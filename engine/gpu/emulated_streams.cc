// The emulated device's streams and events (emulated.cc describes the
// device). A stream is a worker thread that runs its tasks in the order they
// were queued; copies, events and stream memory operations are host
// functions queued on it, or run at once when no stream is given.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "engine/common/params.h"
#include "engine/gpu/emulated_internal.h"

namespace ferry::gpu {

struct StreamImpl {
  std::mutex mutex;
  std::condition_variable wake;
  std::condition_variable idle;
  std::deque<std::function<void()>> tasks;
  bool busy = false;
  bool stopping = false;
  std::thread worker;
};

struct EventImpl {
  std::mutex mutex;
  std::condition_variable done;
  std::uint64_t recorded = 0;  // records issued
  std::uint64_t completed = 0; // records reached by the stream
  std::chrono::steady_clock::time_point when;
};

namespace emulated_detail {
namespace {

void worker_loop(StreamImpl* s) {
  std::unique_lock<std::mutex> lock(s->mutex);
  for (;;) {
    s->wake.wait(lock, [s] { return s->stopping || !s->tasks.empty(); });
    if (s->tasks.empty() && s->stopping) return;
    auto task = std::move(s->tasks.front());
    s->tasks.pop_front();
    s->busy = true;
    lock.unlock();
    task();
    lock.lock();
    s->busy = false;
    if (s->tasks.empty()) s->idle.notify_all();
  }
}

void enqueue(StreamImpl* s, std::function<void()> task) {
  {
    std::lock_guard<std::mutex> lock(s->mutex);
    s->tasks.push_back(std::move(task));
  }
  s->wake.notify_one();
}

// Up to this many bytes of aligned words a copy moves word by word.
constexpr std::size_t kMostWordBytes = 256;

template <typename Word>
bool copy_whole_words(char* d, const char* s, std::size_t bytes) {
  const auto aligned = [](const void* p) { return reinterpret_cast<std::uintptr_t>(p) % sizeof(Word) == 0; };
  const bool apart = d + bytes <= s || s + bytes <= d;
  if (bytes > kMostWordBytes || bytes % sizeof(Word) != 0 || !aligned(d) || !aligned(s) || !apart) return false;
  auto* to = reinterpret_cast<Word*>(d);
  const auto* from = reinterpret_cast<const Word*>(s);
  for (std::size_t i = 0; i < bytes / sizeof(Word); ++i)
    __atomic_store_n(to + i, __atomic_load_n(from + i, __ATOMIC_ACQUIRE), __ATOMIC_RELEASE);
  return true;
}

// A small copy of aligned words moves each word whole, as a GPU's copy
// engine does: another thread polling one of them (the GDA proxy's copy of
// its counters, gda_ring.h) reads it whole and ordered after what its
// writer stored before it.
void copy_bytes(char* d, const char* s, std::size_t bytes) {
  if (copy_whole_words<std::uint64_t>(d, s, bytes) || copy_whole_words<std::uint32_t>(d, s, bytes)) return;
  std::memmove(d, s, bytes);
}

}  // namespace

Status EmulatedBackend::copy_async(void* dst, const void* src, std::size_t bytes, Stream stream) {
  if (bytes == 0) return Status::kOk;
  char* d = translate(dst, bytes);
  const char* s = translate(src, bytes);
  if (!d || !s) return Status::kInvalidArgument;
  if (!stream) {
    copy_bytes(d, s, bytes);
    return Status::kOk;
  }
  enqueue(stream, [d, s, bytes] { copy_bytes(d, s, bytes); });
  return Status::kOk;
}

Status EmulatedBackend::stream_create(Stream* stream) {
  auto* s = new StreamImpl;
  s->worker = std::thread(worker_loop, s);
  *stream = s;
  return Status::kOk;
}

Status EmulatedBackend::stream_destroy(Stream stream) {
  if (!stream) return Status::kOk;
  {
    std::lock_guard<std::mutex> lock(stream->mutex);
    stream->stopping = true;
  }
  stream->wake.notify_all();
  stream->worker.join();
  delete stream;
  return Status::kOk;
}

Status EmulatedBackend::stream_synchronize(Stream stream) {
  if (!stream) return Status::kOk;
  std::unique_lock<std::mutex> lock(stream->mutex);
  stream->idle.wait(lock, [stream] { return stream->tasks.empty() && !stream->busy; });
  return Status::kOk;
}

Status EmulatedBackend::stream_done(Stream stream, bool* done) {
  if (!stream) {
    *done = true;
    return Status::kOk;
  }
  std::lock_guard<std::mutex> lock(stream->mutex);
  *done = stream->tasks.empty() && !stream->busy;
  return Status::kOk;
}

// The wait gives up after FERRY_HANDSHAKE_TIMEOUT: the executors run a
// kernel on the calling thread once its stream is idle, so a wait that
// never ended would hold that thread where no deadline could free it. The
// caller's own deadline reports the failure.
Status EmulatedBackend::stream_wait_value(Stream stream, const std::uint32_t* word, std::uint32_t value) {
  auto* shared = reinterpret_cast<std::atomic<std::uint32_t>*>(translate(word, sizeof(*word)));
  if (!shared) return Status::kInvalidArgument;
  const auto limit = std::chrono::seconds(std::max<std::int64_t>(1, params().handshake_timeout));
  auto wait = [shared, value, limit] {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    for (int spins = 0;; ++spins) {
      if (static_cast<std::int32_t>(shared->load(std::memory_order_acquire) - value) >= 0) return;
      if (std::chrono::steady_clock::now() > deadline) return;
      if (spins < 64) {
        std::this_thread::yield();
      } else {
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
    }
  };
  if (stream) {
    enqueue(stream, wait);
  } else {
    wait();
  }
  return Status::kOk;
}

Status EmulatedBackend::stream_write_value(Stream stream, std::uint32_t* word, std::uint32_t value) {
  auto* shared = reinterpret_cast<std::atomic<std::uint32_t>*>(translate(word, sizeof(*word)));
  if (!shared) return Status::kInvalidArgument;
  auto store = [shared, value] { shared->store(value, std::memory_order_release); };
  if (stream) {
    enqueue(stream, store);
  } else {
    store();
  }
  return Status::kOk;
}

Status EmulatedBackend::write_value_now(std::uint32_t* word, std::uint32_t value) {
  return stream_write_value(nullptr, word, value);
}

Status EmulatedBackend::event_create(Event* event) {
  *event = new EventImpl;
  return Status::kOk;
}

Status EmulatedBackend::event_destroy(Event event) {
  delete event;
  return Status::kOk;
}

Status EmulatedBackend::event_record(Event event, Stream stream) {
  std::uint64_t ticket;
  {
    std::lock_guard<std::mutex> lock(event->mutex);
    ticket = ++event->recorded;
  }
  auto mark = [event, ticket] {
    std::lock_guard<std::mutex> lock(event->mutex);
    event->when = std::chrono::steady_clock::now();
    event->completed = ticket;
    event->done.notify_all();
  };
  if (stream) {
    enqueue(stream, mark);
  } else {
    mark();
  }
  return Status::kOk;
}

Status EmulatedBackend::stream_wait_event(Stream stream, Event event) {
  std::uint64_t ticket;
  {
    std::lock_guard<std::mutex> lock(event->mutex);
    ticket = event->recorded;
  }
  auto wait = [event, ticket] {
    std::unique_lock<std::mutex> lock(event->mutex);
    event->done.wait(lock, [event, ticket] { return event->completed >= ticket; });
  };
  if (stream) {
    enqueue(stream, wait);
  } else {
    wait();
  }
  return Status::kOk;
}

Status EmulatedBackend::event_synchronize(Event event) {
  std::unique_lock<std::mutex> lock(event->mutex);
  event->done.wait(lock, [event] { return event->completed == event->recorded; });
  return Status::kOk;
}

Status EmulatedBackend::event_done(Event event, bool* done) {
  std::lock_guard<std::mutex> lock(event->mutex);
  *done = event->completed == event->recorded;
  return Status::kOk;
}

Status EmulatedBackend::event_elapsed_ms(Event start, Event end, float* ms) {
  FERRY_CHECK(event_synchronize(start));
  FERRY_CHECK(event_synchronize(end));
  if (start->completed == 0 || end->completed == 0) return Status::kInvalidArgument;
  *ms = std::chrono::duration<float, std::milli>(end->when - start->when).count();
  return Status::kOk;
}

}  // namespace emulated_detail
}  // namespace ferry::gpu

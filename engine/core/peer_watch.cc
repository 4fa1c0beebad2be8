#include "engine/core/peer_watch.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "engine/common/log.h"

namespace ferry {
namespace {

// Never destroyed: the thread may still run when the process exits.
struct Watcher {
  std::mutex mutex;
  std::condition_variable wake;
  std::vector<PeerWatch*> watches;
  std::thread thread;
  std::shared_ptr<std::atomic<bool>> stop;  // the running thread's
  std::atomic<bool> abandoned{false};
  std::map<gpu::Backend*, std::uint32_t*> words;  // by backend, for its kernels
  std::uint32_t host_word = 0;                    // backends whose kernels run on the host
};

Watcher& watcher() {
  static auto* w = new Watcher;
  return *w;
}

void raise_words(Watcher& w) {
  w.abandoned.store(true, std::memory_order_release);
  __atomic_store_n(&w.host_word, 1u, __ATOMIC_RELEASE);
  for (auto& [backend, word] : w.words) __atomic_store_n(word, 1u, __ATOMIC_RELEASE);
}

// Under the watcher's lock: whether a watched peer has ended (noted).
bool look(Watcher& w) {
  for (PeerWatch* watch : w.watches) {
    if (watch->ended_rank() < 0) continue;
    FERRY_WARN(Coll, "a peer process has ended (%s): device waits of this process give up",
               last_ended_peer().c_str());
    return true;
  }
  return false;
}

void watch_loop(std::shared_ptr<std::atomic<bool>> stop) {
  Watcher& w = watcher();
  std::unique_lock<std::mutex> lock(w.mutex);
  while (!stop->load(std::memory_order_acquire)) {
    w.wake.wait_for(lock, std::chrono::milliseconds(100), [&] { return stop->load(std::memory_order_acquire); });
    if (stop->load(std::memory_order_acquire)) return;
    if (!w.abandoned.load(std::memory_order_relaxed) && look(w)) raise_words(w);
  }
}

}  // namespace

PeerWatch::PeerWatch(std::vector<std::int32_t> pids) : size_(static_cast<int>(pids.size())) {
  liveness_.watch(std::move(pids));
  Watcher& w = watcher();
  std::lock_guard<std::mutex> lock(w.mutex);
  w.watches.push_back(this);
  if (w.thread.joinable()) return;
  w.stop = std::make_shared<std::atomic<bool>>(false);
  w.thread = std::thread(watch_loop, w.stop);
}

PeerWatch::~PeerWatch() {
  Watcher& w = watcher();
  std::thread ending;
  {
    std::lock_guard<std::mutex> lock(w.mutex);
    w.watches.erase(std::remove(w.watches.begin(), w.watches.end(), this), w.watches.end());
    if (!w.watches.empty() || !w.thread.joinable()) return;
    // The last watch: the thread ends; a later watch starts another.
    w.stop->store(true, std::memory_order_release);
    ending = std::move(w.thread);
  }
  w.wake.notify_all();
  ending.join();
}

int PeerWatch::ended_rank() {
  const int ended = liveness_.ended_rank();
  if (ended >= 0) note_ended_peer(ended, size_, liveness_.pid_of(ended));
  return ended;
}

const std::uint32_t* abandon_word(gpu::Backend* backend) {
  Watcher& w = watcher();
  std::lock_guard<std::mutex> lock(w.mutex);
  if (!backend || backend->execution_site() == gpu::ExecutionSite::kHost) return &w.host_word;
  auto found = w.words.find(backend);
  if (found != w.words.end()) return found->second;
  void* word = nullptr;
  if (!ok(backend->pinned_alloc(sizeof(std::uint32_t), &word))) return nullptr;
  *static_cast<std::uint32_t*>(word) = w.abandoned.load(std::memory_order_acquire) ? 1 : 0;
  w.words.emplace(backend, static_cast<std::uint32_t*>(word));
  return static_cast<std::uint32_t*>(word);
}

bool device_waits_abandoned() { return watcher().abandoned.load(std::memory_order_acquire); }

Status abandoned_or(Status waited) {
  return waited == Status::kTimeout && device_waits_abandoned() ? Status::kPeerEnded : waited;
}

}  // namespace ferry

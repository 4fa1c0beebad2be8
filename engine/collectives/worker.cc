#include "engine/collectives/worker.h"

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>

#include "engine/collectives/worker_common.h"
#include "engine/common/params.h"

namespace ferry {
namespace {

std::uint64_t load_acquire(const std::uint64_t* word) { return __atomic_load_n(word, __ATOMIC_ACQUIRE); }
void store_release(std::uint64_t* word, std::uint64_t value) { __atomic_store_n(word, value, __ATOMIC_RELEASE); }

// The emulated device's worker: a host thread with the persistent kernel's
// protocol, so CI runs the mailbox, the idle exit and the restart.
class EmulatedWorkerDevice final : public WorkerDevice {
 public:
  explicit EmulatedWorkerDevice(gpu::Backend* backend) : backend_(backend) { std::memset(&box_, 0, sizeof(box_)); }
  ~EmulatedWorkerDevice() override { join(); }

  Mailbox* mailbox() override { return &box_; }

  Status start(std::uint64_t launch, std::uint64_t first, std::int64_t idle_us) override {
    FERRY_CHECK(join());
    thread_ = std::thread([this, launch, first, idle_us] { loop(launch, first, idle_us); });
    return Status::kOk;
  }

  Status health() override { return Status::kOk; }

  Status join() override {
    if (thread_.joinable()) thread_.join();
    return Status::kOk;
  }

 private:
  void loop(std::uint64_t launch, std::uint64_t next, std::int64_t idle_us) {
    const auto idle_limit = std::chrono::microseconds(idle_us);
    auto idle_since = std::chrono::steady_clock::now();
    for (unsigned spins = 0;; ++spins) {
      if (load_acquire(&box_.stop)) return;
      WorkItem item{};
      if (take(next, &item)) {
        if (!ok(run_work_item_on_host(backend_, item))) __atomic_store_n(&box_.failed, 1, __ATOMIC_RELAXED);
        store_release(&box_.done, next);
        ++next;
        idle_since = std::chrono::steady_clock::now();
        spins = 0;
        continue;
      }
      if (spins > 64) sched_yield();  // ranks and their workers may outnumber cores
      if (std::chrono::steady_clock::now() - idle_since > idle_limit) {
        store_release(&box_.exited, launch);
        return;
      }
    }
  }

  // The item of call `sequence` if its doorbell is complete.
  bool take(std::uint64_t sequence, WorkItem* item) {
    const std::uint32_t flag = doorbell_flag(sequence);
    std::uint32_t words[kDoorbellWords];
    const std::uint64_t first = load_acquire(&box_.doorbell[0]);
    if (first >> 32 != flag) return false;
    const int used = doorbell_words(static_cast<std::uint32_t>(first));
    words[0] = static_cast<std::uint32_t>(first);
    for (int i = 1; i < used; ++i) {
      const std::uint64_t word = load_acquire(&box_.doorbell[i]);
      if (word >> 32 != flag) return false;
      words[i] = static_cast<std::uint32_t>(word);
    }
    if (!decode_doorbell(words, item)) *item = box_.item;
    return true;
  }

  gpu::Backend* backend_;
  Mailbox box_;
  std::thread thread_;
};

}  // namespace

Status run_work_item_on_host(gpu::Backend* backend, const WorkItem& item) {
  switch (item.kind) {
    case WorkKind::kDirectReduce:
      return run_direct_reduce_on_host(backend, item.reduce);
    case WorkKind::kCopies:
      for (int c = 0; c < item.copies.count; ++c)
        std::memmove(backend->host_view(item.copies.destinations[c]), backend->host_view(item.copies.sources[c]),
                     item.copies.bytes[c]);
      return Status::kOk;
  }
  return Status::kInvalidArgument;
}

std::unique_ptr<WorkerDevice> make_worker_device(gpu::Backend* backend, int device, int blocks) {
  switch (backend->kind()) {
#ifdef FERRY_HAVE_CUDA
    case gpu::BackendKind::kCuda:
      return make_cuda_worker_device(device, blocks);
#endif
    case gpu::BackendKind::kEmulated:
      return std::make_unique<EmulatedWorkerDevice>(backend);
    default:
      return nullptr;
  }
}

std::unique_ptr<Worker> Worker::create(gpu::Backend* backend, int device) {
  if (!params().worker) return nullptr;
  return create(backend, device, static_cast<int>(std::min<std::int64_t>(params().worker_blocks, 1024)),
                params().worker_idle_us);
}

std::unique_ptr<Worker> Worker::create(gpu::Backend* backend, int device, int blocks, std::int64_t idle_us) {
  blocks = std::max(1, blocks);
  idle_us = std::max<std::int64_t>(0, idle_us);
  std::unique_ptr<WorkerDevice> worker_device = make_worker_device(backend, device, blocks);
  if (!worker_device) return nullptr;
  FERRY_INFO(Coll, "engine worker on device %d: %d blocks, idle exit after %lld us", device, blocks,
             static_cast<long long>(idle_us));
  return std::unique_ptr<Worker>(
      new Worker(std::move(worker_device), blocks, idle_us, backend->kind() == gpu::BackendKind::kEmulated));
}

Worker::~Worker() {
  store_release(&device_->mailbox()->stop, 1);
  device_->join();
}

Status Worker::run(const WorkItem& item) {
  std::lock_guard<std::mutex> lock(mutex_);
  Mailbox* box = device_->mailbox();
  const std::uint64_t sequence = ++sequence_;
  std::uint32_t words[kDoorbellWords];
  const int used = encode_doorbell(item, words);
  if (doorbell_in_mailbox(words[0])) box->item = item;  // too large for the doorbell
  const std::uint64_t flag = doorbell_flag(sequence);
  for (int i = 0; i < used; ++i) store_release(&box->doorbell[i], flag << 32 | words[i]);
  if (!running_) {
    FERRY_CHECK(device_->start(++launch_, sequence, idle_us_));
    running_ = true;
  }

  // Spin: the answer usually comes within microseconds. The worker may have
  // left idle just before it could see this item; then start it again.
  const auto limit = std::chrono::seconds(params().handshake_timeout);
  const auto start = std::chrono::steady_clock::now();
  for (unsigned spins = 1; load_acquire(&box->done) < sequence; ++spins) {
    if (load_acquire(&box->exited) == launch_) {
      FERRY_TRACE(Coll, "engine worker left idle; starting it again");
      FERRY_CHECK(device_->start(++launch_, sequence, idle_us_));
      continue;
    }
    // On the emulated device the worker is a thread that needs a core.
    if (host_worker_ && spins % 64 == 0) sched_yield();
    if (spins % 1024 != 0) continue;
    const Status health = device_->health();
    if (!ok(health)) {
      running_ = false;
      FERRY_WARN(Coll, "engine worker failed: %s", status_name(health));
      return health;
    }
    if (limit.count() > 0 && std::chrono::steady_clock::now() - start > limit) {
      FERRY_WARN(Coll, "engine worker did not finish item %llu in %lld s (FERRY_HANDSHAKE_TIMEOUT)",
                 static_cast<unsigned long long>(sequence), static_cast<long long>(limit.count()));
      return Status::kTimeout;
    }
  }
  if (__atomic_exchange_n(&box->failed, 0, __ATOMIC_ACQ_REL)) return Status::kUnsupported;
  return Status::kOk;
}

}  // namespace ferry

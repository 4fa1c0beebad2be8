#include "engine/collectives/worker.h"

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "engine/collectives/worker_common.h"
#include "engine/common/params.h"
#include "engine/common/trace.h"
#include "engine/core/peer_watch.h"

namespace ferry {
namespace {

std::uint64_t load_acquire(const std::uint64_t* word) { return __atomic_load_n(word, __ATOMIC_ACQUIRE); }
void store_release(std::uint64_t* word, std::uint64_t value) { __atomic_store_n(word, value, __ATOMIC_RELEASE); }

// The emulated device's worker: a host thread with the persistent kernel's
// protocol, so CI runs the mailbox, the idle exit and the restart.
class EmulatedWorkerDevice final : public WorkerDevice {
 public:
  EmulatedWorkerDevice(gpu::Backend* backend, int blocks) : backend_(backend), blocks_(blocks) {
    std::memset(&box_, 0, sizeof(box_));
  }
  ~EmulatedWorkerDevice() override { FERRY_LOG_IF_FAILED(join()); }

  Mailbox* mailbox() override { return &box_; }
  int blocks() const override { return blocks_; }

  Status start(std::uint64_t launch, std::uint64_t first, std::uint64_t, std::int64_t idle_us) override {
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
        if (trace_enabled()) box_.item_started_ns = static_cast<std::uint64_t>(trace_now_ns());
        const Status status = run_work_item_on_host(backend_, item);
        if (trace_enabled()) box_.item_ended_ns = static_cast<std::uint64_t>(trace_now_ns());
        if (!ok(status)) __atomic_store_n(&box_.failed, static_cast<std::int32_t>(status), __ATOMIC_RELAXED);
        // The thread is every block: it reports for the others too.
        if (item.blocks > 1)
          for (int b = 1; b < blocks_; ++b) store_release(&box_.block_done[b], next);
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
  int blocks_;
  Mailbox box_;
  std::thread thread_;
};

// The LL protocol on the emulated device: the persistent kernel's lines
// (ll_device.cuh), written and read as 8-byte atomic LL words.
class HostLl {
 public:
  template <typename LlArgs>
  HostLl(gpu::Backend* backend, const LlArgs& args)
      : backend_(backend), flag_(args.flag), parity_(args.parity), nranks_(args.nranks),
        timeout_(std::chrono::milliseconds(args.timeout_ms)), start_(std::chrono::steady_clock::now()) {}

  // bytes of data (host memory) into sender's slot of a receiver's buffer.
  void send(void* receiver_buffer, int sender, const unsigned char* data, std::size_t bytes) {
    for (std::size_t c = 0; c * kLlChunkBytes < bytes; ++c) {
      std::uint64_t* words = words_at(receiver_buffer, sender, c);
      for (int w = 0; w < 4; ++w) {
        std::uint32_t value = 0;
        const std::size_t at = c * kLlChunkBytes + 4 * w;
        if (at < bytes) std::memcpy(&value, data + at, std::min<std::size_t>(4, bytes - at));
        store_release(&words[w], static_cast<std::uint64_t>(flag_) << 32 | value);
      }
    }
  }

  // Chunk c from sender's slot of own_buffer: its 16 data bytes.
  Status chunk(void* own_buffer, int sender, std::size_t c, unsigned char* data) {
    const std::uint64_t* words = words_at(own_buffer, sender, c);
    for (int w = 0; w < 4; ++w) {
      std::uint64_t word;
      for (unsigned spins = 0; (word = load_acquire(&words[w])) >> 32 != flag_; ++spins) {
        if (spins < 64) continue;
        sched_yield();  // the sender may be waiting for this core
        if (device_waits_abandoned() ||
            (timeout_.count() > 0 && std::chrono::steady_clock::now() - start_ > timeout_))
          return Status::kTimeout;
      }
      const std::uint32_t value = static_cast<std::uint32_t>(word);
      std::memcpy(data + 4 * w, &value, 4);
    }
    return Status::kOk;
  }

  // bytes from sender's slot of own_buffer into data (host memory).
  Status receive(void* own_buffer, int sender, unsigned char* data, std::size_t bytes) {
    unsigned char line[kLlChunkBytes];
    for (std::size_t c = 0; c * kLlChunkBytes < bytes; ++c) {
      FERRY_CHECK(chunk(own_buffer, sender, c, line));
      std::memcpy(data + c * kLlChunkBytes, line, std::min(kLlChunkBytes, bytes - c * kLlChunkBytes));
    }
    return Status::kOk;
  }

 private:
  std::uint64_t* words_at(void* buffer, int sender, std::size_t c) {
    return static_cast<std::uint64_t*>(
        static_cast<void*>(static_cast<char*>(backend_->host_view(buffer)) + ll_chunk_offset(parity_, sender, c, nranks_)));
  }

  gpu::Backend* backend_;
  std::uint32_t flag_;
  std::uint32_t parity_;
  int nranks_;
  std::chrono::milliseconds timeout_;
  std::chrono::steady_clock::time_point start_;
};

unsigned char* view(gpu::Backend* backend, const void* device_ptr) {
  return static_cast<unsigned char*>(backend->host_view(device_ptr));
}

// Rank p's receive buffer: inline, or past kInlineRanks from the table.
template <typename LlArgs>
void* peer_buffer(gpu::Backend* backend, const LlArgs& a, int p) {
  return p < kInlineRanks ? a.buffers[p] : static_cast<void* const*>(backend->host_view(a.buffer_table))[p];
}

// An alltoallv's blocks with peer p: inline, or past kInlineRanks from the table.
LlBlocks blocks_with(gpu::Backend* backend, const LlAlltoallvArgs& a, int p) {
  if (p < kInlineRanks) return {a.send[p], a.send_bytes[p], a.recv[p], a.recv_bytes[p]};
  return static_cast<const LlBlocks*>(backend->host_view(a.block_table))[p];
}

struct HostLlAllreduce {
  const LlAllreduceArgs& args;
  gpu::Backend* backend;
  Status status = Status::kOk;

  template <typename T, ReduceOp Op>
  void run() {
    HostLl ll(backend, args);
    const std::size_t bytes = args.count * sizeof(T);
    const std::size_t chunks = (bytes + kLlChunkBytes - 1) / kLlChunkBytes;
    std::vector<unsigned char> own(chunks * kLlChunkBytes, 0), result(chunks * kLlChunkBytes);
    std::memcpy(own.data(), view(backend, args.input), bytes);
    for (int p = 0; p < args.nranks; ++p)
      if (p != args.rank) ll.send(peer_buffer(backend, args, p), args.rank, own.data(), bytes);
    constexpr int kPerChunk = static_cast<int>(kLlChunkBytes / sizeof(T));
    for (std::size_t c = 0; c < chunks; ++c) {
      T acc[kPerChunk];
      for (int r = 0; r < args.nranks; ++r) {
        unsigned char data[kLlChunkBytes];
        if (r == args.rank) {
          std::memcpy(data, &own[c * kLlChunkBytes], kLlChunkBytes);
        } else if (!ok(status = ll.chunk(peer_buffer(backend, args, args.rank), r, c, data))) {
          return;
        }
        T values[kPerChunk];
        std::memcpy(values, data, kLlChunkBytes);
        for (int e = 0; e < kPerChunk; ++e) acc[e] = r == 0 ? values[e] : reduce<T, Op>(acc[e], values[e]);
      }
      std::memcpy(&result[c * kLlChunkBytes], acc, kLlChunkBytes);
    }
    std::memcpy(view(backend, args.output), result.data(), bytes);
  }
};

// LL128 on the emulated device: a line's data bytes, then its flag word with
// release order (a GPU stores the line in one transaction instead).
struct HostLl128Allreduce {
  const LlAllreduceArgs& args;
  gpu::Backend* backend;
  Status status = Status::kOk;

  std::uint64_t* flag_of(char* line) { return reinterpret_cast<std::uint64_t*>(line + kLl128LineData); }
  char* line_at(void* buffer, int sender, std::size_t line) {
    return static_cast<char*>(backend->host_view(buffer)) + ll128_line_offset(args.parity, sender, line, args.nranks);
  }

  template <typename T, ReduceOp Op>
  void run() {
    if constexpr (kLl128Reduces<T, Op>) run_lines<T, Op>();
  }

  template <typename T, ReduceOp Op>
  void run_lines() {
    const std::size_t bytes = args.count * sizeof(T);
    const std::size_t lines = (bytes + kLl128LineData - 1) / kLl128LineData;
    std::vector<unsigned char> own(lines * kLl128LineData, 0), result(lines * kLl128LineData);
    std::memcpy(own.data(), view(backend, args.input), bytes);
    const std::uint64_t flag_word = ll128_flag_word(args.flag);
    for (int p = 0; p < args.nranks; ++p) {
      if (p == args.rank) continue;
      for (std::size_t l = 0; l < lines; ++l) {
        char* line = line_at(peer_buffer(backend, args, p), args.rank, l);
        std::memcpy(line, &own[l * kLl128LineData], kLl128LineData);
        store_release(flag_of(line), flag_word);
      }
    }
    const auto start = std::chrono::steady_clock::now();
    const std::chrono::milliseconds timeout(args.timeout_ms);
    constexpr int kPerLine = static_cast<int>(kLl128LineData / sizeof(T));
    for (std::size_t l = 0; l < lines; ++l) {
      T acc[kPerLine];
      for (int r = 0; r < args.nranks; ++r) {
        const unsigned char* data = &own[l * kLl128LineData];
        if (r != args.rank) {
          char* line = line_at(peer_buffer(backend, args, args.rank), r, l);
          for (unsigned spins = 0; load_acquire(flag_of(line)) != flag_word; ++spins) {
            if (spins < 64) continue;
            sched_yield();  // the sender may be waiting for this core
            const bool late = timeout.count() > 0 && std::chrono::steady_clock::now() - start > timeout;
            if (late || device_waits_abandoned()) {
              status = Status::kTimeout;
              return;
            }
          }
          data = reinterpret_cast<const unsigned char*>(line);
        }
        T values[kPerLine];
        std::memcpy(values, data, kLl128LineData);
        for (int e = 0; e < kPerLine; ++e) acc[e] = r == 0 ? values[e] : reduce<T, Op>(acc[e], values[e]);
      }
      std::memcpy(&result[l * kLl128LineData], acc, kLl128LineData);
    }
    std::memcpy(view(backend, args.output), result.data(), bytes);
  }
};

Status run_ll_bcast_on_host(gpu::Backend* backend, const LlBcastArgs& b) {
  HostLl ll(backend, b);
  if (b.rank != b.root)
    return ll.receive(peer_buffer(backend, b, b.rank), b.root, view(backend, b.buffer), b.bytes);
  for (int p = 0; p < b.nranks; ++p)
    if (p != b.root) ll.send(peer_buffer(backend, b, p), b.root, view(backend, b.buffer), b.bytes);
  return Status::kOk;
}

Status run_ll_alltoallv_on_host(gpu::Backend* backend, const LlAlltoallvArgs& a) {
  HostLl ll(backend, a);
  for (int p = 0; p < a.nranks; ++p) {
    const LlBlocks blocks = blocks_with(backend, a, p);
    if (p != a.rank && blocks.send_bytes > 0)
      ll.send(peer_buffer(backend, a, p), a.rank, view(backend, blocks.send), blocks.send_bytes);
  }
  const LlBlocks mine = blocks_with(backend, a, a.rank);
  std::memmove(view(backend, mine.recv), view(backend, mine.send), mine.recv_bytes);
  for (int p = 0; p < a.nranks; ++p) {
    const LlBlocks blocks = blocks_with(backend, a, p);
    if (p != a.rank && blocks.recv_bytes > 0)
      FERRY_CHECK(ll.receive(peer_buffer(backend, a, a.rank), p, view(backend, blocks.recv), blocks.recv_bytes));
  }
  return Status::kOk;
}

}  // namespace

Status run_work_item_on_host(gpu::Backend* backend, const WorkItem& item) {
  switch (item.kind) {
    case WorkKind::kDirectReduce:
      return run_direct_reduce_on_host(backend, item.reduce);
    case WorkKind::kCopies:
      return run_copies_on_host(backend, item.copies);
    case WorkKind::kLlAllreduce: {
      if (item.ll.count * data_type_size(item.ll.type) > ll_max_bytes(item.ll.nranks)) return Status::kInvalidArgument;
      HostLlAllreduce visitor{item.ll, backend};
      if (!dispatch_reduction(item.ll.type, item.ll.op, visitor)) return Status::kUnsupported;
      return visitor.status;
    }
    case WorkKind::kLl128Allreduce: {
      if (item.ll.count * data_type_size(item.ll.type) > ll128_max_bytes(item.ll.nranks))
        return Status::kInvalidArgument;
      if (!ll128_reduces(item.ll.type, item.ll.op)) return Status::kUnsupported;
      HostLl128Allreduce visitor{item.ll, backend};
      if (!dispatch_reduction(item.ll.type, item.ll.op, visitor)) return Status::kUnsupported;
      return visitor.status;
    }
    case WorkKind::kLlBcast:
      if (item.ll_bcast.bytes > ll_max_bytes(item.ll_bcast.nranks)) return Status::kInvalidArgument;
      return run_ll_bcast_on_host(backend, item.ll_bcast);
    case WorkKind::kLlAlltoallv:
      for (int p = 0; p < item.ll_alltoallv.nranks; ++p) {
        const LlBlocks blocks = blocks_with(backend, item.ll_alltoallv, p);
        if (std::max(blocks.send_bytes, blocks.recv_bytes) > ll_max_bytes(item.ll_alltoallv.nranks))
          return Status::kInvalidArgument;
      }
      return run_ll_alltoallv_on_host(backend, item.ll_alltoallv);
  }
  return Status::kInvalidArgument;
}

std::size_t worker_max_bytes() {
  return static_cast<std::size_t>(std::max<std::int64_t>(0, params().worker_max_bytes));
}

int worker_blocks() {
  return static_cast<int>(std::clamp<std::int64_t>(params().worker_blocks, 1, kMaxWorkerBlocks));
}

std::size_t ll_call_max_bytes(int nranks) { return std::min(ll_max_bytes(nranks), worker_max_bytes()); }
std::size_t ll128_call_max_bytes(int nranks) {
#ifdef FERRY_HAVE_HIP
  // Where lines do not arrive whole (AMD GPUs), LL128 runs no call: the
  // model and FERRY_TUNE's rules pass it by.
  const gpu::Backend* backend = gpu::active_backend();
  if (backend && !backend->whole_line_stores()) return 0;
#endif
  return std::min(ll128_max_bytes(nranks), worker_max_bytes());
}

std::unique_ptr<WorkerDevice> make_worker_device(gpu::Backend* backend, int device, int blocks) {
  if (backend->execution_site() == gpu::ExecutionSite::kHost)
    return std::make_unique<EmulatedWorkerDevice>(backend, blocks);
#ifdef FERRY_HAVE_GPU_KERNELS
  return make_gpu_worker_device(device, blocks, abandon_word(backend));
#else
  return nullptr;
#endif
}

std::unique_ptr<Worker> Worker::create(gpu::Backend* backend, int device) {
  if (!params().worker) return nullptr;
  return create(backend, device, worker_blocks(), params().worker_idle_us);
}

std::unique_ptr<Worker> Worker::create(gpu::Backend* backend, int device, int blocks, std::int64_t idle_us) {
  blocks = std::clamp(blocks, 1, kMaxWorkerBlocks);
  idle_us = std::max<std::int64_t>(0, idle_us);
  std::unique_ptr<WorkerDevice> worker_device = make_worker_device(backend, device, blocks);
  if (!worker_device) return nullptr;
  blocks = worker_device->blocks();
  FERRY_INFO(Coll, "engine worker on device %d: %d blocks, idle exit after %lld us", device, blocks,
             static_cast<long long>(idle_us));
  return std::unique_ptr<Worker>(
      new Worker(std::move(worker_device), device, blocks, idle_us,
                 backend->execution_site() == gpu::ExecutionSite::kHost));
}

Worker::~Worker() {
  store_release(&device_->mailbox()->stop, 1);
  FERRY_LOG_IF_FAILED(device_->join());
}

Status Worker::run(const WorkItem& item) {
  std::lock_guard<std::mutex> lock(mutex_);
  Mailbox* box = device_->mailbox();
  const std::uint64_t sequence = ++sequence_;
  const std::int64_t posted_ns = GpuSpan::open() ? trace_now_ns() : 0;
  std::uint32_t words[kDoorbellWords];
  const int used = encode_doorbell(item, words);
  if (doorbell_in_mailbox(words[0])) box->item = item;  // too large for the doorbell
  const std::uint64_t flag = doorbell_flag(sequence);
  for (int i = 0; i < used; ++i) store_release(&box->doorbell[i], flag << 32 | words[i]);
  if (!running_) {
    FERRY_CHECK(device_->start(++launch_, sequence, shared_, idle_us_));
    running_ = true;
  }
  // An item shared among blocks is done when each of its blocks reported it.
  const int share = std::clamp(item.blocks, 1, blocks_);
  const bool shared = share > 1;
  auto finished = [&] {
    if (load_acquire(&box->done) < sequence) return false;
    for (int b = 1; b < share; ++b)
      if (load_acquire(&box->block_done[b]) < sequence) return false;
    return true;
  };

  // Spin: the answer usually comes within microseconds. The worker may have
  // left idle just before it could see this item; then start it again.
  const auto limit = std::chrono::seconds(params().handshake_timeout);
  const auto start = std::chrono::steady_clock::now();
  for (unsigned spins = 1; !finished(); ++spins) {
    // Block 0 leaves only between items, after reporting the last one it
    // took, and the other blocks finish whatever it passed them before they
    // leave. So a worker that left without reporting this item never took
    // it: start it again. One that reported it is only waiting for its
    // other blocks, and starting again would run the item twice.
    if (load_acquire(&box->exited) == launch_ && load_acquire(&box->done) < sequence) {
      FERRY_TRACE(Coll, "engine worker left idle; starting it again");
      FERRY_CHECK(device_->start(++launch_, sequence, shared_, idle_us_));
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
  if (shared) shared_ = sequence;
  const std::int32_t failure = __atomic_exchange_n(&box->failed, 0, __ATOMIC_ACQ_REL);
  if (failure != 0) {
    const Status status = abandoned_or(static_cast<Status>(failure));
    FERRY_WARN(Coll, "engine worker: item %llu failed: %s", static_cast<unsigned long long>(sequence),
               status_name(status));
    return status;
  }
  if (posted_ns != 0) {
    const std::int64_t started_ns = static_cast<std::int64_t>(load_acquire(&box->item_started_ns));
    const std::int64_t ended_ns = static_cast<std::int64_t>(load_acquire(&box->item_ended_ns));
    clock_.narrow(started_ns, ended_ns, posted_ns, trace_now_ns());
    GpuSpan::worker_ran(device_index_, clock_.to_system_ns(started_ns), clock_.to_system_ns(ended_ns));
  }
  return Status::kOk;
}

}  // namespace ferry

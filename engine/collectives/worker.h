// The engine worker: a device-resident loop per communicator and device
// that runs small collective steps without a kernel launch per call.
//
// A blocking MPI call pays for a kernel launch + stream synchronize alone
// more than a whole small allreduce should cost (bench/mailbox-latency,
// bench/RESULTS.md). The worker is a persistent kernel (on the emulated
// device, a host thread) that polls a mailbox in host memory: the calling
// thread writes a work item and its sequence number, the worker runs it and
// writes the sequence back as done, and the caller, spinning on that word,
// returns. After FERRY_WORKER_IDLE_US without work the worker exits, so an
// idle application holds no SM and cudaDeviceSynchronize returns (it waits
// at most that long); the next call starts it again.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <mutex>

#include "engine/core/executor.h"
#include "engine/core/gpu_span.h"
#include "engine/core/reduce_common.h"
#include "engine/gpu/gpu.h"

namespace ferry {

constexpr int kMaxWorkerCopies = kMaxListedCopies;

// The LL protocol's receive buffers: every rank owns one, in device memory
// every peer maps, with a slot per sender and per call parity. A sender
// writes its data there as 16-byte lines of two LL words (4 data bytes and
// the call's 4-byte flag each, worker_common.h), so the receiver knows the
// data has arrived from the data itself: no separate flag to wait for, and
// no mapping of the application's buffers. The buffer is cut into
// 2 parities x nranks slots, so fewer ranks take larger calls: 512 KiB a
// sender at 2 ranks, 64 KiB at 16.
constexpr std::size_t kLlBufferBytes = 4 << 20;  // per rank
constexpr std::size_t kLlSlotAlign = 256;

// One sender's slot for one parity, in bytes of LL lines.
FERRY_HOST_DEVICE std::size_t ll_slot_bytes(int nranks) {
  return kLlBufferBytes / (2 * static_cast<std::size_t>(nranks < 1 ? 1 : nranks)) / kLlSlotAlign * kLlSlotAlign;
}
// The payload a slot carries: half of it is flags.
FERRY_HOST_DEVICE std::size_t ll_max_bytes(int nranks) { return ll_slot_bytes(nranks) / 2; }

// LL128 over the same receive buffers: 128-byte lines of 120 data bytes and
// an 8-byte flag (worker_common.h), 15/16 of a slot's bytes for data where
// LL carries 1/2.
FERRY_HOST_DEVICE std::size_t ll128_max_bytes(int nranks) { return ll_slot_bytes(nranks) / 128 * 120; }

// Direct reduces and copy lists run on worker block 0 alone, and only up
// to this many bytes per rank.
constexpr std::size_t kWorkerOneBlockBytes = 16 << 10;
// LL calls of up to kLlOneBlockBytes per rank run on block 0 alone; larger
// ones on a block per kLlBytesPerSharingBlock, as far as the worker's
// blocks go. A thread's chunks are a chain of dependent memory round trips,
// so more blocks beat more chunks per thread, from 16 KiB up; 8 KiB is even
// on one or two (two workers on one H200: bench/worker-latency,
// bench/RESULTS.md).
constexpr std::size_t kLlOneBlockBytes = 8 << 10;
constexpr std::size_t kLlBytesPerSharingBlock = 4 << 10;

// The worker blocks an LL call that moves bytes per rank runs on: block 0
// alone up to one_block_bytes; above, a block for every bytes_per_block
// (every block when 0), at least two and at most the worker's blocks.
inline int ll_share_blocks(std::size_t bytes, int worker_blocks, std::size_t one_block_bytes = kLlOneBlockBytes,
                           std::size_t bytes_per_block = kLlBytesPerSharingBlock) {
  if (bytes <= one_block_bytes || worker_blocks <= 1) return 1;
  if (bytes_per_block == 0) return worker_blocks;
  const std::size_t wanted = (bytes + bytes_per_block - 1) / bytes_per_block;
  return static_cast<int>(std::min<std::size_t>(std::max<std::size_t>(wanted, 2), worker_blocks));
}
// FERRY_WORKER_MAX_BYTES, never negative.
std::size_t worker_max_bytes();
// FERRY_WORKER_BLOCKS, 1 to kMaxWorkerBlocks.
int worker_blocks();
// The largest block an LL call among nranks carries: the LL slots and
// FERRY_WORKER_MAX_BYTES.
std::size_t ll_call_max_bytes(int nranks);
std::size_t ll128_call_max_bytes(int nranks);

// In every LL call's arguments: every rank's receive buffer, mapped here,
// the first kInlineRanks inline and, past them, from buffer_table (device
// memory the communicator keeps: Communicator::LlChannel).

// One-shot allreduce over LL: every rank sends its input into every peer's
// receive buffer and reduces, in rank order, what arrives in its own.
struct LlAllreduceArgs {
  const void* input;
  void* output;
  void* buffers[kInlineRanks];
  void* const* buffer_table;
  std::uint64_t count;
  DataType type;
  ReduceOp op;
  std::int32_t rank;
  std::int32_t nranks;
  std::uint32_t flag;         // the call's flag: never 0, new every call
  std::uint32_t parity;       // which half of the buffers the call uses
  std::uint32_t timeout_ms;   // longest wait for a peer's data (0: no limit)
  std::uint32_t reserved;
};

// Bcast over LL: the root stores its buffer into every peer's receive
// buffer; every other rank copies what arrives into its own buffer.
struct LlBcastArgs {
  void* buffer;  // the root's source, or this rank's destination
  void* buffers[kInlineRanks];
  void* const* buffer_table;
  std::uint64_t bytes;
  std::int32_t rank;
  std::int32_t nranks;
  std::int32_t root;
  std::uint32_t flag;
  std::uint32_t parity;
  std::uint32_t timeout_ms;
};

// An alltoallv's blocks with one peer.
struct LlBlocks {
  const void* send;
  std::uint64_t send_bytes;
  void* recv;
  std::uint64_t recv_bytes;
};

// Alltoallv over LL: every rank stores its block for peer p into p's
// receive buffer and copies each peer's arriving block into place; its own
// block is a local copy. Blocks past kInlineRanks are in block_table
// (device memory, written for the call: Communicator::LlChannel).
struct LlAlltoallvArgs {
  const void* send[kInlineRanks];
  std::uint64_t send_bytes[kInlineRanks];
  void* recv[kInlineRanks];
  std::uint64_t recv_bytes[kInlineRanks];
  void* buffers[kInlineRanks];
  void* const* buffer_table;
  const LlBlocks* block_table;
  std::int32_t rank;
  std::int32_t nranks;
  std::uint32_t flag;
  std::uint32_t parity;
  std::uint32_t timeout_ms;
  std::uint32_t reserved;
};

enum class WorkKind : std::int32_t {
  kDirectReduce = 1,
  kCopies = 2,
  kLlAllreduce = 3,
  kLlBcast = 4,
  kLlAlltoallv = 5,
  kLl128Allreduce = 6  // LlAllreduceArgs, over LL128 lines
};

struct WorkItem {
  WorkKind kind;
  std::int32_t blocks;  // worker blocks that share the item (the rest skip it)
  DirectReduceArgs reduce;
  CopyListArgs copies;
  LlAllreduceArgs ll;
  LlBcastArgs ll_bcast;
  LlAlltoallvArgs ll_alltoallv;
};

constexpr int kDoorbellWords = 64;  // 512 bytes: one 16-byte load per lane of a warp
constexpr int kMaxWorkerBlocks = 64;

// Host memory both sides see. The caller writes the item into the doorbell
// as LL words flagged with its sequence (worker_common.h), and into item
// when it does not fit there; the worker's block 0 writes done (after its
// results are visible system-wide) and, when it leaves idle, exited = its
// launch number. Each other block reports the items shared among all
// blocks in block_done, so that no block waits for another to finish.
struct alignas(64) Mailbox {
  std::uint64_t stop;  // nonzero: the worker returns at once
  char padding0[56];
  std::uint64_t done;
  std::uint64_t exited;
  std::int32_t failed;  // nonzero: an item failed on the worker
  std::int32_t unused;
  // With FERRY_TRACE, block 0's clock (the GPU's %globaltimer; the system
  // clock on the emulated device) when it began and ended its share of the
  // item it reports in done; written before done.
  std::uint64_t item_started_ns;
  std::uint64_t item_ended_ns;
  char padding1[24];
  std::uint64_t doorbell[kDoorbellWords];
  WorkItem item;
  alignas(64) std::uint64_t block_done[kMaxWorkerBlocks];  // [0] unused: block 0 reports in done
};
static_assert(offsetof(Mailbox, done) == 64 && offsetof(Mailbox, item_started_ns) == 88 &&
                  offsetof(Mailbox, doorbell) == 128 &&
                  offsetof(Mailbox, item) == 128 + 8 * kDoorbellWords && offsetof(Mailbox, block_done) % 64 == 0,
              "Mailbox is shared between host and device; keep its layout fixed");

// The device side of a worker: the persistent kernel, or the emulated
// device's thread.
class WorkerDevice {
 public:
  virtual ~WorkerDevice() = default;
  virtual Mailbox* mailbox() = 0;
  // The blocks it runs: those asked for, or fewer where the GPU cannot
  // hold them all at once.
  virtual int blocks() const = 0;
  // Starts the worker for launch number `launch`; it takes items from
  // sequence first on, and leaves when idle for idle_us. last_shared: the
  // last item shared among all blocks so far (0: none).
  virtual Status start(std::uint64_t launch, std::uint64_t first, std::uint64_t last_shared,
                       std::int64_t idle_us) = 0;
  // kOk while running or cleanly exited; an error once the device side failed.
  virtual Status health() = 0;
  // Waits until the device side has returned (after stop, or idle).
  virtual Status join() = 0;
};

// Both back ends; nullptr when the backend has no worker (or CUDA was not
// built). blocks: the worker's thread blocks (the emulated device's one
// thread reports for all of them).
std::unique_ptr<WorkerDevice> make_worker_device(gpu::Backend* backend, int device, int blocks);
#ifdef FERRY_HAVE_GPU_KERNELS
// abandon: the word its waits poll beside their deadline (peer_watch.h).
std::unique_ptr<WorkerDevice> make_gpu_worker_device(int device, int blocks, const std::uint32_t* abandon);
#endif

// Runs one work item on the emulated device's host views (the worker
// thread's body, and the executor without a worker).
Status run_work_item_on_host(gpu::Backend* backend, const WorkItem& item);

class Worker {
 public:
  // As the parameters say (FERRY_WORKER*); nullptr when the worker is off or
  // the backend has none: then calls launch kernels.
  static std::unique_ptr<Worker> create(gpu::Backend* backend, int device);
  static std::unique_ptr<Worker> create(gpu::Backend* backend, int device, int blocks, std::int64_t idle_us);
  ~Worker();

  int blocks() const { return blocks_; }
  // Times the device side was started (first call, and after each idle exit).
  std::uint64_t launches() const { return launch_; }
  // Runs item on the device and returns when its results are visible to
  // later work on any stream. Calls are serialized.
  Status run(const WorkItem& item);

 private:
  Worker(std::unique_ptr<WorkerDevice> device, int device_index, int blocks, std::int64_t idle_us, bool host_worker)
      : device_(std::move(device)),
        device_index_(device_index),
        blocks_(blocks),
        idle_us_(idle_us),
        host_worker_(host_worker) {}

  std::mutex mutex_;
  std::unique_ptr<WorkerDevice> device_;
  int device_index_;  // the GPU it runs on
  int blocks_;
  std::int64_t idle_us_;
  bool host_worker_;  // the device side is a host thread (emulated device)
  std::uint64_t sequence_ = 0;  // items posted so far
  std::uint64_t shared_ = 0;    // the last item shared among all blocks
  std::uint64_t launch_ = 0;    // device-side starts so far
  bool running_ = false;
  DeviceClock clock_;  // the device side's stamps on the system clock (FERRY_TRACE)
};

}  // namespace ferry

// The engine worker on CUDA: one persistent kernel per communicator and
// device (worker.h). Block 0 polls the mailbox in mapped host memory; an
// item small enough for one block runs there alone, a larger one is
// published in device memory to the other blocks, which poll that instead
// (an L2 load rather than a PCIe round trip), and the blocks it asks for
// share it; each reports its share done in the mailbox itself: no block
// waits for another (doorbell_device.cuh). What a block runs of an item:
// ll_device.cuh, ll128_device.cuh, reduce_device.cuh, pack_device.cuh.
// Loads of user and peer buffers bypass L1 (ld.global.cg): a kernel that
// outlives many calls must not see a previous call's data.
#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "engine/gpu/runtime_device.cuh"
#include "engine/collectives/doorbell_device.cuh"
#include "engine/collectives/ll128_device.cuh"
#include "engine/collectives/ll_device.cuh"
#include "engine/collectives/reduce_device.cuh"
#include "engine/collectives/worker.h"
#include "engine/collectives/worker_common.h"
#include "engine/common/trace.h"
#include "engine/core/pack_device.cuh"
#include "engine/gpu/gpu_runtime.h"
#ifdef FERRY_WORKER_TIMELINE
#include <cstdio>

#include "engine/common/params.h"
#endif

namespace ferry {
namespace {

constexpr int kWorkerThreads = 512;

Status from_cuda(cudaError_t error, const char* what) {
  if (error == cudaSuccess) return Status::kOk;
  (void)cudaGetLastError();
  FERRY_WARN(Coll, "engine worker: %s: %s", what, cudaGetErrorString(error));
  return Status::kGpuError;
}
#define FERRY_CUDA(call) from_cuda((call), #call)
constexpr int kUnroll = 4;  // independent 16-byte loads in flight per thread and input

#ifdef FERRY_WORKER_TIMELINE
// Diagnostic builds only (cmake -DFERRY_WORKER_TIMELINE=ON): block 0's time
// in each phase of its items, summed on the GPU and printed (FERRY_STATS)
// when the worker goes away. Phases: the doorbell seen to the item decoded
// and every thread told; the block's share; the fence before the report.
enum TimelinePhase { kTimelineTake, kTimelineRun, kTimelineFence, kTimelinePhases };
__device__ unsigned long long g_timeline_ns[kTimelinePhases];
__device__ unsigned long long g_timeline_items;
#endif

// ---- What a block runs of an item -------------------------------------------

struct WorkerReduce {
  const DirectReduceArgs& args;
  unsigned block, blocks;

  template <typename T, ReduceOp Op>
  __device__ void run() {
    direct_reduce_part<T, Op, kWorkerThreads, kUnroll>(args, block, blocks);
  }
};

// This block's share of each copy (pack_device.cuh).
__device__ __noinline__ void copy_share(const CopyListArgs& c, unsigned block, unsigned blocks) {
  copy_list_part<kWorkerThreads, kUnroll>(c, block, blocks);
}

// This warp's lines of an LL128 allreduce's input into every peer's
// buffer: the same for every element type, so compiled once.
__device__ __noinline__ void ll128_send_share(const LlAllreduceArgs& a, std::size_t bytes, unsigned block,
                                              unsigned blocks) {
  ll128::send_share(a, bytes, block, blocks);
}

struct WorkerLl128Allreduce {
  const LlAllreduceArgs& args;
  unsigned block, blocks;
  bool ok = true;

  template <typename T, ReduceOp Op>
  __device__ void run() {
    if constexpr (kLl128Reduces<T, Op>) ok = ll128::allreduce_share<T, Op>(args, block, blocks);
  }
};

// Direct reduces and LL128 allreduces: one function per kind of item,
// every (type, op) pair's body inlined into it, so the kernel calls a
// handful of functions rather than one per pair. Each call site costs
// every thread a save area of stack, and the driver sets aside stack for
// every thread the GPU can hold: with a call per pair a running worker
// held gigabytes of device memory (bench/RESULTS.md, the worker's stack).
__device__ __noinline__ bool direct_reduce_item(const DirectReduceArgs& args, unsigned block, unsigned blocks) {
  WorkerReduce visitor{args, block, blocks};
  return dispatch_reduction(args.type, args.op, visitor);
}

__device__ __noinline__ int ll128_allreduce_item(const LlAllreduceArgs& args, unsigned block, unsigned blocks) {
  if (!ll128_reduces(args.type, args.op)) return -1;
  ll::ElementBytes element;
  dispatch_reduction(args.type, args.op, element);
  ll128_send_share(args, args.count * element.bytes, block, blocks);
  WorkerLl128Allreduce visitor{args, block, blocks};
  dispatch_reduction(args.type, args.op, visitor);
  return visitor.ok;
}

// An LL allreduce: 1 done, 0 timed out, -1 a pair MPI does not define.
// Sums of floats, doubles and 32- and 64-bit integers, and minima and
// maxima of doubles (time steps, norms) have bodies of their own.
__device__ __forceinline__ int ll_allreduce_item(const LlAllreduceArgs& a, unsigned block, unsigned blocks) {
  using Op = ReduceOp;
  using ll::TypedPackReduce;
  const auto is = [&](DataType type, ReduceOp op) { return a.type == type && a.op == op; };
  if (is(DataType::kFloat32, Op::kSum))
    return ll::allreduce_share(a, 4, TypedPackReduce<float, Op::kSum>{}, block, blocks);
  if (is(DataType::kFloat64, Op::kSum))
    return ll::allreduce_share(a, 8, TypedPackReduce<double, Op::kSum>{}, block, blocks);
  if (is(DataType::kFloat64, Op::kMin))
    return ll::allreduce_share(a, 8, TypedPackReduce<double, Op::kMin>{}, block, blocks);
  if (is(DataType::kFloat64, Op::kMax))
    return ll::allreduce_share(a, 8, TypedPackReduce<double, Op::kMax>{}, block, blocks);
  if (is(DataType::kInt32, Op::kSum))
    return ll::allreduce_share(a, 4, TypedPackReduce<std::int32_t, Op::kSum>{}, block, blocks);
  if (is(DataType::kInt64, Op::kSum))
    return ll::allreduce_share(a, 8, TypedPackReduce<std::int64_t, Op::kSum>{}, block, blocks);
  ll::ElementBytes element;
  if (!dispatch_reduction(a.type, a.op, element)) return -1;
  return ll::allreduce_share(a, element.bytes, ll::AnyPackReduce{a.type, a.op}, block, blocks);
}

// Runs this block's share; returns 0 or the Status the item failed with.
__device__ std::int32_t run_share(const WorkItem& item, unsigned block, unsigned blocks) {
  constexpr std::int32_t kFine = 0;
  const std::int32_t unsupported = static_cast<std::int32_t>(Status::kUnsupported);
  const std::int32_t timed_out = static_cast<std::int32_t>(Status::kTimeout);
  switch (item.kind) {
    case WorkKind::kCopies:
      copy_share(item.copies, block, blocks);
      return kFine;
    case WorkKind::kDirectReduce:
      return direct_reduce_item(item.reduce, block, blocks) ? kFine : unsupported;
    case WorkKind::kLlAllreduce: {
      const int done = ll_allreduce_item(item.ll, block, blocks);
      if (done < 0) return unsupported;
      return __syncthreads_and(done) ? kFine : timed_out;
    }
    case WorkKind::kLl128Allreduce: {
      const int done = ll128_allreduce_item(item.ll, block, blocks);
      if (done < 0) return unsupported;
      return __syncthreads_and(done) ? kFine : timed_out;
    }
    case WorkKind::kLlBcast:
      return __syncthreads_and(ll::bcast_share(item.ll_bcast, block, blocks)) ? kFine : timed_out;
    case WorkKind::kLlAlltoallv:
      return __syncthreads_and(ll::alltoallv_share(item.ll_alltoallv, block, blocks)) ? kFine : timed_out;
  }
  return unsupported;
}

// ---- The worker loop --------------------------------------------------------

// Whether an item of this kind writes results only into this GPU's memory.
__device__ __forceinline__ bool writes_only_local(WorkKind kind) {
  return kind == WorkKind::kLlAllreduce || kind == WorkKind::kLl128Allreduce || kind == WorkKind::kLlBcast ||
         kind == WorkKind::kLlAlltoallv;
}

// At most 32 registers a thread (four blocks an SM by registers, as by
// threads): a worker block leaves room beside it for the application's.
__global__ void __launch_bounds__(kWorkerThreads, 4)
    worker_loop(Mailbox* box, WorkerState* state, std::uint64_t launch, std::uint64_t next, std::uint64_t last_shared,
                std::int64_t idle_ns, bool stamp) {
  static_assert(kDoorbellWords == 2 * kDoorbellLanes, "the doorbell's readers take two words a lane");
  __shared__ WorkItem item;
  __shared__ std::uint32_t words[kDoorbellWords];
  __shared__ std::uint64_t taken;  // the sequence to run; 0: leave
  __shared__ bool decoded;
  const bool leader = blockIdx.x == 0;
  std::uint32_t last = last_shared ? doorbell_flag(last_shared) : 0;  // other blocks: the last item run
  for (;;) {
#ifdef FERRY_WORKER_TIMELINE
    std::uint64_t arrived_ns = 0;
#endif
    if (threadIdx.x < kDoorbellLanes) {
      std::uint64_t published = 0;
      const bool arrived =
          leader ? wait_doorbell(box, next, idle_ns, words) : wait_published(state, last, launch, words, &published);
#ifdef FERRY_WORKER_TIMELINE
      arrived_ns = now_ns();
#endif
      // A shared item whose words hold it all goes on to the other blocks
      // at once, before decoding: measured sooner than after the block's
      // barriers (bench/worker-latency).
      if (leader && arrived && gridDim.x > 1 && doorbell_blocks(words[1]) > 1 && !doorbell_in_mailbox(words[0]))
        publish(state, words, doorbell_words(words[0]), next);
      if (threadIdx.x == 0) {
        taken = !arrived ? 0 : leader ? next : published;
        decoded = arrived && decode_doorbell(words, &item);
      }
    }
    __syncthreads();
    const std::uint64_t sequence = taken;
    if (sequence == 0) {
      if (leader && threadIdx.x == 0) {
        store_release_gpu(&state->left_launch, launch);
        if (!load_acquire_sys(&box->stop)) store_release_sys(&box->exited, launch);
      }
      return;
    }
    // The item's first `share` blocks run it; the others only note that
    // they saw it. Taken from the words, which this block saw whole: the
    // item in WorkerState may already be the next one's when this block
    // takes no part (the caller waits only for the blocks that do).
    const unsigned share = min(static_cast<unsigned>(max(doorbell_blocks(words[1]), 1)), gridDim.x);
    if (!leader) {
      last = doorbell_flag(sequence);
      if (blockIdx.x >= share) {
        __syncthreads();  // every thread has read words before warp 0 waits for the next
        continue;
      }
    }
    // An item the doorbell held whole is in `item` since the barrier above;
    // another is copied in first.
    if (!decoded) {
      copy_item(&item, leader ? &box->item : &state->item);
      __syncthreads();
    }
    if (leader) {
      next = sequence + 1;
      if (share > 1 && !decoded) {  // the item itself goes first, then its words
        copy_item(&state->item, &item);
        __threadfence();
        __syncthreads();
        if (threadIdx.x < kDoorbellLanes) publish(state, words, doorbell_words(words[0]), sequence);
      }
    }

#ifdef FERRY_WORKER_TIMELINE
    const std::uint64_t started_ns = now_ns();
#endif
    if (stamp && leader && threadIdx.x == 0) box->item_started_ns = now_ns();
    const std::int32_t failure = run_share(item, blockIdx.x, share);
    __syncthreads();
    if (threadIdx.x != 0) continue;
    if (stamp && leader) box->item_ended_ns = now_ns();
#ifdef FERRY_WORKER_TIMELINE
    const std::uint64_t ran_ns = now_ns();
#endif
    if (failure) *reinterpret_cast<volatile std::int32_t*>(&box->failed) = failure;
    // The block's results (ordered before this thread's fence by the
    // barrier) are in place before the report. The fence must be SC: with a
    // release store alone, an MPI suite run on the GPU machine saw wrong
    // in-place LL results. It orders the report after them, so the report
    // itself is a plain store (a release store would fence twice, measured
    // slower on LL allreduces of 32-128 KiB, bench/worker-latency). An LL item
    // writes its results only into this GPU's memory (the engine runs a call
    // on the worker of its output's GPU; what it stores into peers are LL
    // lines, which carry their own flags), and everything that reads them
    // later (this GPU's SMs and copy engines, peers over NVLink) reads
    // through this GPU's L2: a GPU-scope fence is enough, and measured
    // sooner than a system-scope one (bench/RESULTS.md). Copies and direct
    // reduces may write into peers' memory: they fence system-wide.
    if (failure || !writes_only_local(item.kind))
      __threadfence_system();
    else
      __threadfence();
    *reinterpret_cast<volatile std::uint64_t*>(leader ? &box->done : &box->block_done[blockIdx.x]) = sequence;
#ifdef FERRY_WORKER_TIMELINE
    if (leader) {
      const std::uint64_t fenced_ns = now_ns();
      g_timeline_ns[kTimelineTake] += started_ns - arrived_ns;
      g_timeline_ns[kTimelineRun] += ran_ns - started_ns;
      g_timeline_ns[kTimelineFence] += fenced_ns - ran_ns;
      ++g_timeline_items;
    }
#endif
  }
}

class CudaWorkerDevice final : public WorkerDevice {
 public:
  static std::unique_ptr<WorkerDevice> create(int device, int blocks, const std::uint32_t* abandon) {
    // With launches made blocking, launching a kernel that waits for the
    // launching thread would never return.
    const char* blocking = std::getenv("CUDA_LAUNCH_BLOCKING");
    if (blocking && std::strcmp(blocking, "1") == 0) {
      FERRY_INFO(Coll, "CUDA_LAUNCH_BLOCKING=1: no engine worker; calls launch kernels");
      return nullptr;
    }
    std::unique_ptr<CudaWorkerDevice> worker(new CudaWorkerDevice(device, blocks));
    cudaError_t error = cudaSetDevice(device);
    if (error == cudaSuccess)
      error = cudaHostAlloc(reinterpret_cast<void**>(&worker->box_), sizeof(Mailbox),
                            cudaHostAllocMapped | cudaHostAllocPortable);
    if (error == cudaSuccess) {
      std::memset(worker->box_, 0, sizeof(Mailbox));
      error = cudaHostGetDevicePointer(reinterpret_cast<void**>(&worker->box_on_device_), worker->box_, 0);
    }
    if (error == cudaSuccess) error = cudaMalloc(reinterpret_cast<void**>(&worker->state_), sizeof(WorkerState));
    if (error == cudaSuccess) error = cudaMemset(worker->state_, 0, sizeof(WorkerState));
    if (error == cudaSuccess) error = cudaStreamCreateWithFlags(&worker->stream_, cudaStreamNonBlocking);
    // The abandon word's address for kernels: pinned memory has the host's
    // address on the device where addressing is unified, as the Simple
    // kernel's failed word does; the runtime's device pointer where it has one.
    const std::uint32_t* abandon_on_device = abandon;
    void* mapped = nullptr;
    if (abandon && cudaHostGetDevicePointer(&mapped, const_cast<std::uint32_t*>(abandon), 0) == cudaSuccess)
      abandon_on_device = static_cast<const std::uint32_t*>(mapped);
    else
      (void)cudaGetLastError();
    if (error == cudaSuccess)
      error = cudaMemcpyToSymbol(ll::g_abandon_word, &abandon_on_device, sizeof(abandon_on_device));
    // A shared item waits for the report of every block it asks for, so
    // all of them must fit the GPU at once.
    int per_multiprocessor = 0, multiprocessors = 0;
    if (error == cudaSuccess)
      error = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_multiprocessor, worker_loop, kWorkerThreads, 0);
    if (error == cudaSuccess) error = cudaDeviceGetAttribute(&multiprocessors, cudaDevAttrMultiProcessorCount, device);
    if (error == cudaSuccess && per_multiprocessor * multiprocessors < blocks) {
      worker->blocks_ = std::max(1, per_multiprocessor * multiprocessors);
      FERRY_INFO(Coll, "engine worker: device %d holds %d of its blocks at once; %d asked for", device, worker->blocks_,
                 blocks);
    }
    if (error != cudaSuccess) {
      FERRY_WARN(Coll, "engine worker set-up failed on device %d: %s; calls launch kernels", device,
                 cudaGetErrorString(error));
      return nullptr;
    }
    return worker;
  }

  ~CudaWorkerDevice() override {
    FERRY_LOG_IF_FAILED(join());
#ifdef FERRY_WORKER_TIMELINE
    unsigned long long ns[kTimelinePhases] = {}, items = 0;
    if (params().stats && cudaMemcpyFromSymbol(ns, g_timeline_ns, sizeof(ns)) == cudaSuccess &&
        cudaMemcpyFromSymbol(&items, g_timeline_items, sizeof(items)) == cudaSuccess && items > 0)
      std::fprintf(stderr,
                   "ferry worker timeline (device %d, block 0, %llu items), mean ns: take %.0f run %.0f fence %.0f\n",
                   device_, items, double(ns[kTimelineTake]) / items, double(ns[kTimelineRun]) / items,
                   double(ns[kTimelineFence]) / items);
#endif
    if (stream_) (void)cudaStreamDestroy(stream_);
    if (state_) (void)cudaFree(state_);
    if (box_) (void)cudaFreeHost(box_);
  }

  Mailbox* mailbox() override { return box_; }
  int blocks() const override { return blocks_; }

  Status start(std::uint64_t launch, std::uint64_t first, std::uint64_t last_shared, std::int64_t idle_us) override {
    // The stream runs one launch after the other: a new launch starts only
    // after the previous one has left.
    FERRY_CHECK(FERRY_CUDA(cudaSetDevice(device_)));
    worker_loop<<<blocks_, kWorkerThreads, 0, stream_>>>(box_on_device_, state_, launch, first, last_shared,
                                                         idle_us * 1000, trace_enabled());
    return FERRY_CUDA(cudaGetLastError());
  }

  Status health() override {
    const cudaError_t state = cudaStreamQuery(stream_);
    if (state == cudaSuccess || state == cudaErrorNotReady) return Status::kOk;
    FERRY_WARN(Coll, "engine worker kernel failed: %s", cudaGetErrorString(state));
    return Status::kGpuError;
  }

  Status join() override { return stream_ ? FERRY_CUDA(cudaStreamSynchronize(stream_)) : Status::kOk; }

 private:
  CudaWorkerDevice(int device, int blocks) : device_(device), blocks_(blocks) {}

  int device_;
  int blocks_;
  Mailbox* box_ = nullptr;            // host view
  Mailbox* box_on_device_ = nullptr;  // the same memory, as kernels address it
  WorkerState* state_ = nullptr;
  cudaStream_t stream_ = nullptr;
};

}  // namespace

std::unique_ptr<WorkerDevice> make_gpu_worker_device(int device, int blocks, const std::uint32_t* abandon) {
  return CudaWorkerDevice::create(device, blocks, abandon);
}

}  // namespace ferry

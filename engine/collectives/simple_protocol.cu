// The Simple protocol's kernel: one thread block per channel runs the
// rank's steps (simple_protocol.h) for the regions dealt to it. Thread 0
// waits for the FIFO counters; every thread moves data; after a barrier,
// thread 0 publishes the new counters with system-scope release stores.
#include "engine/collectives/simple_protocol.h"
#include "engine/core/pack_device.cuh"
#include "engine/gpu/gpu_runtime.h"
#include "engine/gpu/runtime_device.cuh"

namespace ferry {
namespace {

// A block's stores to a peer are what limits a channel: 1024 threads moved
// more than 512 on 64 channels (2x H200, ring at 512 MiB; bench/RESULTS.md).
constexpr int kThreads = 1024;
constexpr int kUnroll = 4;  // 8 measured no faster

template <typename T, ReduceOp Op>
__device__ __forceinline__ T combine(T a, T b) {
  return reduce<T, Op>(a, b);
}
template <typename T, ReduceOp Op>
__device__ __forceinline__ Pack<T> combine(Pack<T> a, Pack<T> b) {
  return reduce_pack<T, Op>(a, b);
}

// One step's data: units of E (a pack or an element), n of them.
template <typename E, typename T, ReduceOp Op>
__device__ __forceinline__ void move(std::size_t n, const E* local, const E* received, bool reduce_it,
                                     E* out, E* const* destinations, int ndestinations) {
  for (std::size_t base = threadIdx.x; base < n; base += kThreads * kUnroll) {
    E value[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const std::size_t i = base + u * kThreads;
      if (i >= n) continue;
      if (!received) {
        value[u] = local[i];
      } else if (reduce_it) {
        // Slots were rewritten by a peer since this SM last read them.
        value[u] = combine<T, Op>(local[i], load_cg(received + i));
      } else {
        value[u] = load_cg(received + i);
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const std::size_t i = base + u * kThreads;
      if (i >= n) continue;
      if (out) out[i] = value[u];
      for (int d = 0; d < ndestinations; ++d) destinations[d][i] = value[u];
    }
  }
}

// Rank r's buffer and FIFO indices: inline, or past kInlineRanks from the table.
__device__ __forceinline__ SimplePeer peer_of(const SimpleArgs& args, int r) {
  return r < kInlineRanks ? args.peers[r] : args.peer_table[r];
}

// sent and taken, a word per rank each, live in dynamic shared memory.
template <typename T, ReduceOp Op>
__global__ void __launch_bounds__(kThreads) simple_kernel(SimpleArgs args) {
  const int channel = blockIdx.x;
  const int me = args.rank;
  auto control = [&](int rank) { return simple_control(peer_of(args, rank).buffer, channel, args.nranks); };
  const SimpleControl own = control(me);
  extern __shared__ std::uint64_t counters[];
  std::uint64_t* sent = counters;
  std::uint64_t* taken = counters + args.nranks;
  __shared__ int failed;
  for (int r = threadIdx.x; r < args.nranks; r += kThreads) {
    sent[r] = own.sent[r];
    taken[r] = own.taken[r];
  }
  if (threadIdx.x == 0) failed = 0;
  __syncthreads();
  const std::uint64_t deadline = args.timeout_ms ? now_ns() + args.timeout_ms * 1000000ull : ~0ull;
  char* own_buffer = static_cast<char*>(peer_of(args, me).buffer);
  const int own_senders = peer_of(args, me).nsenders;

  // simple_step_order's order: regions group at a time, steps interleaved.
  const std::uint64_t stride = static_cast<std::uint64_t>(args.channels);
  // failed is read only right after the barrier that follows its write, so
  // every thread stops at the same step.
  bool stop = false;
  for (std::uint64_t first = channel; first < args.regions && !stop;) {
    const int members = simple_group_members(first, args.regions, stride, args.group);
    bool any = true;
    for (std::uint32_t s = 0; any && !stop; ++s) {
      any = false;
      for (int g = 0; g < members && !stop; ++g) {
        const std::uint64_t region = first + g * stride;
        const bool last = region + 1 == args.regions;
        if (s >= (last ? args.last_steps : args.full_steps)) continue;
        any = true;
        const std::size_t base = region * args.region_elements;
        const SimpleStep step = args.steps[(last ? args.full_steps : 0) + s];
        if (threadIdx.x == 0) {
          // The abandon word is host memory: read once every kAbandonSpins.
          constexpr unsigned kAbandonSpins = 256;
          unsigned spins = 0;
          auto give_up = [&] {
            return now_ns() > deadline || (++spins % kAbandonSpins == 0 && args.abandon &&
                                           *reinterpret_cast<const volatile std::uint32_t*>(args.abandon));
          };
          bool waited = true;
          if (step.recv_peer >= 0)
            while (load_acquire_sys(&own.tail[step.recv_peer]) < taken[step.recv_peer] + 1)
              if (give_up()) { waited = false; break; }
          for (int d = 0; d < step.nsends && waited; ++d) {
            const int peer = step.send_peers[d];
            while (sent[peer] - load_acquire_sys(&own.head[peer]) >= kSimpleSlots)
              if (give_up()) { waited = false; break; }
          }
          if (!waited) failed = 1;
        }
        __syncthreads();
        if (failed) {
          stop = true;
          break;
        }

        const T* received = nullptr;
        if (step.recv_peer >= 0)
          received = reinterpret_cast<const T*>(
              own_buffer + simple_slot_offset(args.nranks, channel, own_senders, peer_of(args, step.recv_peer).own_fifo,
                                              taken[step.recv_peer] % kSimpleSlots));
        T* destinations[kSimpleMaxSends];
        for (int d = 0; d < step.nsends; ++d) {
          const int peer = step.send_peers[d];
          const SimplePeer to = peer_of(args, peer);
          destinations[d] = reinterpret_cast<T*>(
              static_cast<char*>(to.buffer) +
              simple_slot_offset(args.nranks, channel, to.nsenders, to.fifo_at, sent[peer] % kSimpleSlots));
        }
        const std::size_t offset = (base + step.begin) * sizeof(T);
        const T* local = reinterpret_cast<const T*>(
            static_cast<const char*>(step.local_from_output ? args.output : args.input) + offset);
        T* out = step.store_local ? reinterpret_cast<T*>(static_cast<char*>(args.output) + offset) : nullptr;
        const bool needs_local = step.recv_peer < 0 || step.reduce;
        const bool aligned = (!needs_local || reinterpret_cast<std::uintptr_t>(local) % 16 == 0) &&
                             reinterpret_cast<std::uintptr_t>(out) % 16 == 0;
        // Slots are 16-byte aligned and steps start on 16-byte multiples.
        const std::size_t packs = aligned ? step.count / Pack<T>::kCount : 0;
        if (packs > 0) {
          Pack<T>* pack_destinations[kSimpleMaxSends];
          for (int d = 0; d < step.nsends; ++d) pack_destinations[d] = reinterpret_cast<Pack<T>*>(destinations[d]);
          move<Pack<T>, T, Op>(packs, reinterpret_cast<const Pack<T>*>(local),
                               reinterpret_cast<const Pack<T>*>(received), step.reduce, reinterpret_cast<Pack<T>*>(out),
                               pack_destinations, step.nsends);
        }
        const std::size_t done = packs * Pack<T>::kCount;
        if (done < step.count) {
          T* tail_destinations[kSimpleMaxSends];
          for (int d = 0; d < step.nsends; ++d) tail_destinations[d] = destinations[d] + done;
          move<T, T, Op>(step.count - done, local + done, received ? received + done : nullptr, step.reduce,
                         out ? out + done : nullptr, tail_destinations, step.nsends);
        }
        // After the barrier, thread 0's system-scope release orders every
        // thread's stores (cumulatively) before its counters (NCCL's pattern;
        // a fence in every thread measured far slower).
        __syncthreads();
        if (threadIdx.x == 0) {
          for (int d = 0; d < step.nsends; ++d) {
            const int peer = step.send_peers[d];
            store_release_sys(&control(peer).tail[me], ++sent[peer]);
          }
          if (step.recv_peer >= 0) store_release_sys(&control(step.recv_peer).head[me], ++taken[step.recv_peer]);
        }
        __syncthreads();
      }
    }
    first += members * stride;
  }
  for (int r = threadIdx.x; r < args.nranks; r += kThreads) {
    own.sent[r] = sent[r];
    own.taken[r] = taken[r];
  }
  if (threadIdx.x == 0 && failed) {
    *reinterpret_cast<volatile std::int32_t*>(args.failed) = static_cast<std::int32_t>(Status::kTimeout);
    __threadfence_system();
  }
}

struct CudaSimple {
  const SimpleArgs& args;
  cudaStream_t stream;
  cudaError_t error = cudaSuccess;

  template <typename T, ReduceOp Op>
  void run() {
    const std::size_t shared = 2 * static_cast<std::size_t>(args.nranks) * sizeof(std::uint64_t);
    simple_kernel<T, Op><<<args.channels, kThreads, shared, stream>>>(args);
    error = cudaGetLastError();
  }
};

}  // namespace

Status gpu_launch_simple(const SimpleArgs& args, gpu::Stream stream) {
  CudaSimple visitor{args, reinterpret_cast<cudaStream_t>(stream)};
  if (!dispatch_reduction(args.type, args.op, visitor)) return Status::kUnsupported;
  if (visitor.error != cudaSuccess) {
    FERRY_WARN(Coll, "ring/tree allreduce launch failed: %s", cudaGetErrorString(visitor.error));
    return Status::kGpuError;
  }
  return Status::kOk;
}

}  // namespace ferry

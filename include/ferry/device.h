/* GPU-initiated one-sided communication on MPI windows.
 *
 * A device window (MPI_Win_allocate with info mpi_memory_alloc_kinds =
 * cuda:device, or MPI_Win_create on device memory) maps every rank's window
 * memory into every GPU. ferry_win_device_handle gives a kernel that map:
 *
 *   ferry_window_device_t w;
 *   ferry_win_device_handle(win, &w);      // collective, the first time per window
 *   my_kernel<<<grid, block>>>(w, ...);    // pass by value
 *
 * and, in the kernel, the calls below: put/get (thread, warp and block
 * forms), single elements (p/g), atomics on a peer's window memory, signals
 * (a 64-bit word of the target's window memory set or added to after the
 * data before it is visible) with wait_until, fence/quiet, and a barrier
 * over the window's ranks. Offsets are bytes into the target's window
 * memory. Ranks whose memory this GPU maps are reached by load and store;
 * in a window whose ranks span machines, the others go through a GDA queue
 * that a proxy thread of this process drains over the network
 * (ferry/gda_ring.h). Every call reaches other machines, with these
 * limits: a get's destination must be global memory; atomics to another
 * machine (fetch_add, atomic_add, compare_swap) take 64-bit integers; g,
 * fetch_add and compare_swap wait for the target's answer (a network round
 * trip). On
 * such a window, atomics on 64-bit integers and signals go through the
 * queue even to this rank (the proxy must be the only writer of the words
 * it updates). reachable() says whether a rank can be reached at all.
 * While a kernel waits on the queue (the fetching calls, get, quiet(w),
 * barrier_block, wait_until for a word another machine sets), allocate or
 * free no device or pinned memory in any process of the window: CUDA may
 * hold such a call until the device is idle, and with it the copies of the
 * process's proxy that the kernels wait for. The first launch of a kernel is
 * such a call where CUDA loads modules lazily (its default since 12.2):
 * libferry.so sets CUDA_MODULE_LOADING=EAGER before main for a program that
 * names ferry_win_device_handle and chose no mode itself; others (Python)
 * set it in the job's environment.
 *
 * ll::put/ll::wait move small messages whose words carry their own flags:
 * one NVLink crossing, no fence, no separate signal.
 *
 * In debug builds (NDEBUG not defined) a call that reaches past the target
 * rank's window traps, printing the call, rank, offset and size.
 *
 * Ordering: put/p/atomics from one thread to one target are not ordered with
 * each other until fence(); signal() orders everything the calling thread
 * (for block and warp forms: the whole block or warp) wrote before it.
 * quiet() completes every earlier write of the calling thread to mapped
 * ranks; quiet(w) also every write this process queued for other machines.
 * A put to another machine returns once its source may be reused; a source
 * in shared memory or a thread's local variables travels in 8-byte pieces
 * inside the queue's descriptors (global memory: the proxy reads it in one
 * copy).
 *
 * The same header compiles in HIP kernels (hipcc, AMD GPUs), where a warp
 * is a wavefront (warpSize threads, 64 on CDNA GPUs); Ferry's HIP build has
 * not yet run on AMD hardware. */
#ifndef FERRY_DEVICE_H
#define FERRY_DEVICE_H

#include <mpi.h>

#include "ferry/device_handle.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Fills *handle for win. Collective over the window's ranks the first time
 * it is called for a window; cheap afterwards. The handle stays valid until
 * MPI_Win_free. Returns an MPI error code (MPI_ERR_WIN: not a device window),
 * raised through the window's error handler. */
int ferry_win_device_handle(MPI_Win win, ferry_window_device_t* handle);

#ifdef __cplusplus
}
#endif

#if defined(__CUDACC__) || defined(__HIPCC__)
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <type_traits>
#if defined(__HIPCC__)
#include <hip/hip_runtime.h>
#endif

#include "ferry/gda_ring.h"

namespace ferry::device {

// What differs between NVIDIA and AMD GPUs, in one place.
namespace detail {
#if defined(__HIPCC__)
constexpr unsigned kWarpSize = warpSize;
__device__ __forceinline__ void sync_warp() {
  __builtin_amdgcn_fence(__ATOMIC_RELEASE, "wavefront");
  __builtin_amdgcn_wave_barrier();
  __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "wavefront");
}
__device__ __forceinline__ void trap() { __builtin_trap(); }
__device__ __forceinline__ bool global_memory(const void* p) {
#if defined(__HIP_DEVICE_COMPILE__)
  return !__builtin_amdgcn_is_shared(p) && !__builtin_amdgcn_is_private(p);
#else
  return (void)p, true;  // the host pass of a device function
#endif
}
#else
constexpr unsigned kWarpSize = 32;
__device__ __forceinline__ void sync_warp() { __syncwarp(); }
__device__ __forceinline__ void trap() { __trap(); }
__device__ __forceinline__ bool global_memory(const void* p) { return __isGlobal(p) != 0; }
#endif
}  // namespace detail

enum class SignalOp { kSet, kAdd };
enum class Compare { kEq, kNe, kGt, kGe, kLt, kLe };

__device__ __forceinline__ bool reachable(const ferry_window_device_t& w, int rank) {
  return rank >= 0 && rank < w.size && (w.peers[rank] != nullptr || w.gda_ring != nullptr);
}

namespace detail {

// Puts to another machine of at most this many bytes travel inside their
// descriptor: the proxy has no source to copy out of device memory.
constexpr std::size_t kInlinePutBytes = 8;

// Whether rank's memory is mapped here (load and store), else it is on
// another machine (the GDA queue).
__device__ __forceinline__ bool mapped(const ferry_window_device_t& w, int rank) { return w.peers[rank] != nullptr; }
// Whether an add or a signal to rank goes through the GDA queue: on a
// window with one, always (this rank's own words too), so that the proxy,
// which adds by reading and writing, is the only writer of such words.
__device__ __forceinline__ bool word_by_queue(const ferry_window_device_t& w, int rank) {
  return w.gda_ring != nullptr || !mapped(w, rank);
}

__device__ __forceinline__ const gda::GdaRing& queue(const ferry_window_device_t& w) {
  return *static_cast<const gda::GdaRing*>(w.gda_ring);
}

__device__ __forceinline__ void not_across_machines(const ferry_window_device_t& w, int rank, const char* call) {
  printf("ferry: %s to window rank %d (another machine) is not supported across machines\n", call, rank);
  trap();
}

// Queues op for rank's window memory (or sync block) on the GDA queue; the
// ticket (gda::kRingFailed when the proxy has failed: the call is dropped,
// and quiet(w) returns).
__device__ __forceinline__ std::uint64_t post_remote(const ferry_window_device_t& w, int rank, gda::GdaOp op,
                                                    std::size_t offset, const void* src, std::size_t bytes,
                                                    std::size_t signal_offset = 0, unsigned long long value = 0,
                                                    SignalOp signal_op = SignalOp::kSet, bool sync_block = false) {
  if (w.gda_ring == nullptr || rank < 0 || rank >= w.size) {
    printf("ferry: window rank %d is not reachable from this GPU\n", rank);
    trap();
  }
  gda::GdaDescriptor d{};
  d.op = static_cast<std::uint8_t>(op);
  const gda::GdaSignalOp how = signal_op == SignalOp::kAdd ? gda::GdaSignalOp::kAdd : gda::GdaSignalOp::kSet;
  d.signal_op = static_cast<std::uint8_t>(how);
  d.window = sync_block ? w.gda_sync_window : w.gda_window;
  d.target = rank;
  d.source = reinterpret_cast<std::uintptr_t>(src);
  d.offset = offset;
  d.bytes = bytes;
  d.signal_offset = signal_offset;
  d.value = value;
  d.producer = blockIdx.x;
  return gda::post(queue(w), d);
}

// The bytes (at most 8) at src as one word, the first byte lowest.
__device__ __forceinline__ unsigned long long inline_bits(const void* src, std::size_t bytes) {
  const auto* from = static_cast<const unsigned char*>(src);
  unsigned long long bits = 0;
  for (std::size_t b = 0; b < bytes; ++b) bits |= static_cast<unsigned long long>(from[b]) << (8 * b);
  return bits;
}

// A source in shared memory or a thread's own (local) memory, which the
// proxy cannot read: lane's share of its 8-byte pieces (of `lanes`) goes
// inside the descriptors. The last ticket posted (kRingFailed: none, or
// the proxy failed).
__device__ __forceinline__ std::uint64_t put_pieces(const ferry_window_device_t& w, int rank, std::size_t offset,
                                                    const void* src, std::size_t bytes, unsigned lane = 0,
                                                    unsigned lanes = 1) {
  const auto* from = static_cast<const unsigned char*>(src);
  std::uint64_t ticket = gda::kRingFailed;
  for (std::size_t at = 8 * std::size_t(lane); at < bytes; at += 8 * std::size_t(lanes)) {
    const std::size_t piece = bytes - at < 8 ? bytes - at : 8;
    const unsigned long long bits = inline_bits(from + at, piece);
    ticket = post_remote(w, rank, gda::GdaOp::kPutInline, offset + at, nullptr, piece, 0, bits);
    if (ticket == gda::kRingFailed) break;
  }
  return ticket;
}

// A put's source may be reused once the proxy has read it (at once where
// it travels inside the descriptors: small puts, whose source the proxy
// would otherwise copy out of device memory on its own).
__device__ __forceinline__ void put_remote(const ferry_window_device_t& w, int rank, std::size_t offset,
                                           const void* src, std::size_t bytes) {
  if (!global_memory(src) || bytes <= kInlinePutBytes) {
    put_pieces(w, rank, offset, src, bytes);
    return;
  }
  const std::uint64_t ticket = post_remote(w, rank, gda::GdaOp::kPut, offset, src, bytes);
  if (ticket != gda::kRingFailed) gda::wait_started(queue(w), ticket);
}

// Queues an operation that returns a value (a read of bytes <= 8, a
// fetch-add, a compare-and-swap: compare) and waits for it; 0 when the
// proxy has failed.
__device__ __forceinline__ unsigned long long fetch_remote(const ferry_window_device_t& w, int rank, gda::GdaOp op,
                                                           std::size_t offset, unsigned long long value,
                                                           unsigned long long compare = 0, std::size_t bytes = 8) {
  const std::uint64_t ticket = post_remote(w, rank, op, offset, nullptr, bytes, compare, value);
  std::uint64_t result = 0;
  if (ticket != gda::kRingFailed) gda::take_result(queue(w), ticket, &result);
  return result;
}

}  // namespace detail

namespace detail {
// Debug builds (NDEBUG not defined): a call that reaches past rank's window
// traps, saying which call, rank, offset and size.
__device__ __forceinline__ void in_window(const ferry_window_device_t& w, int rank, std::size_t offset,
                                          std::size_t bytes, const char* call) {
#if !defined(NDEBUG)
  const unsigned long long limit = rank >= 0 && rank < w.size ? w.peer_bytes[rank] : 0;
  if (rank < 0 || rank >= w.size || offset > limit || bytes > limit - offset) {
    printf("ferry: %s of %llu bytes at offset %llu of window rank %d, whose window has %llu bytes\n", call,
           static_cast<unsigned long long>(bytes), static_cast<unsigned long long>(offset), rank, limit);
    trap();
  }
#else
  (void)w, (void)rank, (void)offset, (void)bytes, (void)call;
#endif
}
}  // namespace detail

// rank's window memory at offset, as this GPU reaches it.
__device__ __forceinline__ char* address(const ferry_window_device_t& w, int rank, std::size_t offset) {
  char* base = static_cast<char*>(w.peers[rank]);
  if (base == nullptr) {
    printf("ferry: window rank %d is not reachable from this GPU\n", rank);
    detail::trap();
  }
  return base + offset;
}

// ---- Bulk data ----------------------------------------------------------

namespace detail {

// Copies bytes with `lanes` cooperating threads, this one being `lane`.
__device__ __forceinline__ void copy(char* dst, const char* src, std::size_t bytes, unsigned lane, unsigned lanes) {
  const bool vectorizable = (reinterpret_cast<std::uintptr_t>(dst) | reinterpret_cast<std::uintptr_t>(src)) % 16 == 0;
  std::size_t done = 0;
  if (vectorizable) {
    const std::size_t vectors = bytes / 16;
    for (std::size_t i = lane; i < vectors; i += lanes)
      reinterpret_cast<int4*>(dst)[i] = reinterpret_cast<const int4*>(src)[i];
    done = vectors * 16;
  }
  for (std::size_t i = done + lane; i < bytes; i += lanes) dst[i] = src[i];
}

__device__ __forceinline__ unsigned lane_in_block() {
  return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
}

// A get's bytes are in dst once the proxy has finished it.
__device__ __forceinline__ void get_remote(const ferry_window_device_t& w, int rank, std::size_t offset, void* dst,
                                           std::size_t bytes) {
  if (!global_memory(dst)) {
    printf("ferry: get from window rank %d (another machine) into shared or local memory: the destination "
           "must be global memory\n", rank);
    trap();
  }
  const std::uint64_t ticket = post_remote(w, rank, gda::GdaOp::kGet, offset, dst, bytes);
  if (ticket != gda::kRingFailed) gda::wait_completed(queue(w), ticket);
}

}  // namespace detail

// One thread copies bytes from src (this GPU's memory) to rank's window.
__device__ __forceinline__ void put(const ferry_window_device_t& w, int rank, std::size_t offset, const void* src,
                                    std::size_t bytes) {
  detail::in_window(w, rank, offset, bytes, "put");
  if (!detail::mapped(w, rank)) return detail::put_remote(w, rank, offset, src, bytes);
  detail::copy(address(w, rank, offset), static_cast<const char*>(src), bytes, 0, 1);
}
// The threads of a warp (32; a wavefront's 64 on AMD) copy together; all
// must call with the same arguments.
__device__ __forceinline__ void put_warp(const ferry_window_device_t& w, int rank, std::size_t offset,
                                         const void* src, std::size_t bytes) {
  detail::in_window(w, rank, offset, bytes, "put_warp");
  if (!detail::mapped(w, rank)) {
    detail::sync_warp();  // the warp's writes to src come first
    if (!detail::global_memory(src))
      detail::put_pieces(w, rank, offset, src, bytes, threadIdx.x % detail::kWarpSize, detail::kWarpSize);
    else if (threadIdx.x % detail::kWarpSize == 0)
      detail::put_remote(w, rank, offset, src, bytes);
    detail::sync_warp();
    return;
  }
  detail::copy(address(w, rank, offset), static_cast<const char*>(src), bytes, threadIdx.x % detail::kWarpSize,
               detail::kWarpSize);
  __threadfence_system();
  detail::sync_warp();
}
// Every thread of the block copies together; all must call with the same arguments.
__device__ __forceinline__ void put_block(const ferry_window_device_t& w, int rank, std::size_t offset,
                                          const void* src, std::size_t bytes) {
  detail::in_window(w, rank, offset, bytes, "put_block");
  if (!detail::mapped(w, rank)) {
    __syncthreads();  // the block's writes to src come first
    if (!detail::global_memory(src))
      detail::put_pieces(w, rank, offset, src, bytes, detail::lane_in_block(), blockDim.x * blockDim.y * blockDim.z);
    else if (detail::lane_in_block() == 0)
      detail::put_remote(w, rank, offset, src, bytes);
    __syncthreads();
    return;
  }
  const unsigned threads = blockDim.x * blockDim.y * blockDim.z;
  detail::copy(address(w, rank, offset), static_cast<const char*>(src), bytes, detail::lane_in_block(), threads);
  __threadfence_system();
  __syncthreads();
}

// From another machine: dst must be device memory (the proxy writes it),
// and the bytes are there when the call returns.
__device__ __forceinline__ void get(const ferry_window_device_t& w, int rank, std::size_t offset, void* dst,
                                    std::size_t bytes) {
  detail::in_window(w, rank, offset, bytes, "get");
  if (!detail::mapped(w, rank)) return detail::get_remote(w, rank, offset, dst, bytes);
  detail::copy(static_cast<char*>(dst), address(w, rank, offset), bytes, 0, 1);
}
__device__ __forceinline__ void get_warp(const ferry_window_device_t& w, int rank, std::size_t offset, void* dst,
                                         std::size_t bytes) {
  detail::in_window(w, rank, offset, bytes, "get_warp");
  if (!detail::mapped(w, rank)) {
    if (threadIdx.x % detail::kWarpSize == 0) detail::get_remote(w, rank, offset, dst, bytes);
    detail::sync_warp();
    return;
  }
  detail::copy(static_cast<char*>(dst), address(w, rank, offset), bytes, threadIdx.x % detail::kWarpSize,
               detail::kWarpSize);
  detail::sync_warp();
}
__device__ __forceinline__ void get_block(const ferry_window_device_t& w, int rank, std::size_t offset, void* dst,
                                          std::size_t bytes) {
  detail::in_window(w, rank, offset, bytes, "get_block");
  if (!detail::mapped(w, rank)) {
    if (detail::lane_in_block() == 0) detail::get_remote(w, rank, offset, dst, bytes);
    __syncthreads();
    return;
  }
  const unsigned threads = blockDim.x * blockDim.y * blockDim.z;
  detail::copy(static_cast<char*>(dst), address(w, rank, offset), bytes, detail::lane_in_block(), threads);
  __syncthreads();
}

// ---- Single elements ------------------------------------------------------

template <typename T>
__device__ __forceinline__ void p(const ferry_window_device_t& w, int rank, std::size_t offset, T value) {
  detail::in_window(w, rank, offset, sizeof(T), "p");
  static_assert(sizeof(T) <= 8, "p moves one element of at most 8 bytes");
  if (!detail::mapped(w, rank)) {
    unsigned long long bits = 0;
    __builtin_memcpy(&bits, &value, sizeof(T));
    detail::post_remote(w, rank, gda::GdaOp::kPutInline, offset, nullptr, sizeof(T), 0, bits);
    return;
  }
  *reinterpret_cast<volatile T*>(address(w, rank, offset)) = value;
}
template <typename T>
__device__ __forceinline__ T g(const ferry_window_device_t& w, int rank, std::size_t offset) {
  detail::in_window(w, rank, offset, sizeof(T), "g");
  static_assert(sizeof(T) <= 8, "g moves one element of at most 8 bytes");
  if (!detail::mapped(w, rank)) {
    const unsigned long long bits = detail::fetch_remote(w, rank, gda::GdaOp::kGetValue, offset, 0, 0, sizeof(T));
    T value;
    __builtin_memcpy(&value, &bits, sizeof(T));
    return value;
  }
  return *reinterpret_cast<volatile T*>(address(w, rank, offset));
}

// ---- Atomics (system scope: every GPU and the host see one order) ---------
//
// On a window whose ranks span machines, atomics on 64-bit integers go
// through the GDA queue to every rank, this one too (the proxy then is the
// only writer of such words); other types reach mapped ranks only.

namespace detail {
template <typename T>
__device__ __forceinline__ constexpr bool queueable_atomic() {
  return sizeof(T) == 8 && std::is_integral<T>::value;
}
}  // namespace detail

// T: int, unsigned, unsigned long long, float, double; to another machine,
// 64-bit integers.
template <typename T>
__device__ __forceinline__ T fetch_add(const ferry_window_device_t& w, int rank, std::size_t offset, T value) {
  detail::in_window(w, rank, offset, sizeof(T), "fetch_add");
  if (detail::queueable_atomic<T>() && detail::word_by_queue(w, rank)) {
    __threadfence_system();
    return static_cast<T>(detail::fetch_remote(w, rank, gda::GdaOp::kFetchAdd, offset,
                                               static_cast<unsigned long long>(value)));
  }
  if (!detail::mapped(w, rank)) detail::not_across_machines(w, rank, "fetch_add of this type");
  return atomicAdd_system(reinterpret_cast<T*>(address(w, rank, offset)), value);
}
// fetch_add without the old value (to another machine: no round trip).
template <typename T>
__device__ __forceinline__ void atomic_add(const ferry_window_device_t& w, int rank, std::size_t offset, T value) {
  detail::in_window(w, rank, offset, sizeof(T), "atomic_add");
  if (detail::queueable_atomic<T>() && detail::word_by_queue(w, rank)) {
    __threadfence_system();
    detail::post_remote(w, rank, gda::GdaOp::kAtomicAdd, offset, nullptr, 0, 0,
                        static_cast<unsigned long long>(value));
    return;
  }
  (void)fetch_add(w, rank, offset, value);
}
// T: int, unsigned, unsigned long long; to another machine, 64-bit
// integers. Returns the old value.
template <typename T>
__device__ __forceinline__ T compare_swap(const ferry_window_device_t& w, int rank, std::size_t offset, T compare,
                                          T value) {
  detail::in_window(w, rank, offset, sizeof(T), "compare_swap");
  if (detail::queueable_atomic<T>() && detail::word_by_queue(w, rank)) {
    __threadfence_system();
    return static_cast<T>(detail::fetch_remote(w, rank, gda::GdaOp::kCompareSwap, offset,
                                               static_cast<unsigned long long>(value),
                                               static_cast<unsigned long long>(compare)));
  }
  if (!detail::mapped(w, rank)) detail::not_across_machines(w, rank, "compare_swap of this type");
  return atomicCAS_system(reinterpret_cast<T*>(address(w, rank, offset)), compare, value);
}

// ---- Ordering --------------------------------------------------------------

// Orders this thread's earlier writes before its later ones, at every target.
__device__ __forceinline__ void fence() {
#if defined(__HIPCC__)
  __atomic_thread_fence(__ATOMIC_ACQ_REL);  // system scope
#else
  asm volatile("fence.acq_rel.sys;" ::: "memory");
#endif
}
// Completes this thread's earlier writes: peer stores over NVLink are done
// once ordered, so quiet is a system fence as well.
__device__ __forceinline__ void quiet() { __threadfence_system(); }
// quiet(), and every write this process queued for other machines
// (by any thread) is complete there.
__device__ __forceinline__ void quiet(const ferry_window_device_t& w) {
  __threadfence_system();
  if (w.gda_ring != nullptr) gda::wait_all_completed(detail::queue(w));
}

// ---- Signals ---------------------------------------------------------------

namespace detail {

// One release store or add at system scope: the write carries the order of
// everything this thread wrote before it, with no separate full fence.
#if defined(__HIPCC__)
__device__ __forceinline__ void store_release(unsigned long long* word, unsigned long long value) {
  __hip_atomic_store(word, value, __ATOMIC_RELEASE, __HIP_MEMORY_SCOPE_SYSTEM);
}
__device__ __forceinline__ void add_release(unsigned long long* word, unsigned long long value) {
  __hip_atomic_fetch_add(word, value, __ATOMIC_RELEASE, __HIP_MEMORY_SCOPE_SYSTEM);
}
__device__ __forceinline__ unsigned long long load_acquire(const unsigned long long* word) {
  return __hip_atomic_load(word, __ATOMIC_ACQUIRE, __HIP_MEMORY_SCOPE_SYSTEM);
}
#else
__device__ __forceinline__ void store_release(unsigned long long* word, unsigned long long value) {
  asm volatile("st.release.sys.u64 [%0], %1;" ::"l"(word), "l"(value) : "memory");
}
__device__ __forceinline__ void add_release(unsigned long long* word, unsigned long long value) {
  asm volatile("red.release.sys.add.u64 [%0], %1;" ::"l"(word), "l"(value) : "memory");
}
__device__ __forceinline__ unsigned long long load_acquire(const unsigned long long* word) {
  unsigned long long value;
  asm volatile("ld.acquire.sys.u64 %0, [%1];" : "=l"(value) : "l"(word) : "memory");
  return value;
}
#endif

}  // namespace detail

// Sets or adds to the 64-bit word at offset in rank's window, after this
// thread's earlier writes are visible there.
__device__ __forceinline__ void signal(const ferry_window_device_t& w, int rank, std::size_t offset,
                                       unsigned long long value, SignalOp op = SignalOp::kSet) {
  detail::in_window(w, rank, offset, sizeof(unsigned long long), "signal");
  if (detail::word_by_queue(w, rank)) {
    // The queue keeps this thread's order: its earlier puts to another
    // machine land first; the fence, its stores to this one.
    __threadfence_system();
    detail::post_remote(w, rank, gda::GdaOp::kSignal, 0, nullptr, 0, offset, value, op);
    return;
  }
  auto* word = reinterpret_cast<unsigned long long*>(address(w, rank, offset));
  if (op == SignalOp::kSet)
    detail::store_release(word, value);
  else
    detail::add_release(word, value);
}

// put, then signal once the data is visible: one thread.
__device__ __forceinline__ void put_signal(const ferry_window_device_t& w, int rank, std::size_t offset,
                                           const void* src, std::size_t bytes, std::size_t signal_offset,
                                           unsigned long long value, SignalOp op = SignalOp::kSet) {
  if (!detail::mapped(w, rank)) {
    detail::in_window(w, rank, offset, bytes, "put_signal");
    detail::in_window(w, rank, signal_offset, sizeof(unsigned long long), "put_signal's signal");
    if (bytes != 0 && bytes <= detail::kInlinePutBytes) {
      // Data and signal in one descriptor (the data in its source field).
      detail::post_remote(w, rank, gda::GdaOp::kPutInlineSignal, offset,
                          reinterpret_cast<const void*>(static_cast<std::uintptr_t>(detail::inline_bits(src, bytes))),
                          bytes, signal_offset, value, op);
      return;
    }
    if (!detail::global_memory(src)) {
      // The pieces, then the signal: the queue keeps this thread's order.
      if (bytes == 0 || detail::put_pieces(w, rank, offset, src, bytes) != gda::kRingFailed)
        detail::post_remote(w, rank, gda::GdaOp::kSignal, 0, nullptr, 0, signal_offset, value, op);
      return;
    }
    const std::uint64_t ticket =
        detail::post_remote(w, rank, gda::GdaOp::kPutSignal, offset, src, bytes, signal_offset, value, op);
    if (ticket != gda::kRingFailed) gda::wait_started(detail::queue(w), ticket);
    return;
  }
  put(w, rank, offset, src, bytes);
  signal(w, rank, signal_offset, value, op);
}

// Waits until the 64-bit word at offset in this rank's window compares true
// against value; returns the word's value then. Reads after it see
// everything the signalling thread wrote before its signal.
__device__ __forceinline__ unsigned long long wait_until(const ferry_window_device_t& w, std::size_t offset,
                                                         Compare compare, unsigned long long value) {
  detail::in_window(w, w.rank, offset, sizeof(unsigned long long), "wait_until");
  const auto* word = reinterpret_cast<const unsigned long long*>(address(w, w.rank, offset));
  for (;;) {
    const unsigned long long seen = detail::load_acquire(word);
    bool done = false;
    switch (compare) {
      case Compare::kEq: done = seen == value; break;
      case Compare::kNe: done = seen != value; break;
      case Compare::kGt: done = seen > value; break;
      case Compare::kGe: done = seen >= value; break;
      case Compare::kLt: done = seen < value; break;
      case Compare::kLe: done = seen <= value; break;
    }
    if (done) return seen;
  }
}

// ---- Barrier over the window's ranks ------------------------------------------

// Called by every thread of one block on every rank (one block per rank at a
// time); returns once every rank has entered, with every write made before
// the barrier visible everywhere.
__device__ __forceinline__ void barrier_block(const ferry_window_device_t& w) {
  __threadfence_system();
  __syncthreads();
  if (detail::lane_in_block() == 0) {
    // What this process queued for other machines lands before it arrives.
    if (w.gda_ring != nullptr) gda::wait_all_completed(detail::queue(w));
    unsigned long long* mine = w.sync[w.rank];
    const unsigned long long epoch = mine[1] + 1;
    mine[1] = epoch;
    for (int r = 0; r < w.size; ++r) {
      if (w.gda_ring == nullptr)
        atomicAdd_system(&w.sync[r][0], 1ULL);
      else
        detail::post_remote(w, r, gda::GdaOp::kAtomicAdd, 0, nullptr, 0, 0, 1, SignalOp::kSet, true);
    }
    while (*reinterpret_cast<volatile unsigned long long*>(&mine[0]) < epoch * static_cast<unsigned>(w.size)) {
    }
    __threadfence_system();
  }
  __syncthreads();
}

}  // namespace ferry::device

#include "ferry/device_ll.h"
#endif /* __CUDACC__ || __HIPCC__ */

#endif /* FERRY_DEVICE_H */

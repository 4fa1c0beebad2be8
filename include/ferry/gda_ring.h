// The proxy GDA's queue: a ring of fixed-size descriptors that producers
// (GPU threads; host threads in tests and host-initiated calls) fill and one
// consumer (the proxy thread, engine/transport/gda/proxy.h) drains in order, playing the NIC.
// Compiles under nvcc, hipcc and a plain C++ compiler: the same protocol
// runs on both sides.
//
// Protocol. A producer takes a ticket t (an atomic add on `tickets`), waits
// while the ring is full (t - consumed >= capacity: back-pressure, never an
// overwrite), writes the descriptor's body into slot t % capacity, fences,
// and then stores t + 1 into the slot's `published` word: one store marks
// the slot ready for exactly this pass over the ring. The consumer expects
// ticket `consumed`; once its slot shows consumed + 1 it copies the
// descriptor out, then advances `consumed` (the slot is free again), and
// advances `completed` once the descriptor's operation has finished, in
// ticket order. So a producer's descriptors are taken in the order it
// posted them, and its operations are complete once `completed` passed its
// last ticket (quiet()). `started` passes a ticket once the consumer has
// read the descriptor's source: the producer may then reuse that memory.
//
// Operations that return a value (a read of one element, fetching atomics)
// deliver it in the ticket's result slot: the consumer writes the value and
// then marks the slot with ticket + 1; the producer takes the value and
// frees the slot (marks it 0). The consumer writes a slot only while it is
// free, so a later ticket of the same slot never overwrites a value its
// producer has not taken yet.
//
// Memory: the slots, the result slots and the consumer's words live in
// pinned host memory that the GPU maps (the consumer is a host thread);
// `tickets` lives where the producers are (device memory for GPU
// producers). Producers read the consumer's words and the results where
// `seen_words` and `seen_results` say: those themselves, or for GPU
// producers a copy in device memory that the consumer keeps current with
// copies (a GPU thread that polls host memory slows every copy the device
// runs, the consumer's own among them). A producer frees its result slot
// in host memory, where the consumer looks. A consumer that gives up (a
// failed peer, the job ending) sets `failed`; producers waiting for room
// or completion then return kRingFailed. Producers also read the host's
// `failed` now and then: a consumer held inside the GPU's runtime cannot
// update the copy.
#pragma once

#include <time.h>

#include <cstdint>

#if defined(__HIPCC__)
#include <hip/hip_runtime.h>
#endif

#if defined(__CUDACC__) || defined(__HIPCC__)
#define FERRY_GDA_HOST_DEVICE __host__ __device__ __forceinline__
#define FERRY_GDA_HOST_DEVICE_CONSTEXPR __host__ __device__ constexpr
#else
#define FERRY_GDA_HOST_DEVICE inline
#define FERRY_GDA_HOST_DEVICE_CONSTEXPR constexpr
#endif

namespace ferry::gda {

// What a descriptor asks of its target rank's window.
enum class GdaOp : std::uint8_t {
  kPut = 1,         // bytes from source (this rank's memory) to the target's window at offset
  kPutSignal = 2,   // kPut, then the signal word at signal_offset set (or added to) with value
  kSignal = 3,      // the signal only
  kAtomicAdd = 4,   // 64-bit add of value at offset
  kPutInline = 5,   // bytes (at most 8) carried in value itself, to the target's window at offset
  kGet = 6,         // bytes from the target's window at offset into source (here the destination)
  // Operations that return a value in the ticket's result slot (take_result):
  kGetValue = 7,     // bytes (at most 8) from the target's window at offset
  kFetchAdd = 8,     // 64-bit add of value at offset; returns the word's old value
  kCompareSwap = 9,  // the word of `bytes` (1, 2, 4 or 8) at offset set to value if it equals
                     // signal_offset (the compare operand); returns the word's old value
  // Put of small messages whose words carry their own flag (ferry::device::ll):
  kPutFlagged = 10,  // bytes from source sent as 8-byte words, each 4 data bytes under the
                     // 4-byte flag in value's low half, to offset (ll::footprint(bytes) bytes there)
  // Host-initiated accumulates (MPI_Accumulate and its kin), whose element
  // type and operation the target's combiner knows by value:
  kAccumulate = 11,     // bytes from source combined into the target's window at offset
  kGetAccumulate = 12,  // kAccumulate, and the target's bytes from before it into the
                        // origin's memory at address signal_offset
  kPutInlineSignal = 13,  // bytes (at most 8) carried in source itself (value is the signal's),
                          // to offset; then the signal as kPutSignal's
};

// Whether op's operation returns a value in its ticket's result slot.
FERRY_GDA_HOST_DEVICE_CONSTEXPR bool returns_value(GdaOp op) {
  return op == GdaOp::kGetValue || op == GdaOp::kFetchAdd || op == GdaOp::kCompareSwap;
}
enum class GdaSignalOp : std::uint8_t { kSet = 0, kAdd = 1 };

// One cache line; `published` last, written after the body.
struct alignas(64) GdaDescriptor {
  std::uint64_t source;          // address of the data where the proxy can read it
  std::uint64_t offset;          // into the target rank's window memory
  std::uint64_t bytes;
  std::uint64_t signal_offset;
  std::uint64_t value;           // signal value or atomic operand
  std::uint8_t op;               // GdaOp
  std::uint8_t signal_op;        // GdaSignalOp
  std::uint16_t window;          // which window of the target's (GdaNetExecutor::add_window)
  std::int32_t target;           // the window's rank
  std::uint32_t producer;        // who posted it (block, or host thread): for traces and checks
  std::uint32_t reserved;
  std::uint64_t published;       // ticket + 1 once the body is written
};
static_assert(sizeof(GdaDescriptor) == 64, "a descriptor is one cache line");

// The words the consumer writes and producers read, each on its own line.
struct GdaRingWords {
  alignas(64) std::uint64_t consumed;   // tickets taken out of the ring
  alignas(64) std::uint64_t started;    // tickets whose source the consumer has read
  alignas(64) std::uint64_t completed;  // tickets whose operation finished
  alignas(64) std::uint32_t failed;     // nonzero: the consumer gave up
};

// Where the consumer returns an operation's value: slot ticket % capacity.
struct alignas(16) GdaResult {
  std::uint64_t value;
  std::uint64_t ready;  // ticket + 1 once value is written; 0: free
};

// What a producer holds, passed by value into kernels.
struct GdaRing {
  GdaDescriptor* slots;
  std::uint32_t capacity;  // a power of two
  std::uint64_t* tickets;  // producers' counter
  GdaRingWords* words;
  GdaResult* results;      // capacity of them
  // Where producers read the consumer's words and returned values: their
  // copy in device memory, or words and results themselves.
  const GdaRingWords* seen_words;
  const GdaResult* seen_results;
  // With FERRY_TRACE: when each slot's descriptor was posted, in ns of the
  // system clock (a GPU's %globaltimer; 0 where unknown); else null.
  std::uint64_t* posted_ns;
};

constexpr std::uint64_t kRingFailed = ~std::uint64_t{0};

namespace detail {

#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
__device__ __forceinline__ std::uint64_t take_ticket(std::uint64_t* tickets) {
  return atomicAdd(reinterpret_cast<unsigned long long*>(tickets), 1ull);
}
__device__ __forceinline__ std::uint64_t load_word(const std::uint64_t* word) {
  return *reinterpret_cast<const volatile std::uint64_t*>(word);
}
__device__ __forceinline__ std::uint32_t load_word(const std::uint32_t* word) {
  return *reinterpret_cast<const volatile std::uint32_t*>(word);
}
__device__ __forceinline__ void publish(std::uint64_t* word, std::uint64_t value) {
  __threadfence_system();  // the body before the mark, as the host sees them
  *reinterpret_cast<volatile std::uint64_t*>(word) = value;
}
// Orders a load of a mark before the loads of what it marks.
__device__ __forceinline__ void acquire_fence() { __threadfence_system(); }
#if defined(__HIP_DEVICE_COMPILE__)
__device__ __forceinline__ std::uint64_t now_ns() { return 0; }  // no clock on the system's time base
#else
__device__ __forceinline__ std::uint64_t now_ns() {
  std::uint64_t now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  return now;
}
#endif
#if defined(__HIP_DEVICE_COMPILE__)
__device__ __forceinline__ void pause(unsigned) { __builtin_amdgcn_s_sleep(1); }
#else
__device__ __forceinline__ void pause(unsigned) { __nanosleep(64); }
#endif
#else
inline std::uint64_t take_ticket(std::uint64_t* tickets) {
  return __atomic_fetch_add(tickets, 1, __ATOMIC_RELAXED);
}
inline std::uint64_t load_word(const std::uint64_t* word) { return __atomic_load_n(word, __ATOMIC_ACQUIRE); }
inline std::uint32_t load_word(const std::uint32_t* word) { return __atomic_load_n(word, __ATOMIC_ACQUIRE); }
inline void publish(std::uint64_t* word, std::uint64_t value) { __atomic_store_n(word, value, __ATOMIC_RELEASE); }
inline void acquire_fence() {}  // load_word acquires
inline std::uint64_t now_ns() {
  timespec now{};
  clock_gettime(CLOCK_REALTIME, &now);
  return static_cast<std::uint64_t>(now.tv_sec) * 1000000000u + static_cast<std::uint64_t>(now.tv_nsec);
}
// The waiting host thread's turn `waited` (0, 1, ...): a few polls back to
// back (a core of its own sees a quick answer at once), then a microsecond's
// sleep a turn, so that where ranks, their proxy threads and the proxies'
// peers share few cores it leaves them the core. (A yield would not: with
// other threads runnable it can give up a whole time slice.)
constexpr unsigned kPollsBeforeSleeping = 256;
inline void pause(unsigned waited) {
  if (waited < kPollsBeforeSleeping) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
    return;
  }
  const timespec microsecond{0, 1000};
  nanosleep(&microsecond, nullptr);
}
#endif

// Polls of a waiting producer between its reads of the host's `failed`.
constexpr unsigned kPollsPerHostCheck = 1024;

// Whether the consumer gave up: its copy says so, or, every
// kPollsPerHostCheck-th turn, the host's word does.
FERRY_GDA_HOST_DEVICE bool gave_up(const GdaRing& ring, unsigned waited) {
  if (load_word(&ring.seen_words->failed) != 0) return true;
  return waited % kPollsPerHostCheck == kPollsPerHostCheck - 1 && load_word(&ring.words->failed) != 0;
}

}  // namespace detail

// Posts *body (its `published` ignored) and returns its ticket, or
// kRingFailed when the consumer gave up while the ring was full.
FERRY_GDA_HOST_DEVICE std::uint64_t post(const GdaRing& ring, const GdaDescriptor& body) {
  const std::uint64_t ticket = detail::take_ticket(ring.tickets);
  for (unsigned waited = 0; ticket - detail::load_word(&ring.seen_words->consumed) >= ring.capacity; ++waited) {
    if (detail::gave_up(ring, waited)) return kRingFailed;
    detail::pause(waited);
  }
  GdaDescriptor* slot = &ring.slots[ticket & (ring.capacity - 1)];
  if (ring.posted_ns) ring.posted_ns[ticket & (ring.capacity - 1)] = detail::now_ns();
  slot->source = body.source;
  slot->offset = body.offset;
  slot->bytes = body.bytes;
  slot->signal_offset = body.signal_offset;
  slot->value = body.value;
  slot->op = body.op;
  slot->signal_op = body.signal_op;
  slot->window = body.window;
  slot->target = body.target;
  slot->producer = body.producer;
  detail::publish(&slot->published, ticket + 1);
  return ticket;
}

namespace detail {

// Waits until the consumer's word passes ticket; false when it gave up first.
FERRY_GDA_HOST_DEVICE bool wait_past(const GdaRing& ring, const std::uint64_t* word, std::uint64_t ticket) {
  for (unsigned waited = 0; load_word(word) <= ticket; ++waited) {
    if (gave_up(ring, waited)) return false;
    pause(waited);
  }
  return true;
}

}  // namespace detail

// Waits until the consumer has read the source of ticket's descriptor (and
// of every earlier one); false when it gave up first.
FERRY_GDA_HOST_DEVICE bool wait_started(const GdaRing& ring, std::uint64_t ticket) {
  return detail::wait_past(ring, &ring.seen_words->started, ticket);
}

// Waits until every operation up to and including ticket has finished;
// false when the consumer gave up first.
FERRY_GDA_HOST_DEVICE bool wait_completed(const GdaRing& ring, std::uint64_t ticket) {
  return detail::wait_past(ring, &ring.seen_words->completed, ticket);
}

// Waits until every operation posted on ring so far, by any producer, has
// finished; false when the consumer gave up first.
FERRY_GDA_HOST_DEVICE bool wait_all_completed(const GdaRing& ring) {
  const std::uint64_t posted = detail::load_word(ring.tickets);
  return posted == 0 || wait_completed(ring, posted - 1);
}

// Waits for the value of ticket's operation (one that returns_value), stores
// it in *value and frees the result slot; false (and *value 0) when the
// consumer gave up first.
FERRY_GDA_HOST_DEVICE bool take_result(const GdaRing& ring, std::uint64_t ticket, std::uint64_t* value) {
  const std::uint64_t index = ticket & (ring.capacity - 1);
  const GdaResult* seen = &ring.seen_results[index];
  *value = 0;
  // Exactly this ticket's mark: a later ticket of the slot may come first.
  for (unsigned waited = 0; detail::load_word(&seen->ready) != ticket + 1; ++waited) {
    if (detail::gave_up(ring, waited)) return false;
    detail::pause(waited);
  }
  detail::acquire_fence();
  *value = detail::load_word(&seen->value);
  detail::publish(&ring.results[index].ready, 0);  // after the value is read
  return true;
}

}  // namespace ferry::gda

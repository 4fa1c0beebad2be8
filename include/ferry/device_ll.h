/* LL: small messages whose words carry their own flags (ferry::device::ll),
 * on the windows of ferry/device.h, which includes this header. */
#ifndef FERRY_DEVICE_LL_H
#define FERRY_DEVICE_LL_H

#if defined(__CUDACC__) || defined(__HIPCC__)
#include "ferry/device.h"

namespace ferry::device {

// ---- LL: small messages that carry their own flags -----------------------------

// Every 4 data bytes travel with a 4-byte flag in one 8-byte store, which
// arrives whole: the receiver knows a word has come when its flag has, so a
// message needs no fence and no separate signal, and one NVLink crossing
// delivers it (to another machine: one network message per lane's share,
// whose words the target's proxy writes whole). The message occupies ll::footprint(bytes) bytes of the
// target's window; each message at one place needs a new nonzero flag
// (e.g. a sequence number).
namespace ll {

__host__ __device__ constexpr std::size_t footprint(std::size_t bytes) { return (bytes + 3) / 4 * 8; }

namespace detail {

#if defined(__HIPCC__)
// AMD: relaxed system-scope 8-byte atomics, a pair as two of them (each
// word still arrives whole, which is all a flagged word needs).
__device__ __forceinline__ void store_word(unsigned long long* at, unsigned data, unsigned flag) {
  const unsigned long long word = (static_cast<unsigned long long>(flag) << 32) | data;
  __hip_atomic_store(at, word, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_SYSTEM);
}
__device__ __forceinline__ void store_two_words(unsigned long long* at, unsigned data0, unsigned data1,
                                                unsigned flag) {
  store_word(at, data0, flag);
  store_word(at + 1, data1, flag);
}
__device__ __forceinline__ unsigned long long load_word(const unsigned long long* at) {
  return __hip_atomic_load(at, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_SYSTEM);
}
__device__ __forceinline__ void load_two_words(const unsigned long long* at, unsigned long long* first,
                                               unsigned long long* second) {
  *first = load_word(at);
  *second = load_word(at + 1);
}
#else
__device__ __forceinline__ void store_word(unsigned long long* at, unsigned data, unsigned flag) {
  const unsigned long long word = (static_cast<unsigned long long>(flag) << 32) | data;
  asm volatile("st.relaxed.sys.u64 [%0], %1;" ::"l"(at), "l"(word) : "memory");
}
// Two words in one 16-byte store (each word still arrives whole).
__device__ __forceinline__ void store_two_words(unsigned long long* at, unsigned data0, unsigned data1,
                                                unsigned flag) {
  const unsigned long long high = static_cast<unsigned long long>(flag) << 32;
  asm volatile("st.relaxed.sys.v2.u64 [%0], {%1, %2};" ::"l"(at), "l"(high | data0), "l"(high | data1) : "memory");
}
__device__ __forceinline__ void load_two_words(const unsigned long long* at, unsigned long long* first,
                                               unsigned long long* second) {
  asm volatile("ld.relaxed.sys.v2.u64 {%0, %1}, [%2];" : "=l"(*first), "=l"(*second) : "l"(at) : "memory");
}
__device__ __forceinline__ unsigned long long load_word(const unsigned long long* at) {
  unsigned long long word;
  asm volatile("ld.relaxed.sys.u64 %0, [%1];" : "=l"(word) : "l"(at) : "memory");
  return word;
}
#endif
// Data word i of a message of bytes, zero-padded past the end.
__device__ __forceinline__ unsigned data_word(const unsigned char* src, std::size_t bytes, std::size_t i) {
  if (4 * i + 4 <= bytes && reinterpret_cast<std::uintptr_t>(src) % 4 == 0)
    return reinterpret_cast<const unsigned*>(src)[i];
  unsigned word = 0;
  for (int b = 0; b < 4 && 4 * i + b < bytes; ++b) word |= static_cast<unsigned>(src[4 * i + b]) << (8 * b);
  return word;
}

}  // namespace detail

// Sends bytes from src to rank's window at offset (8-byte aligned), with
// `lane` of `lanes` cooperating threads (one thread: 0, 1). To another
// machine each lane's share goes through the GDA queue, and the call
// returns once src may be reused.
__device__ __forceinline__ void put(const ferry_window_device_t& w, int rank, std::size_t offset, const void* src,
                                    std::size_t bytes, unsigned flag, unsigned lane = 0, unsigned lanes = 1) {
  ferry::device::detail::in_window(w, rank, offset, footprint(bytes), "ll::put");
  if (!ferry::device::detail::mapped(w, rank)) {
    // Another machine: each lane queues its contiguous share of the words,
    // which the proxy sends as flagged words (whole words at the target).
    const std::size_t words = (bytes + 3) / 4, share = (words + lanes - 1) / lanes;
    const std::size_t first = lane * share, last = first + share < words ? first + share : words;
    if (first >= last) return;
    const std::size_t end_byte = 4 * last < bytes ? 4 * last : bytes;
    if (!ferry::device::detail::global_memory(src)) {
      // Shared or local memory, which the proxy cannot read: each flagged
      // word inside its descriptor.
      for (std::size_t i = first; i < last; ++i) {
        const unsigned long long word = (static_cast<unsigned long long>(flag) << 32) |
                                        detail::data_word(static_cast<const unsigned char*>(src), bytes, i);
        if (ferry::device::detail::post_remote(w, rank, gda::GdaOp::kPutInline, offset + 8 * i, nullptr, 8, 0,
                                               word) == gda::kRingFailed)
          return;
      }
      return;
    }
    const std::uint64_t ticket = ferry::device::detail::post_remote(
        w, rank, gda::GdaOp::kPutFlagged, offset + 8 * first, static_cast<const char*>(src) + 4 * first,
        end_byte - 4 * first, 0, flag);
    if (ticket != gda::kRingFailed) gda::wait_started(ferry::device::detail::queue(w), ticket);
    return;
  }
  auto* at = reinterpret_cast<unsigned long long*>(address(w, rank, offset));
  const auto* data = static_cast<const unsigned char*>(src);
  const std::size_t words = (bytes + 3) / 4;
  if (reinterpret_cast<std::uintptr_t>(at) % 16 == 0) {
    // Pairs of words per 16-byte store: half the stores on the wire.
    for (std::size_t pair = lane; pair < words / 2; pair += lanes)
      detail::store_two_words(at + 2 * pair, detail::data_word(data, bytes, 2 * pair),
                              detail::data_word(data, bytes, 2 * pair + 1), flag);
    if (words % 2 && lane == (words / 2) % lanes)
      detail::store_word(at + words - 1, detail::data_word(data, bytes, words - 1), flag);
    return;
  }
  for (std::size_t i = lane; i < words; i += lanes) detail::store_word(at + i, detail::data_word(data, bytes, i), flag);
}

// Waits until the message at offset in this rank's window carries flag in
// every word, and copies its bytes to dst.
__device__ __forceinline__ void wait(const ferry_window_device_t& w, std::size_t offset, void* dst,
                                     std::size_t bytes, unsigned flag, unsigned lane = 0, unsigned lanes = 1) {
  ferry::device::detail::in_window(w, w.rank, offset, footprint(bytes), "ll::wait");
  const auto* at = reinterpret_cast<const unsigned long long*>(address(w, w.rank, offset));
  auto* out = static_cast<unsigned char*>(dst);
  auto deliver = [&](std::size_t i, unsigned long long word) {
    if (4 * i + 4 <= bytes && reinterpret_cast<std::uintptr_t>(out) % 4 == 0) {
      reinterpret_cast<unsigned*>(out)[i] = static_cast<unsigned>(word);
      return;
    }
    for (int b = 0; b < 4 && 4 * i + b < bytes; ++b) out[4 * i + b] = static_cast<unsigned char>(word >> (8 * b));
  };
  const std::size_t words = (bytes + 3) / 4;
  std::size_t first_single = 0;
  if (reinterpret_cast<std::uintptr_t>(at) % 16 == 0) {
    // Poll pairs of words with one 16-byte load: one memory round trip per pair.
    for (std::size_t pair = lane; pair < words / 2; pair += lanes) {
      unsigned long long a, b;
      do {
        detail::load_two_words(at + 2 * pair, &a, &b);
      } while (static_cast<unsigned>(a >> 32) != flag || static_cast<unsigned>(b >> 32) != flag);
      deliver(2 * pair, a);
      deliver(2 * pair + 1, b);
    }
    first_single = words - words % 2;
    if (first_single == words || lane != (words / 2) % lanes) return;
    lane = 0;
    lanes = 1;
  }
  for (std::size_t i = first_single + lane; i < words; i += lanes) {
    unsigned long long word;
    do {
      word = detail::load_word(at + i);
    } while (static_cast<unsigned>(word >> 32) != flag);
    deliver(i, word);
  }
}

}  // namespace ll

}  // namespace ferry::device
#endif /* __CUDACC__ || __HIPCC__ */

#endif /* FERRY_DEVICE_LL_H */

#include "engine/transport/shm_bootstrap.h"

#include <sched.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <string>

#include "engine/common/params.h"

namespace ferry {
namespace {

// One rank's contribution to one exchange. Two slots per rank alternate by
// the round's parity: a rank that has moved on to round k + 1 writes the
// other slot while slow peers still read its round-k one, and it cannot reach
// round k + 2 before every peer has finished round k + 1.
struct alignas(64) Slot {
  std::atomic<std::uint64_t> round;  // the round whose payload is in place
  char padding[64 - sizeof(std::atomic<std::uint64_t>)];
  unsigned char payload[ShmBootstrap::kSlotPayload];
};
static_assert(sizeof(Slot) == 4096 && offsetof(Slot, payload) == 64, "Slot is shared between processes");
static_assert(std::atomic<std::uint64_t>::is_always_lock_free, "slot rounds are shared between processes");

constexpr int kSlotsPerRank = 2;

Slot* slot_of(SharedSegments& segments, int rank, std::uint64_t round) {
  return reinterpret_cast<Slot*>(segments.segment(rank)) + round % kSlotsPerRank;
}

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

}  // namespace

Status ShmBootstrap::wrap(std::unique_ptr<Bootstrap>* bootstrap) {
  if (!*bootstrap) return Status::kInvalidArgument;
  std::unique_ptr<SharedSegments> segments;
  // Fresh segments are zero: every slot says round 0, nothing published.
  FERRY_CHECK(SharedSegments::create(**bootstrap, nullptr, kSlotsPerRank * sizeof(Slot), &segments));
  bootstrap->reset(new ShmBootstrap(std::move(*bootstrap), std::move(segments)));
  return Status::kOk;
}

Status ShmBootstrap::allgather(const void* mine, void* all, std::size_t bytes) {
  if (bytes > kSlotPayload) return inner_->allgather(mine, all, bytes);
  const std::uint64_t round = ++round_;
  const int n = size();
  const int me = rank();
  Slot* own = slot_of(*segments_, me, round);
  if (bytes > 0) std::memcpy(own->payload, mine, bytes);
  own->round.store(round, std::memory_order_release);

  // Spin briefly (peers usually arrive within microseconds), then yield the
  // core: ranks may outnumber cores. Bounded by FERRY_HANDSHAKE_TIMEOUT.
  constexpr int kSpinsBeforeYield = 4096;
  const auto limit = std::chrono::seconds(params().handshake_timeout);
  const auto start = std::chrono::steady_clock::now();
  for (int r = 0; r < n; ++r) {
    const Slot* peer = slot_of(*segments_, r, round);
    for (unsigned spins = 0; peer->round.load(std::memory_order_acquire) < round; ++spins) {
      if (spins < kSpinsBeforeYield) {
        cpu_relax();
        continue;
      }
      sched_yield();
      if (spins % 256 == 0 && check_peers() != Status::kOk) {
        FERRY_WARN(Bootstrap, "shared-memory exchange %llu among %d ranks: %s has ended",
                   static_cast<unsigned long long>(round), n, last_ended_peer().c_str());
        return Status::kPeerEnded;
      }
      if (spins % 256 == 0 && limit.count() > 0 && std::chrono::steady_clock::now() - start > limit) {
        std::string missing;
        for (int q = r; q < n; ++q)
          if (slot_of(*segments_, q, round)->round.load(std::memory_order_acquire) < round)
            missing += (missing.empty() ? "" : ",") + std::to_string(q);
        FERRY_WARN(Bootstrap, "shared-memory exchange %llu among %d ranks did not complete in %lld s "
                   "(FERRY_HANDSHAKE_TIMEOUT): rank(s) %s not in the same call, or took another route",
                   static_cast<unsigned long long>(round), n, static_cast<long long>(limit.count()),
                   missing.c_str());
        return Status::kTimeout;
      }
    }
    if (bytes > 0) std::memcpy(static_cast<unsigned char*>(all) + r * bytes, peer->payload, bytes);
  }
  return Status::kOk;
}

}  // namespace ferry

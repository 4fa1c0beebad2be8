// A bootstrap for ranks that share one machine, through host shared memory:
// an allgather is a store into this rank's slot and a load from every
// peer's, a fraction of a microsecond instead of a round of MPI messages.
// The engine's per-call handshakes go through it. Exchanges larger than a
// slot go to the bootstrap it wraps, which also made the segments.
#pragma once

#include <cstdint>
#include <memory>

#include "engine/bootstrap/bootstrap.h"
#include "engine/transport/shm.h"

namespace ferry {

class ShmBootstrap final : public Bootstrap {
 public:
  // Payload bytes one rank contributes to one exchange through shared memory.
  static constexpr std::size_t kSlotPayload = 4096 - 64;

  // Collective over bootstrap's ranks, which must share one machine: on
  // success *bootstrap is replaced by a ShmBootstrap that wraps it; on
  // failure (on any rank) it is left as it was, on every rank.
  static Status wrap(std::unique_ptr<Bootstrap>* bootstrap);

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  Status allgather(const void* mine, void* all, std::size_t bytes) override;
  Status barrier() override { return allgather(nullptr, nullptr, 0); }
  // The bootstrap it wraps divides and opens networks.
  Status split(int color, int key, std::unique_ptr<Bootstrap>* part) override {
    return inner_->split(color, key, part);
  }
  std::unique_ptr<NetProvider> open_network() override { return inner_->open_network(); }
  // Watched here and by the bootstrap it wraps (exchanges too large for
  // the slots go there).
  void watch_peers(std::vector<std::int32_t> pids) override {
    inner_->watch_peers(pids);
    Bootstrap::watch_peers(std::move(pids));
  }

 private:
  ShmBootstrap(std::unique_ptr<Bootstrap> inner, std::unique_ptr<SharedSegments> segments)
      : inner_(std::move(inner)), segments_(std::move(segments)) {}

  std::unique_ptr<Bootstrap> inner_;
  std::unique_ptr<SharedSegments> segments_;
  std::uint64_t round_ = 0;  // exchanges so far; the same on every rank
};

}  // namespace ferry

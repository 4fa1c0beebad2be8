#include "mpi_shim/peer_offer_requests.h"

#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "engine/common/log.h"
#include "mpi_shim/peer_claims.h"
#include "mpi_shim/request_registry.h"
#include "mpi_shim/wrapper_support.h"

namespace ferry::shim::peer {

namespace {

struct OfferTable {
  std::mutex mutex;
  // Shared with the completion that finishes each one: once the real MPI has
  // freed its handle, another thread's new offer may take the handle's entry.
  std::unordered_map<MPI_Request, std::shared_ptr<PendingOffer>> offers;
  std::atomic<int> live_offers{0};
  std::unordered_map<MPI_Request, std::unique_ptr<PersistentSend>> persistent_sends;
};

OfferTable& table() {
  static auto* t = new OfferTable;
  return *t;
}

PersistentSend* find_persistent_send(MPI_Request request) {
  OfferTable& t = table();
  std::lock_guard<std::mutex> lock(t.mutex);
  auto it = t.persistent_sends.find(request);
  return it == t.persistent_sends.end() ? nullptr : it->second.get();
}

std::unique_ptr<PersistentSend> take_persistent_send(MPI_Request request) {
  OfferTable& t = table();
  std::lock_guard<std::mutex> lock(t.mutex);
  auto it = t.persistent_sends.find(request);
  if (it == t.persistent_sends.end()) return nullptr;
  std::unique_ptr<PersistentSend> entry = std::move(it->second);
  t.persistent_sends.erase(it);
  return entry;
}

std::shared_ptr<PendingOffer> find_offer(MPI_Request request) {
  OfferTable& t = table();
  std::lock_guard<std::mutex> lock(t.mutex);
  auto it = t.offers.find(request);
  return it == t.offers.end() ? nullptr : it->second;
}

// An entry left by an offer whose request the real MPI completed and
// another thread's finish_offer has not yet taken is replaced (and no
// longer counted).
std::shared_ptr<PendingOffer> add_offer(MPI_Request request, const Offer& offer, bool persistent) {
  OfferTable& t = table();
  auto n = std::make_shared<PendingOffer>(PendingOffer{offer});
  n->persistent = persistent;
  std::lock_guard<std::mutex> lock(t.mutex);
  if (t.offers.insert_or_assign(request, n).second) t.live_offers.fetch_add(1, std::memory_order_release);
  return n;
}

// After the real MPI completed the request of offer n: gives back what it
// held, once; its entry leaves the table unless a new offer took it.
int finish_offer(MPI_Request request, PendingOffer& n) {
  OfferTable& t = table();
  if (n.released) return MPI_SUCCESS;
  n.released = true;
  {
    std::lock_guard<std::mutex> lock(t.mutex);
    auto it = t.offers.find(request);
    if (it != t.offers.end() && it->second.get() == &n) {
      t.offers.erase(it);
      t.live_offers.fetch_sub(1, std::memory_order_release);
    }
  }
  // Its request completed, so the word came: from the receive once it had
  // copied the buffer, unless this rank ended the offer itself.
  if (n.persistent && n.slot_lost) {
    if (PersistentSend* p = find_persistent_send(request)) p->held.slot = -1;
  }
  return release_offer(n, counters().straight_nonblocking);
}

// finish_offer of a persistent send's current offer (its handle stays the
// application's, so the table finds it).
int finish_persistent_offer(MPI_Request request) {
  const std::shared_ptr<PendingOffer> n = find_offer(request);
  return n ? finish_offer(request, *n) : MPI_SUCCESS;
}

// MPI_Start of a persistent send: its offer, before the real MPI starts the
// request (the receive of the word that ends it).
int start_persistent_send(MPI_Request request) {
  PersistentSend* p = find_persistent_send(request);
  if (!p) return MPI_SUCCESS;
  if (p->held.slot < 0) {
    // Its word was lost to a claim never finished: another one.
    std::uint64_t ticket = 0;
    p->held.slot = take_claim(&ticket);
    if (p->held.slot < 0) {
      FERRY_WARN(Shim, "MPI_Start of a persistent device send: every claim word is in use");
      return raise_error(p->comm, MPI_ERR_OTHER);
    }
  }
  Offer offer;
  bool handled = false;
  const int rc = offer_start(p->id, p->mode, p->e, p->dest, p->tag, p->comm, nullptr, &offer, &handled, &p->held);
  if (!handled) return raise_error(p->comm, MPI_ERR_OTHER);
  add_offer(request, offer, true);
  return rc;
}

bool offers_live() { return table().live_offers.load(std::memory_order_acquire) > 0; }

bool is_offer(MPI_Request request) { return offers_live() && find_offer(request); }

// Withdraws request's offer if it has waited FERRY_PT2PT_CLAIM_US
// unclaimed (its data goes through a bounce buffer, and its request
// completes once it is copied there). wait: returns only once the offer is
// copied or withdrawn, so the real MPI's completion of the request follows
// at once.
void settle_offer(MPI_Request request, bool wait) {
  const std::shared_ptr<PendingOffer> n = offers_live() ? find_offer(request) : nullptr;
  if (!n) return;
  for (int polls = 0;; ++polls) {
    look_at(*n, false);
    if (n->ended || !wait) return;
    claim_what_arrived();
    if (polls > 1024) std::this_thread::yield();
  }
}

// MPI_Request_free of an offer's request: withdrawn now if unclaimed (or
// waited for if claimed), so nothing is held for it after; a persistent
// send's request gives back what it held too.
int free_offer(MPI_Request request) {
  const std::shared_ptr<PendingOffer> n = offers_live() ? find_offer(request) : nullptr;
  int rc = MPI_SUCCESS;
  if (n) {
    for (look_at(*n, true); !n->ended; look_at(*n, true)) std::this_thread::yield();
    rc = finish_offer(request, *n);
  }
  const std::unique_ptr<PersistentSend> persistent = take_persistent_send(request);
  if (persistent && persistent->held.slot >= 0) give_claim(persistent->held.slot);
  return rc;
}

// The request of a send that offers its buffer: while its offer stands it
// is settled before the real MPI completes it, and completes after the
// receives of the same MPI_Waitall.
class OfferedSend : public TrackedRequest {
 public:
  OfferedSend(MPI_Request request, Lifetime lifetime) : TrackedRequest(lifetime), request_(request) {}
  bool settles(MPI_Request handle) const override { return is_offer(handle); }
  Settled settle(MPI_Request handle, bool wait) override {
    settle_offer(handle, wait);
    return {};
  }
  bool completes_last(MPI_Request handle) const override { return is_offer(handle); }
  int free(MPI_Request* handle) override {
    const int withdrawn = free_offer(*handle);
    const int result = PMPI_Request_free(handle);
    return result != MPI_SUCCESS ? result : withdrawn;
  }

 protected:
  MPI_Request request_;  // the handle it was made with
};

// A nonblocking send's offer: the request's completion finishes it.
class NonblockingOffer final : public OfferedSend {
 public:
  NonblockingOffer(MPI_Request request, std::shared_ptr<PendingOffer> offer)
      : OfferedSend(request, Lifetime::kOnce), offer_(std::move(offer)) {}

 private:
  int complete(MPI_Status&) override { return finish_offer(request_, *offer_); }
  std::shared_ptr<PendingOffer> offer_;
};

// A persistent send: each MPI_Start offers anew, the completion of each
// start finishes that offer; not cancellable.
class PersistentOffers final : public OfferedSend {
 public:
  explicit PersistentOffers(MPI_Request request) : OfferedSend(request, Lifetime::kPersistent) {
    make_uncancellable();
  }
  bool starts_alone() const override { return true; }

 private:
  int complete(MPI_Status&) override { return finish_persistent_offer(request_); }
  int on_restart() override { return start_persistent_send(request_); }
};

}  // namespace

void track_offer(MPI_Request request, const Offer& offer) {
  track(request, std::make_unique<NonblockingOffer>(request, add_offer(request, offer, false)));
}

void track_persistent_offers(MPI_Request request, const PersistentSend& send) {
  {
    OfferTable& t = table();
    std::lock_guard<std::mutex> lock(t.mutex);
    t.persistent_sends[request] = std::make_unique<PersistentSend>(send);
  }
  track(request, std::make_unique<PersistentOffers>(request));
}

}  // namespace ferry::shim::peer
